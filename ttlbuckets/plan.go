package ttlbuckets

import (
	"fmt"
	"time"
)

// Rounding says what [Ladder.Plan] does with a delay that is not a whole number of
// [Ladder.Unit].
type Rounding int

const (
	// RoundUp (the default) rounds it up to the next whole unit, so a message is never early;
	// [Plan.Rounded] reports it.
	RoundUp Rounding = iota
	// Strict rejects it with an error wrapping [ErrNotWholeUnit]. Any Rounding value other
	// than RoundUp behaves as Strict.
	Strict
)

// Plan is the route of one delayed message through a ladder.
type Plan struct {
	// Requested is the delay asked for.
	Requested time.Duration
	// Effective is the sum of the hops' TTLs: Requested <= Effective < Requested+Unit for a
	// positive Requested, 0 otherwise.
	Effective time.Duration
	// Rounded reports Effective > Requested for a positive Requested.
	Rounded bool
	// Digits[L] is level L's digit (0..Radix-1) of Effective in units; len(Digits) == Levels().
	Digits []int
	// Entry is the level of the first hop, or -1 when there are none (Requested <= 0: publish
	// straight to the target).
	Entry int
	// Hops lists one hop per non-zero digit in travel order: levels ascending ([ShortestFirst]),
	// descending ([LongestFirst]), or the highest first, then the others ascending ([TopFirst]).
	// A split [TopSplit] route has the highest level twice, digit d-u first and u last, where
	// u = 1 + (the units below the highest level) mod (d-1); an unsplit one is [TopFirst]'s.
	Hops []Hop
}

// Hop is one stay in the ladder queue of digit Digit at level Level, x-message-ttl TTL ms.
type Hop struct {
	Level, Digit int
	TTL          int64 // ms
}

// Plan computes the route of a message delayed by d. A d <= 0 is no error: no hops, Entry -1,
// Effective 0, all-zero Digits. A d that is not a whole number of units is rounded up with
// [RoundUp], and with [Strict] an error wrapping [ErrNotWholeUnit]; a d above [Ladder.Max] an
// error wrapping [ErrDelayTooLong]; an invalid ladder returns [Ladder.Validate]'s error. On error
// the Plan is the zero value. Plan allocates twice (Digits and Hops).
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
	n, top := 0, 0 // non-zero digits, the highest one's level
	for level, u := 0, units; u != 0; level, u = level+1, u>>g.shift {
		if v := int(u & g.mask); v != 0 {
			digits[level], top = v, level
			n++
		}
	}
	split := g.order == TopSplit && n > 1 && digits[top] > 1
	// With split, the units of level top taken last: 1 + (units below level top) mod (d-1), so a
	// burst's last hops spread over the top level's queues 1 to d-1, not all through one.
	last := 0
	if split {
		last = 1 + int((units&(int64(1)<<(g.shift*uint(top))-1))%int64(digits[top]-1))
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
	return Plan{Requested: d, Effective: time.Duration(units) * g.unit, Rounded: rounded, Digits: digits,
		Entry: hops[0].Level, Hops: hops}, nil
}

// Exact reports whether the ladder carries d without rounding: 0 <= d <= [Ladder.Max] and d a
// whole number of [Ladder.Unit]; for d > 0, exactly when [Ladder.Plan](d, [Strict]) succeeds.
// It is false for an invalid ladder. It does not allocate.
func (l Ladder) Exact(d time.Duration) bool {
	g, p := l.resolve()
	return p == 0 && d >= 0 && d%g.unit == 0 && d <= g.max
}
