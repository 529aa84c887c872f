package ttlbuckets

import (
	"fmt"
	"time"
)

// Rounding says what [Ladder.Plan] does with a delay that is not a whole number of
// [Ladder.Unit].
type Rounding int

const (
	// RoundUp (the default) rounds such a delay up to the next whole unit, so a message
	// is never early; [Plan.Rounded] reports it.
	RoundUp Rounding = iota
	// Strict rejects such a delay with an error wrapping [ErrNotWholeUnit]. A Rounding
	// value other than RoundUp and Strict behaves as Strict.
	Strict
)

// Plan is the route of one delayed message through a ladder.
type Plan struct {
	// Requested is the delay asked for.
	Requested time.Duration
	// Effective is the delay the ladder applies: the sum of the hops' TTLs. For a
	// positive Requested, Requested <= Effective < Requested+Unit; for Requested <= 0
	// it is 0.
	Effective time.Duration
	// Rounded reports whether Effective > Requested for a positive Requested (a delay
	// that was not a whole number of units, rounded up). It is false for Requested <= 0.
	Rounded bool
	// Digits holds the effective delay in units, written in base Radix: Digits[L] is the
	// digit of level L, 0..Radix-1. len(Digits) == Levels(); all zero for Requested <= 0.
	Digits []int
	// Entry is the level of the first hop, the queue the message enters first, or -1 when
	// there are no hops (Requested <= 0: publish straight to the target).
	Entry int
	// Hops lists one hop per non-zero digit, in travel order: ascending levels for
	// [ShortestFirst], descending for [LongestFirst], and for [TopFirst] the highest level
	// first, then the others ascending. For [TopSplit] with a highest digit d of 2 or more
	// and other non-zero digits, it has one hop more: the highest level with digit d-u
	// first, then the others ascending, then the highest level with digit u, where u is
	// 1 + (the delay's units below the highest level) mod (d-1); with a highest digit of 1,
	// [TopFirst]'s order.
	Hops []Hop
}

// Hop is one stay in a ladder queue: the queue of digit Digit at level Level, whose
// x-message-ttl is TTL milliseconds.
type Hop struct {
	Level, Digit int
	TTL          int64 // ms
}

// Plan computes the route of a message delayed by d.
//
// A d <= 0 is not an error: the Plan has no hops, Entry -1, Effective 0 and all-zero
// Digits, and the caller publishes straight to the target. A positive d that is not a
// whole number of units is rounded up with [RoundUp], never down, so a message is never
// early; with [Strict] it is an error wrapping [ErrNotWholeUnit] that states the unit.
// A d above [Ladder.Max] is an error wrapping [ErrDelayTooLong] that states the maximum.
// An invalid ladder returns [Ladder.Validate]'s error (wrapping [ErrInvalidLadder]),
// whatever d is. On error the Plan is the zero value.
// Plan allocates twice (Digits and Hops).
func (l Ladder) Plan(d time.Duration, mode Rounding) (Plan, error) {
	g, p := l.resolve()
	if p != 0 {
		return Plan{}, l.Validate()
	}
	if d <= 0 {
		return Plan{Requested: d, Digits: make([]int, g.levels), Entry: -1}, nil
	}
	if d > g.max {
		return Plan{}, fmt.Errorf("%w: %v is above the ladder's maximum (Max) of %v", ErrDelayTooLong, d, durationMs(g.max))
	}
	units := int64(d / g.unit)
	rounded := d%g.unit != 0
	if rounded {
		if mode != RoundUp {
			return Plan{}, fmt.Errorf("%w: %v is not a whole number of the ladder's Unit %v (Strict rounding)", ErrNotWholeUnit, d, g.unit)
		}
		units++
	}
	digits := make([]int, g.levels)
	n := 0
	for level, u := 0, units; u != 0; level, u = level+1, u>>g.shift {
		if v := int(u & g.mask); v != 0 {
			digits[level] = v
			n++
		}
	}
	top := g.levels - 1
	for digits[top] == 0 {
		top--
	}
	split := g.order == TopSplit && n > 1 && digits[top] > 1
	last := 0 // with split: the units of level top taken last
	if split {
		last = splitLast(digits[top], units&(int64(1)<<(g.shift*uint(top))-1))
	}
	hops := make([]Hop, 0, n+1)
	if g.order == LongestFirst {
		for level := g.levels - 1; level >= 0; level-- {
			if v := digits[level]; v != 0 {
				hops = append(hops, Hop{Level: level, Digit: v, TTL: g.ttl(level, v)})
			}
		}
	} else {
		first := -1 // the level taken first, out of ascending order
		switch {
		case (g.order == TopFirst || (g.order == TopSplit && !split)) && n > 1:
			first = top
			hops = append(hops, Hop{Level: top, Digit: digits[top], TTL: g.ttl(top, digits[top])})
		case split:
			hops = append(hops, Hop{Level: top, Digit: digits[top] - last, TTL: g.ttl(top, digits[top]-last)})
		}
		for level, v := range digits {
			if level == top && split {
				v = last
			}
			if v != 0 && level != first {
				hops = append(hops, Hop{Level: level, Digit: v, TTL: g.ttl(level, v)})
			}
		}
	}
	return Plan{
		Requested: d,
		Effective: time.Duration(units) * g.unit,
		Rounded:   rounded,
		Digits:    digits,
		Entry:     hops[0].Level,
		Hops:      hops,
	}, nil
}

// splitLast returns how many of the top digit's d units (d >= 2) a [TopSplit] route takes
// last: 1 + lower mod (d-1), where lower is the delay's value below the top level, in units.
// It spreads the last hops of messages due at one moment over the top level's queues of
// digits 1 to d-1 (one queue's dead-lettering would carry a whole burst), and it is the same
// for the same delay.
func splitLast(d int, lower int64) int {
	return 1 + int(lower%int64(d-1))
}

// Exact reports whether the ladder carries d without rounding: d >= 0, d is a whole
// number of [Ladder.Unit] and d <= [Ladder.Max]. For d > 0 it is true exactly when
// [Ladder.Plan](d, [Strict]) succeeds. It is false for a negative d (the ladder cannot
// apply it; Plan's Effective would be 0) and for an invalid ladder. It does not allocate.
func (l Ladder) Exact(d time.Duration) bool {
	g, p := l.resolve()
	return p == 0 && d >= 0 && d%g.unit == 0 && d <= g.max
}
