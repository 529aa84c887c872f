package ttlbuckets_test

import (
	"math"
	"testing"
	"time"

	"github.com/delaykit/rabbitdelay/ttlbuckets"
)

// fuzzLadder builds a ladder from fuzz inputs. unitMs 0 and maxNs 0 give the defaults; a
// negative maxNs or an order byte from 0xF0 up give an invalid ladder, which must be
// reported as such.
func fuzzLadder(unitMs uint32, radixExp uint8, maxNs int64, order uint8) ttlbuckets.Ladder {
	l := ttlbuckets.Ladder{
		Unit:  time.Duration(unitMs) * time.Millisecond,
		Radix: 1 << (1 + radixExp%6),
		Order: ttlbuckets.Order(order & 1),
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

// FuzzPlan checks Plan, Exact and Levels for any delay on any ladder: see checkPlan and
// checkLadder. FuzzRoute in package internal/route checks the queues, where each level hands
// a message on, and the digit headers on the same inputs.
func FuzzPlan(f *testing.F) {
	f.Add(uint32(0), uint8(3), int64(0), uint8(0), int64(90*time.Minute))
	f.Add(uint32(0), uint8(3), int64(0), uint8(1), int64(ttlbuckets.DefaultMax))
	f.Add(uint32(1), uint8(0), int64(time.Hour), uint8(0), int64(time.Hour+1))
	f.Add(uint32(10), uint8(1), int64(25*time.Millisecond), uint8(1), int64(24*time.Millisecond))
	f.Add(uint32(7), uint8(5), int64(0), uint8(0), int64(-1))
	f.Add(uint32(1), uint8(4), int64(34359738367*time.Millisecond), uint8(1), int64(math.MaxInt64))
	f.Add(uint32(3), uint8(2), int64(-5), uint8(0xF5), int64(time.Second))
	f.Fuzz(func(t *testing.T, unitMs uint32, radixExp uint8, maxNs int64, order uint8, d int64) {
		l := fuzzLadder(unitMs, radixExp, maxNs, order)
		delays := []time.Duration{time.Duration(d)}
		if l.Validate() == nil {
			checkLadder(t, l)
			lw := l.WithDefaults()
			// Fold d into [-Unit, Max+Unit) and near Max, where the edges are.
			span := uint64(lw.Max) + 2*uint64(lw.Unit)
			near := lw.Max - time.Duration(uint64(d)%uint64(lw.Unit))
			delays = append(delays, time.Duration(uint64(d)%span)-lw.Unit, near, near+1)
		}
		for _, d := range delays {
			for _, mode := range modes {
				p, err := l.Plan(d, mode)
				checkPlan(t, l, d, mode, p, err)
			}
		}
	})
}
