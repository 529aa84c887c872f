package route_test

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/delaykit/rabbitdelay/internal/laddertest"
	"github.com/delaykit/rabbitdelay/internal/route"
	"github.com/delaykit/rabbitdelay/ttlbuckets"
)

func TestDelayQueues(t *testing.T) {
	b, err := ttlbuckets.NewBuckets(time.Minute, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	l := ttlbuckets.Ladder{}.WithDefaults()
	qs := route.DelayQueues(l, b)
	if len(qs) != 122 {
		t.Fatalf("%d queues, want 122", len(qs))
	}
	for i, q := range route.Queues(l) {
		if want := (route.DelayQueue{Kind: route.LadderKind, Level: q.Level, Digit: q.Digit, TTL: q.TTL}); qs[i] != want {
			t.Fatalf("queue %d = %+v, want %+v", i, qs[i], want)
		}
	}
	wantBuckets := []route.DelayQueue{{Kind: route.BucketKind, Level: -1, Digit: -1, TTL: 5000}, {Kind: route.BucketKind, Level: -1, Digit: -1, TTL: 60000}}
	if !slices.Equal(qs[120:], wantBuckets) {
		t.Errorf("buckets = %+v", qs[120:])
	}
	if again := route.DelayQueues(l, b); !slices.Equal(again, qs) {
		t.Error("DelayQueues is not stable")
	}
	if got := route.DelayQueues(ttlbuckets.Ladder{Radix: 3}, b); !slices.Equal(got, wantBuckets) {
		t.Errorf("invalid ladder: %+v", got)
	}
	if got := route.DelayQueues(ttlbuckets.Ladder{Max: 15 * time.Millisecond, Radix: 4}, ttlbuckets.Buckets{}); len(got) != 6 {
		t.Errorf("small ladder, no buckets: %+v", got)
	}
	if route.LadderKind.String() != "ladder" || route.BucketKind.String() != "bucket" || route.QueueKind(4).String() != "QueueKind(4)" {
		t.Error("QueueKind names")
	}
}

func TestNext(t *testing.T) {
	l := ttlbuckets.Ladder{Max: 4095 * time.Millisecond} // 3 levels
	type step struct {
		next int
		ok   bool
	}
	for _, tc := range []struct {
		order ttlbuckets.Order
		want  []step // for levels -1..3
	}{
		{ttlbuckets.ShortestFirst, []step{{-1, false}, {1, true}, {2, true}, {-1, false}, {-1, false}}},
		{ttlbuckets.LongestFirst, []step{{-1, false}, {-1, false}, {0, true}, {1, true}, {-1, false}}},
		{ttlbuckets.TopFirst, []step{{-1, false}, {1, true}, {2, true}, {-1, false}, {-1, false}}},
		{ttlbuckets.TopSplit, []step{{-1, false}, {1, true}, {2, true}, {-1, false}, {-1, false}}},
	} {
		l.Order = tc.order
		for i, w := range tc.want {
			if next, ok := route.Next(l, i-1); next != w.next || ok != w.ok {
				t.Errorf("%v: Next(%d) = %d, %v; want %d, %v", tc.order, i-1, next, ok, w.next, w.ok)
			}
		}
	}
	// A one-level ladder hands straight to the dispatch exchange in both orders.
	for _, o := range orders {
		one := ttlbuckets.Ladder{Max: 15 * time.Millisecond, Order: o}
		if next, ok := route.Next(one, 0); one.Levels() != 1 || next != -1 || ok {
			t.Errorf("%v: one level: Next(0) = %d, %v", o, next, ok)
		}
	}
}

// The tests below run Queues, Next and the headers over the ladders and delays that package
// ttlbuckets' tests run Levels and Plan over.

func TestDefaultLadderQueues(t *testing.T) {
	l := ttlbuckets.Ladder{}.WithDefaults()
	if len(route.Queues(l)) != 120 {
		t.Fatalf("default ladder: %d queues; want 120", len(route.Queues(l)))
	}
	qs := route.Queues(l)
	if first, last := qs[0], qs[len(qs)-1]; first != (route.LadderQueue{Level: 0, Digit: 1, TTL: 1}) ||
		last != (route.LadderQueue{Level: 7, Digit: 15, TTL: 15 << 28}) {
		t.Fatalf("first/last queue = %+v, %+v", first, last)
	}
	checkQueues(t, l)
	checkQueues(t, ttlbuckets.Ladder{})
}

func TestQueueCountsPerRadix(t *testing.T) {
	// The table in ttlbuckets' package documentation, for the default maximum.
	want := map[int][2]int{2: {32, 32}, 4: {16, 48}, 8: {11, 77}, 16: {8, 120}, 32: {7, 217}, 64: {6, 378}}
	for _, r := range radixes {
		l := ttlbuckets.Ladder{Radix: r}
		if got := [2]int{l.Levels(), len(route.Queues(l))}; got != want[r] {
			t.Errorf("radix %d: levels, queues = %v, want %v", r, got, want[r])
		}
		for _, o := range orders {
			l.Order = o
			checkQueues(t, l)
		}
	}
}

func TestQueuesWhenMaxNotWholeUnits(t *testing.T) {
	for _, tc := range []struct {
		unit, max time.Duration
		radix     int
	}{
		{10 * time.Millisecond, 15 * time.Millisecond, 2},
		{10 * time.Millisecond, 10 * time.Millisecond, 2},
		{10 * time.Millisecond, 20 * time.Millisecond, 2},
		{10 * time.Millisecond, 30 * time.Millisecond, 2},
		{10 * time.Millisecond, 30*time.Millisecond + 1, 2},
		{time.Millisecond, 15 * time.Millisecond, 16},
		{time.Millisecond, 15*time.Millisecond + 1, 16},
		{time.Millisecond, 16 * time.Millisecond, 16},
		{time.Millisecond, 255 * time.Millisecond, 16},
		{time.Millisecond, 255*time.Millisecond + 1, 16},
	} {
		checkQueues(t, ttlbuckets.Ladder{Unit: tc.unit, Radix: tc.radix, Max: tc.max})
	}
}

func TestQueuesAtLimits(t *testing.T) {
	// The largest valid Max for each radix at 1 ms: the longest queue stays within
	// MaxQueueTTL.
	for r, maxMs := range map[int]int64{2: 1<<39 - 1, 4: 1<<38 - 1, 8: 1<<36 - 1, 16: 1<<36 - 1, 32: 1<<35 - 1, 64: 1<<36 - 1} {
		checkQueues(t, ttlbuckets.Ladder{Radix: r, Max: time.Duration(maxMs) * time.Millisecond})
	}
	// A unit whose level-0 queues reach the limit exactly.
	checkQueues(t, ttlbuckets.Ladder{Unit: time.Duration(ttlbuckets.MaxQueueTTL) * time.Millisecond, Radix: 2, Max: time.Duration(ttlbuckets.MaxQueueTTL) * time.Millisecond})
}

func TestRouteEdges(t *testing.T) {
	for _, c := range laddertest.EdgeLadders() {
		t.Run(c.Name, func(t *testing.T) { testRouteEdges(t, c.Ladder) })
	}
}

func testRouteEdges(t *testing.T, l ttlbuckets.Ladder) {
	if err := l.Validate(); err != nil {
		t.Fatal(err)
	}
	checkQueues(t, l)
	delays := laddertest.EdgeDelays(l)
	for _, d := range delays {
		for _, mode := range modes {
			checkRoute(t, l, d, mode)
		}
	}
}

func TestRouteMaxNotWholeUnits(t *testing.T) {
	// Max 25ms with a 10 ms unit: capacity ceil(2.5) = 3 units, 2 binary levels.
	l := ttlbuckets.Ladder{Unit: 10 * time.Millisecond, Radix: 2, Max: 25 * time.Millisecond}
	checkQueues(t, l)
	for _, d := range []time.Duration{20 * time.Millisecond, 24 * time.Millisecond, 25 * time.Millisecond, 25*time.Millisecond + 1, 30 * time.Millisecond} {
		for _, mode := range modes {
			checkRoute(t, l, d, mode)
		}
	}
}

// TestInvalidLadder: on every invalid ladder of ttlbuckets' TestValidate, DecodeDigits
// returns Validate's error, Queues nil, Next (-1, false), and EncodeDigits and EncodeRoute set
// nothing.
func TestInvalidLadder(t *testing.T) {
	for _, l := range []ttlbuckets.Ladder{
		{Unit: -time.Millisecond}, {Unit: time.Microsecond}, {Unit: 1}, {Unit: 1500 * time.Microsecond},
		{Radix: 1}, {Radix: 3}, {Radix: 6}, {Radix: 128}, {Radix: -16},
		{Max: -time.Second}, {Unit: 10 * time.Millisecond, Max: 9 * time.Millisecond}, {Max: time.Millisecond - 1},
		{Order: 4}, {Max: 3 * 365 * 24 * time.Hour}, {Radix: 2, Max: (1 << 39) * time.Millisecond},
		{Unit: 30 * 365 * 24 * time.Hour, Radix: 4, Max: 30 * 365 * 24 * time.Hour},
		{Unit: -1, Radix: 5, Max: -1, Order: -1}, {Unit: 1, Order: 9}, {Radix: 10, Max: time.Microsecond},
		{Max: 3 * 365 * 24 * time.Hour, Order: 4},
	} {
		if l.Validate() == nil {
			t.Fatalf("%+v: valid", l)
		}
		if _, derr := route.DecodeDigits(l, nil); !errors.Is(derr, ttlbuckets.ErrInvalidLadder) {
			t.Errorf("%+v: DecodeDigits error = %v", l, derr)
		}
		if route.Queues(l) != nil {
			t.Errorf("%+v: invalid ladder: Queues %d", l, len(route.Queues(l)))
		}
		if next, ok := route.Next(l, 0); next != -1 || ok {
			t.Errorf("%+v: invalid ladder: Next(0) = %d, %v", l, next, ok)
		}
		h := map[string]any{}
		route.EncodeDigits(l, ttlbuckets.Plan{Digits: []int{1}}, h)
		route.EncodeRoute(l, ttlbuckets.Plan{Digits: []int{1}, Hops: []ttlbuckets.Hop{{Level: 0, Digit: 1, TTL: 1}}}, h)
		if len(h) != 0 {
			t.Errorf("%+v: invalid ladder: EncodeDigits or EncodeRoute set %v", l, h)
		}
		if v := route.LastHopValue(l, 3); v != 3 {
			t.Errorf("%+v: invalid ladder: LastHopValue(3) = %d, want 3", l, v)
		}
		for _, mode := range modes {
			checkRoute(t, l, time.Second, mode)
		}
	}
}
