package ttlbuckets_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/delaykit/rabbitdelay/ttlbuckets"
)

func TestDefaultLadder(t *testing.T) {
	l := ttlbuckets.Ladder{Unit: ttlbuckets.DefaultUnit, Radix: ttlbuckets.DefaultRadix, Max: ttlbuckets.DefaultMax, Order: ttlbuckets.TopSplit}
	if got := (ttlbuckets.Ladder{}).WithDefaults(); got != l {
		t.Fatalf("zero Ladder with defaults = %+v, want %+v", got, l)
	}
	if l.Unit != time.Millisecond || l.Radix != 16 {
		t.Fatalf("default Unit, Radix = %v, %d; want 1ms, 16", l.Unit, l.Radix)
	}
	if err := l.Validate(); err != nil {
		t.Fatal(err)
	}
	if err := (ttlbuckets.Ladder{}).Validate(); err != nil {
		t.Fatalf("zero Ladder: %v", err)
	}
	if l.Levels() != 8 {
		t.Fatalf("default ladder: %d levels; want 8", l.Levels())
	}
	if ttlbuckets.DefaultMax < 30*24*time.Hour || ttlbuckets.DefaultMax != (1<<32-1)*time.Millisecond {
		t.Fatalf("DefaultMax = %v", ttlbuckets.DefaultMax)
	}
	// The maximum is all digits 15: 8 hops, and with the default order, top-split, 9: the
	// most there are.
	p, err := l.Plan(ttlbuckets.DefaultMax, ttlbuckets.Strict)
	if err != nil || len(p.Hops) != 9 {
		t.Fatalf("Plan(DefaultMax) = %+v, %v", p, err)
	}
	checkLadder(t, l)
	checkLadder(t, ttlbuckets.Ladder{})
}

func TestQueueCountsPerRadix(t *testing.T) {
	// The table in the package documentation, for the default maximum: levels, and
	// Levels·(Radix-1) queues. (Queues itself is checked in package internal/route.)
	want := map[int][2]int{2: {32, 32}, 4: {16, 48}, 8: {11, 77}, 16: {8, 120}, 32: {7, 217}, 64: {6, 378}}
	for _, r := range radixes {
		l := ttlbuckets.Ladder{Radix: r}
		if got := [2]int{l.Levels(), l.Levels() * (r - 1)}; got != want[r] {
			t.Errorf("radix %d: levels, queues = %v, want %v", r, got, want[r])
		}
		for _, o := range orders {
			l.Order = o
			checkLadder(t, l)
		}
	}
}

func TestLevelsWhenMaxNotWholeUnits(t *testing.T) {
	for _, tc := range []struct {
		unit, max time.Duration
		radix     int
		levels    int
	}{
		// ceil(15ms/10ms) = 2 units needs 2 binary digits, though 2^1*10ms > 15ms.
		{10 * time.Millisecond, 15 * time.Millisecond, 2, 2},
		{10 * time.Millisecond, 10 * time.Millisecond, 2, 1},
		{10 * time.Millisecond, 20 * time.Millisecond, 2, 2},
		{10 * time.Millisecond, 30 * time.Millisecond, 2, 2},
		{10 * time.Millisecond, 30*time.Millisecond + 1, 2, 3},
		{time.Millisecond, 15 * time.Millisecond, 16, 1},
		// ceil(15.000001ms/1ms) = 16 units needs 2 hex digits, though 16*1ms > 15.000001ms.
		{time.Millisecond, 15*time.Millisecond + 1, 16, 2},
		{time.Millisecond, 16 * time.Millisecond, 16, 2},
		{time.Millisecond, 255 * time.Millisecond, 16, 2},
		{time.Millisecond, 255*time.Millisecond + 1, 16, 3},
	} {
		l := ttlbuckets.Ladder{Unit: tc.unit, Radix: tc.radix, Max: tc.max}
		if got := l.Levels(); got != tc.levels {
			t.Errorf("%+v: Levels() = %d, want %d", l, got, tc.levels)
		}
		checkLadder(t, l)
	}
}

