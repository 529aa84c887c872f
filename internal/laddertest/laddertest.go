// Package laddertest holds the fuzz inputs that the tests of ttlbuckets (the arithmetic) and of
// internal/route (the queues and headers) share, so that both check the same ladders and delays.
package laddertest

import (
	"fmt"
	"math"
	"math/big"
	"testing"
	"time"

	"github.com/delaykit/rabbitdelay/ttlbuckets"
)

// Seed adds the seed corpus of a fuzz target of (unitMs, radixExp, maxNs, order, d) as [Ladder]
// and [Delays] read them.
func Seed(f *testing.F) {
	f.Add(uint32(0), uint8(3), int64(0), uint8(0), int64(90*time.Minute))
	f.Add(uint32(0), uint8(3), int64(0), uint8(1), int64(ttlbuckets.DefaultMax))
	f.Add(uint32(0), uint8(3), int64(0), uint8(2), int64(90*time.Minute+7*time.Millisecond))
	f.Add(uint32(0), uint8(3), int64(0), uint8(3), int64(90*time.Minute+7*time.Millisecond))
	f.Add(uint32(1), uint8(0), int64(time.Hour), uint8(0), int64(time.Hour+1))
	f.Add(uint32(10), uint8(1), int64(25*time.Millisecond), uint8(1), int64(24*time.Millisecond))
	f.Add(uint32(7), uint8(5), int64(0), uint8(0), int64(-1))
	f.Add(uint32(1), uint8(4), int64(34359738367*time.Millisecond), uint8(1), int64(math.MaxInt64))
	f.Add(uint32(3), uint8(2), int64(-5), uint8(0xF5), int64(time.Second))
}

// Ladder builds a ladder from fuzz inputs: unitMs 0 and maxNs 0 give the defaults, order picks
// one of [Orders]; a negative maxNs or an order byte from 0xF0 up give an invalid ladder.
func Ladder(unitMs uint32, radixExp uint8, maxNs int64, order uint8) ttlbuckets.Ladder {
	l := ttlbuckets.Ladder{
		Unit:  time.Duration(unitMs) * time.Millisecond,
		Radix: 1 << (1 + radixExp%6),
		Order: Orders[int(order)%len(Orders)],
	}
	switch {
	case maxNs < 0:
		l.Max = time.Duration(maxNs)
	case maxNs > 0:
		l.Max = time.Duration(maxNs % int64(3*365*24*time.Hour))
	}
	if order >= 0xF0 {
		l.Order = ttlbuckets.Order(order)
	}
	return l
}

// Delays returns d and, for a valid ladder l, d folded into [-Unit, Max+Unit) and next to Max.
func Delays(l ttlbuckets.Ladder, d int64) []time.Duration {
	delays := []time.Duration{time.Duration(d)}
	if l.Validate() != nil {
		return delays
	}
	lw := l.WithDefaults()
	span := uint64(lw.Max) + 2*uint64(lw.Unit)
	near := lw.Max - time.Duration(uint64(d)%uint64(lw.Unit))
	return append(delays, time.Duration(uint64(d)%span)-lw.Unit, near, near+1)
}

// The radixes, hop orders and roundings a ladder may have.
var (
	Radixes = []int{2, 4, 8, 16, 32, 64}
	Orders  = []ttlbuckets.Order{ttlbuckets.ShortestFirst, ttlbuckets.LongestFirst, ttlbuckets.TopFirst, ttlbuckets.TopSplit}
	Modes   = []ttlbuckets.Rounding{ttlbuckets.RoundUp, ttlbuckets.Strict}
)

// EdgeCase is one ladder of [EdgeLadders] and its subtest name.
type EdgeCase struct {
	Name   string
	Ladder ttlbuckets.Ladder
}

// EdgeLadders are ladders of every radix and order, units of 1 and 7 ms, and edge maxima.
func EdgeLadders() []EdgeCase {
	var out []EdgeCase
	for _, r := range Radixes {
		for _, o := range Orders {
			for _, unit := range []time.Duration{time.Millisecond, 7 * time.Millisecond} {
				allDigits := time.Duration(math.Pow(float64(r), 3)-1) * unit // every digit r-1 over three levels
				for i, mx := range []time.Duration{0, allDigits, allDigits - unit/2, unit} {
					name := [...]string{"default max", "max all digits r-1", "max not whole units", "max one unit"}[i]
					out = append(out, EdgeCase{Name: fmt.Sprintf("radix %d/%v/unit %v/%s", r, o, unit, name),
						Ladder: ttlbuckets.Ladder{Unit: unit, Radix: r, Max: mx, Order: o}})
				}
			}
		}
	}
	return out
}

// EdgeDelays are the delays at the edges of the valid ladder l, and time.Duration's extremes.
func EdgeDelays(l ttlbuckets.Ladder) []time.Duration {
	lw := l.WithDefaults()
	u, r, levels := lw.Unit, lw.Radix, l.Levels()
	allDigits := time.Duration(math.Pow(float64(r), float64(levels))-1) * u
	return []time.Duration{
		0, -1, math.MinInt64, 1, u - 1, u, u + 1, 2*u - 1, 2 * u,
		time.Duration(r-1) * u, time.Duration(r) * u, time.Duration(r)*u - 1, time.Duration(r)*u + 1,
		lw.Max - u, lw.Max - 1, lw.Max, lw.Max + 1, lw.Max + u, math.MaxInt64,
		allDigits, allDigits - 1, allDigits + 1,
		time.Hour, 30 * 24 * time.Hour,
	}
}

// UnwrapAll returns the errors joined in err, err itself when it joins none, nil for nil.
func UnwrapAll(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	if err == nil {
		return nil
	}
	return []error{err}
}

// Pow returns r^n as a big.Int, to check the package's shifts by an independent method.
func Pow(r, n int) *big.Int {
	return new(big.Int).Exp(big.NewInt(int64(r)), big.NewInt(int64(n)), nil)
}
