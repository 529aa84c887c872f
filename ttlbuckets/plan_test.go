package ttlbuckets_test

import (
	"errors"
	"math"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/delaykit/rabbitdelay/internal/laddertest"
	"github.com/delaykit/rabbitdelay/ttlbuckets"
)

var modes = laddertest.Modes

func TestPlanEdges(t *testing.T) {
	for _, c := range laddertest.EdgeLadders() {
		t.Run(c.Name, func(t *testing.T) { testPlanEdges(t, c.Ladder) })
	}
}

func testPlanEdges(t *testing.T, l ttlbuckets.Ladder) {
	if err := l.Validate(); err != nil {
		t.Fatal(err)
	}
	checkLadder(t, l)
	lw := l.WithDefaults()
	u, r, levels := lw.Unit, lw.Radix, l.Levels()
	allDigits := time.Duration(math.Pow(float64(r), float64(levels))-1) * u
	for _, d := range laddertest.EdgeDelays(l) {
		for _, mode := range modes {
			p, err := l.Plan(d, mode)
			checkPlan(t, l, d, mode, p, err)
		}
	}
	// The specific outcomes at the edges.
	for _, d := range []time.Duration{1, u - 1} {
		p, err := l.Plan(d, ttlbuckets.RoundUp)
		want := []ttlbuckets.Hop{{Level: 0, Digit: 1, TTL: int64(u / time.Millisecond)}}
		if err != nil || p.Effective != u || !p.Rounded || p.Entry != 0 || !slices.Equal(p.Hops, want) {
			t.Errorf("Plan(%v) = %+v, %v; want one unit, rounded, one hop at level 0", d, p, err)
		}
		if _, err := l.Plan(d, ttlbuckets.Strict); !errors.Is(err, ttlbuckets.ErrNotWholeUnit) {
			t.Errorf("Plan(%v, Strict) error = %v", d, err)
		}
	}
	for _, mode := range modes {
		p, err := l.Plan(u, mode)
		if err != nil || p.Effective != u || p.Rounded || len(p.Hops) != 1 {
			t.Errorf("Plan(unit, %v) = %+v, %v", mode, p, err)
		}
		if _, err := l.Plan(lw.Max+1, mode); !errors.Is(err, ttlbuckets.ErrDelayTooLong) {
			t.Errorf("Plan(Max+1ns, %v) error = %v", mode, err)
		}
		for _, d := range []time.Duration{0, -1, math.MinInt64} {
			p, err := l.Plan(d, mode)
			if err != nil || p.Entry != -1 || p.Hops != nil || p.Effective != 0 || p.Requested != d {
				t.Errorf("Plan(%v, %v) = %+v, %v", d, mode, p, err)
			}
		}
	}
	p, err := l.Plan(lw.Max, ttlbuckets.RoundUp)
	if err != nil || p.Effective < lw.Max || p.Effective-lw.Max >= u {
		t.Errorf("Plan(Max) = %+v, %v", p, err)
	}
	if allDigits <= lw.Max {
		p, err := l.Plan(allDigits, ttlbuckets.Strict)
		// Top-split takes the highest level twice: r-1-u units first, u last.
		split := lw.Order == ttlbuckets.TopSplit && levels > 1 && r > 2
		want := levels
		if split {
			want++
		}
		if err != nil || len(p.Hops) != want {
			t.Fatalf("Plan(all digits %d) = %+v, %v", r-1, p, err)
		}
		hops := p.Hops
		if split {
			u := splitLast(p.Digits, r, levels-1)
			if first, last := hops[0], hops[levels]; first.Level != levels-1 || first.Digit != r-1-u || last.Level != levels-1 || last.Digit != u {
				t.Errorf("Plan(all digits): top-split hops %+v", hops)
			}
			hops = hops[1:levels]
		}
		for _, h := range hops {
			if h.Digit != r-1 {
				t.Errorf("Plan(all digits): hop %+v", h)
			}
		}
	}
}

func TestPlanKnown(t *testing.T) {
	// 90 minutes = 5,400,000 ms = 0x5265C0.
	climb := []ttlbuckets.Hop{{1, 12, 192}, {2, 5, 1280}, {3, 6, 24576}, {4, 2, 131072}, {5, 5, 5242880}}
	descend := slices.Clone(climb)
	slices.Reverse(descend)
	for _, tc := range []struct {
		order ttlbuckets.Order
		entry int
		hops  []ttlbuckets.Hop
	}{
		{ttlbuckets.ShortestFirst, 1, climb},
		{ttlbuckets.LongestFirst, 5, descend},
		{ttlbuckets.TopFirst, 5, append([]ttlbuckets.Hop{climb[4]}, climb[:4]...)},
		{ttlbuckets.TopSplit, 5, append(append([]ttlbuckets.Hop{{5, 4, 4194304}}, climb[:4]...), ttlbuckets.Hop{5, 1, 1048576})},
	} {
		l := ttlbuckets.Ladder{Order: tc.order}
		p, err := l.Plan(90*time.Minute, ttlbuckets.Strict)
		if err != nil {
			t.Fatal(err)
		}
		want := ttlbuckets.Plan{
			Requested: 90 * time.Minute, Effective: 90 * time.Minute,
			Digits: []int{0, 12, 5, 6, 2, 5, 0, 0}, Entry: tc.entry, Hops: tc.hops,
		}
		if p.Requested != want.Requested || p.Effective != want.Effective || p.Rounded || p.Entry != want.Entry ||
			!slices.Equal(p.Digits, want.Digits) || !slices.Equal(p.Hops, want.Hops) {
			t.Errorf("%v: Plan(90m) = %+v, want %+v", tc.order, p, want)
		}
	}
	// Top-split: 90 min 7 ms = 0x5265C7 ms. The lower digits are worth 0x265C7 = 157,127 ms,
	// and 157,127 mod (5-1) = 3, so 4 units of level 5 go last and 1 first.
	p, err := ttlbuckets.Ladder{Order: ttlbuckets.TopSplit}.Plan(90*time.Minute+7*time.Millisecond, ttlbuckets.Strict)
	want := []ttlbuckets.Hop{{5, 1, 1048576}, {0, 7, 7}, {1, 12, 192}, {2, 5, 1280}, {3, 6, 24576}, {4, 2, 131072}, {5, 4, 4194304}}
	if err != nil || !slices.Equal(p.Hops, want) {
		t.Errorf("top-split: Plan(90m7ms) hops %+v, %v; want %+v", p.Hops, err, want)
	}
	// Top-split with a highest digit of 1 takes the top-first route: 78 s 5 ms = 0x130B5 ms,
	// level 4 first, then the others from level 0 up; the last hop is level 3's.
	p, err = ttlbuckets.Ladder{Order: ttlbuckets.TopSplit}.Plan(78*time.Second+5*time.Millisecond, ttlbuckets.Strict)
	want = []ttlbuckets.Hop{{4, 1, 65536}, {0, 5, 5}, {1, 11, 176}, {3, 3, 12288}}
	if err != nil || !slices.Equal(p.Hops, want) || p.Entry != 4 {
		t.Errorf("top-split: Plan(78.005s) hops %+v, Entry %d, %v; want %+v, Entry 4", p.Hops, p.Entry, err, want)
	}
}