func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		name   string
		ladder ttlbuckets.Ladder
		want   []string // one entry per problem: substrings of that problem's message
	}{
		{"negative unit", ttlbuckets.Ladder{Unit: -time.Millisecond},
			[]string{"Unit -1ms: allowed a whole number of milliseconds, at least 1ms"}},
		{"unit below 1ms", ttlbuckets.Ladder{Unit: time.Microsecond},
			[]string{"Unit 1µs: allowed a whole number of milliseconds, at least 1ms"}},
		{"unit 1ns", ttlbuckets.Ladder{Unit: 1},
			[]string{"Unit 1ns:"}},
		{"unit not whole ms", ttlbuckets.Ladder{Unit: 1500 * time.Microsecond},
			[]string{"Unit 1.5ms: allowed a whole number of milliseconds"}},
		{"radix 1", ttlbuckets.Ladder{Radix: 1},
			[]string{"Radix 1: allowed a power of two from 2 to 64"}},
		{"radix 3", ttlbuckets.Ladder{Radix: 3}, []string{"Radix 3: allowed a power of two from 2 to 64"}},
		{"radix 6", ttlbuckets.Ladder{Radix: 6}, []string{"Radix 6:"}},
		{"radix 128", ttlbuckets.Ladder{Radix: 128}, []string{"Radix 128: allowed a power of two from 2 to 64 (2, 4, 8, 16, 32 or 64)"}},
		{"radix negative", ttlbuckets.Ladder{Radix: -16}, []string{"Radix -16:"}},
		{"max negative", ttlbuckets.Ladder{Max: -time.Second}, []string{"Max -1s: allowed at least one Unit (1ms)"}},
		{"max below unit", ttlbuckets.Ladder{Unit: 10 * time.Millisecond, Max: 9 * time.Millisecond},
			[]string{"Max 9ms: allowed at least one Unit (10ms)"}},
		{"max just below unit", ttlbuckets.Ladder{Max: time.Millisecond - 1},
			[]string{"Max 999.999µs: allowed at least one Unit (1ms)"}},
		{"order", ttlbuckets.Ladder{Order: 4}, []string{"Order 4: allowed 0 (top-split), 1 (shortest-first), 2 (longest-first) or 3 (top-first)"}},
		{"max over TTL limit", ttlbuckets.Ladder{Max: 3 * 365 * 24 * time.Hour},
			[]string{"Max 26280h0m0s: needs 10 levels, whose longest queue (level 9, digit 15) would have x-message-ttl 1030792151040 ms, above RabbitMQ's limit of 315360000000 ms; allowed with Unit 1ms and Radix 16: 1ms to 19088h44m36.735s (68719476735 ms)"}},
		{"max just over TTL limit radix 2", ttlbuckets.Ladder{Radix: 2, Max: (1 << 39) * time.Millisecond},
			[]string{"Max 152709h56m53.888s: needs 40 levels, whose longest queue (level 39, digit 1) would have x-message-ttl 549755813888 ms, above RabbitMQ's limit of 315360000000 ms; allowed with Unit 1ms and Radix 2: 1ms to 152709h56m53.887s (549755813887 ms)"}},
		{"unit over TTL limit", ttlbuckets.Ladder{Unit: 30 * 365 * 24 * time.Hour, Radix: 4, Max: 30 * 365 * 24 * time.Hour},
			[]string{"Unit 262800h0m0s: level 0's queue for digit 3 would have x-message-ttl 2838240000000 ms, above RabbitMQ's limit of 315360000000 ms; allowed with Radix 4: 1ms to 29200h0m0s (105120000000 ms)"}},
		{"everything at once", ttlbuckets.Ladder{Unit: -1, Radix: 5, Max: -1, Order: -1},
			[]string{"Unit -1ns", "Radix 5", "Max -1ns: allowed at least one Unit (at least 1ms)", "Order -1"}},
		{"unit and order", ttlbuckets.Ladder{Unit: 1, Order: 9},
			[]string{"Unit 1ns", "Order 9"}},
		{"radix and max", ttlbuckets.Ladder{Radix: 10, Max: time.Microsecond},
			[]string{"Radix 10", "Max 1µs"}},
		{"order and TTL", ttlbuckets.Ladder{Max: 3 * 365 * 24 * time.Hour, Order: 4},
			[]string{"Order 4", "Max 26280h0m0s: needs 10 levels"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.ladder.Validate()
			if !errors.Is(err, ttlbuckets.ErrInvalidLadder) {
				t.Fatalf("Validate() = %v, want ErrInvalidLadder", err)
			}
			errs := unwrapAll(err)
			if len(errs) != len(tc.want) {
				t.Fatalf("Validate() reported %d problems, want %d:\n%v", len(errs), len(tc.want), err)
			}
			for i, e := range errs {
				if !errors.Is(e, ttlbuckets.ErrInvalidLadder) || !strings.HasPrefix(e.Error(), "ttlbuckets: invalid ladder: ") {
					t.Errorf("problem %d = %q, does not wrap ErrInvalidLadder", i, e)
				}
				if !strings.Contains(e.Error(), tc.want[i]) {
					t.Errorf("problem %d = %q, want it to contain %q", i, e, tc.want[i])
				}
			}
			// Every method that needs a valid ladder says so.
			if _, perr := tc.ladder.Plan(time.Second, ttlbuckets.RoundUp); !errors.Is(perr, ttlbuckets.ErrInvalidLadder) {
				t.Errorf("Plan error = %v", perr)
			}
			if _, perr := tc.ladder.Plan(0, ttlbuckets.RoundUp); !errors.Is(perr, ttlbuckets.ErrInvalidLadder) {
				t.Errorf("Plan(0) error = %v", perr)
			}
			if tc.ladder.Levels() != 0 || tc.ladder.Exact(time.Millisecond) {
				t.Errorf("invalid ladder: Levels %d, Exact true", tc.ladder.Levels())
			}
		})
	}
}