func TestPlanMaxNotWholeUnits(t *testing.T) {
	// Max 25ms with a 10 ms unit: capacity ceil(2.5) = 3 units, 2 binary levels.
	l := ttlbuckets.Ladder{Unit: 10 * time.Millisecond, Radix: 2, Max: 25 * time.Millisecond}
	if l.Levels() != 2 {
		t.Fatalf("Levels() = %d", l.Levels())
	}
	for _, tc := range []struct {
		d         time.Duration
		effective time.Duration
		tooLong   bool
	}{
		{20 * time.Millisecond, 20 * time.Millisecond, false},
		{24 * time.Millisecond, 30 * time.Millisecond, false}, // beyond Max by < 1 unit, within capacity
		{25 * time.Millisecond, 30 * time.Millisecond, false},
		{25*time.Millisecond + 1, 0, true},
		{30 * time.Millisecond, 0, true}, // within capacity, but above Max
	} {
		p, err := l.Plan(tc.d, ttlbuckets.RoundUp)
		if tc.tooLong != errors.Is(err, ttlbuckets.ErrDelayTooLong) || (!tc.tooLong && p.Effective != tc.effective) {
			t.Errorf("Plan(%v) = %v, %v; want %v (too long %v)", tc.d, p.Effective, err, tc.effective, tc.tooLong)
		}
		checkPlan(t, l, tc.d, ttlbuckets.RoundUp, p, err)
		p, err = l.Plan(tc.d, ttlbuckets.Strict)
		checkPlan(t, l, tc.d, ttlbuckets.Strict, p, err)
	}
	if !l.Exact(20*time.Millisecond) || l.Exact(30*time.Millisecond) || l.Exact(25*time.Millisecond) {
		t.Error("Exact disagrees with Max")
	}
}

func TestPlanErrorMessages(t *testing.T) {
	l := ttlbuckets.Ladder{}.WithDefaults()
	_, err := l.Plan(50*24*time.Hour, ttlbuckets.RoundUp)
	if want := "ttlbuckets: delay too long: 1200h0m0s is above the ladder's maximum (Max) of 1193h2m47.295s (4294967295 ms)"; err == nil || err.Error() != want {
		t.Errorf("too long: %v\nwant %s", err, want)
	}
	_, err = l.Plan(1500*time.Microsecond, ttlbuckets.Strict)
	if want := "ttlbuckets: delay not a whole number of units: 1.5ms is not a whole number of the ladder's Unit 1ms (Strict rounding)"; err == nil || err.Error() != want {
		t.Errorf("not whole: %v\nwant %s", err, want)
	}
	// A Rounding that is neither RoundUp nor Strict is as strict as Strict.
	if _, err := l.Plan(1500*time.Microsecond, ttlbuckets.Rounding(9)); !errors.Is(err, ttlbuckets.ErrNotWholeUnit) {
		t.Errorf("Rounding(9): %v", err)
	}
}

func TestExact(t *testing.T) {
	l := ttlbuckets.Ladder{Unit: 5 * time.Millisecond, Max: time.Second}
	for d, want := range map[time.Duration]bool{
		0: true, -5 * time.Millisecond: false, -1: false, 1: false, 5 * time.Millisecond: true,
		7 * time.Millisecond: false, time.Second: true, time.Second + 5*time.Millisecond: false,
	} {
		if got := l.Exact(d); got != want {
			t.Errorf("Exact(%v) = %v, want %v", d, got, want)
		}
		if d > 0 {
			_, err := l.Plan(d, ttlbuckets.Strict)
			if (err == nil) != want {
				t.Errorf("Exact(%v) = %v, but Plan(Strict) error = %v", d, want, err)
			}
		}
	}
}

func TestPlanConcurrent(t *testing.T) {
	l := ttlbuckets.Ladder{}.WithDefaults()
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 1000 {
				d := time.Duration(g*1000+i) * 7919 * time.Microsecond
				p, err := l.Plan(d, ttlbuckets.RoundUp)
				if err != nil || p.Effective < d {
					t.Errorf("Plan(%v) = %+v, %v", d, p, err)
					return
				}
			}
		})
	}
	wg.Wait()
}