func TestValidateLimits(t *testing.T) {
	// The largest valid Max for each radix at 1 ms, as the package documentation states,
	// and one nanosecond more fails.
	for r, maxMs := range map[int]int64{2: 1<<39 - 1, 4: 1<<38 - 1, 8: 1<<36 - 1, 16: 1<<36 - 1, 32: 1<<35 - 1, 64: 1<<36 - 1} {
		l := ttlbuckets.Ladder{Radix: r, Max: time.Duration(maxMs) * time.Millisecond}
		if err := l.Validate(); err != nil {
			t.Errorf("radix %d, Max %d ms: %v", r, maxMs, err)
		}
		checkLadder(t, l)
		l.Max++
		err := l.Validate()
		if !errors.Is(err, ttlbuckets.ErrInvalidLadder) || !strings.Contains(err.Error(), fmt.Sprintf("(%d ms)", maxMs)) {
			t.Errorf("radix %d, Max %d ms + 1ns: %v", r, maxMs, err)
		}
	}
	// A unit whose level-0 queues reach the limit exactly is valid.
	l := ttlbuckets.Ladder{Unit: time.Duration(ttlbuckets.MaxQueueTTL) * time.Millisecond, Radix: 2, Max: time.Duration(ttlbuckets.MaxQueueTTL) * time.Millisecond}
	if err := l.Validate(); err != nil || l.Levels() != 1 {
		t.Errorf("unit = MaxQueueTTL: %v, %d levels", err, l.Levels())
	}
	checkLadder(t, l)
	// The largest Duration does not overflow anything.
	for _, r := range radixes {
		for _, unit := range []time.Duration{time.Millisecond, time.Hour, 1<<63 - 1 - (1<<63-1)%time.Millisecond} {
			l := ttlbuckets.Ladder{Unit: unit, Radix: r, Max: 1<<63 - 1}
			if err := l.Validate(); !errors.Is(err, ttlbuckets.ErrInvalidLadder) {
				t.Errorf("%+v: Validate() = %v", l, err)
			}
		}
	}
}

func TestOrderText(t *testing.T) {
	for _, tc := range []struct {
		text string
		want ttlbuckets.Order
	}{
		{"shortest-first", ttlbuckets.ShortestFirst},
		{"longest-first", ttlbuckets.LongestFirst},
		{" Longest-First\n", ttlbuckets.LongestFirst},
		{"SHORTEST-FIRST", ttlbuckets.ShortestFirst},
		{"top-first", ttlbuckets.TopFirst},
		{"Top-Split", ttlbuckets.TopSplit},
		{"", ttlbuckets.TopSplit},
	} {
		got, err := ttlbuckets.ParseOrder(tc.text)
		if err != nil || got != tc.want {
			t.Errorf("ParseOrder(%q) = %v, %v; want %v", tc.text, got, err, tc.want)
		}
		o := ttlbuckets.Order(7)
		if err := o.UnmarshalText([]byte(tc.text)); err != nil || o != tc.want {
			t.Errorf("UnmarshalText(%q) = %v, %v", tc.text, o, err)
		}
	}
	for _, bad := range []string{"shortest", "longest_first", "1", "fifo"} {
		_, err := ttlbuckets.ParseOrder(bad)
		if !errors.Is(err, ttlbuckets.ErrInvalidLadder) || !strings.Contains(err.Error(), fmt.Sprintf("Order %q", bad)) ||
			!strings.Contains(err.Error(), `"shortest-first"`) || !strings.Contains(err.Error(), `"longest-first"`) ||
			!strings.Contains(err.Error(), `"top-first"`) || !strings.Contains(err.Error(), `"top-split"`) {
			t.Errorf("ParseOrder(%q) error = %v", bad, err)
		}
		o := ttlbuckets.LongestFirst
		if err := o.UnmarshalText([]byte(bad)); err == nil || o != ttlbuckets.LongestFirst {
			t.Errorf("UnmarshalText(%q) = %v, %v; want error and no change", bad, o, err)
		}
	}
	for _, o := range orders {
		text, err := o.MarshalText()
		back, perr := ttlbuckets.ParseOrder(string(text))
		if err != nil || perr != nil || back != o || string(text) != o.String() {
			t.Errorf("%v: MarshalText %q, %v; back %v, %v", o, text, err, back, perr)
		}
	}
	if s := ttlbuckets.Order(5).String(); s != "Order(5)" {
		t.Errorf("Order(5).String() = %q", s)
	}
	if _, err := ttlbuckets.Order(5).MarshalText(); !errors.Is(err, ttlbuckets.ErrInvalidLadder) {
		t.Errorf("Order(5).MarshalText() error = %v", err)
	}
	if ttlbuckets.TopSplit != 0 || ttlbuckets.TopSplit.String() != "top-split" || ttlbuckets.ShortestFirst.String() != "shortest-first" || ttlbuckets.LongestFirst.String() != "longest-first" {
		t.Error("Order names")
	}
}
