// Package laddertest holds the fuzz inputs that the tests of ttlbuckets (the arithmetic) and of
// internal/route (the queues and headers) share, so that both check the same ladders and delays.
package laddertest

import (
	"math"
	"testing"
	"time"

	"github.com/delaykit/rabbitdelay/ttlbuckets"
)

// Seed adds the seed corpus of a fuzz target whose arguments are (unitMs uint32, radixExp uint8,
// maxNs int64, order uint8, d int64), as [Ladder] and [Delays] read them.
func Seed(f *testing.F) {
	f.Add(uint32(0), uint8(3), int64(0), uint8(0), int64(90*time.Minute))
	f.Add(uint32(0), uint8(3), int64(0), uint8(1), int64(ttlbuckets.DefaultMax))
	f.Add(uint32(0), uint8(3), int64(0), uint8(2), int64(90*time.Minute+7*time.Millisecond))
	f.Add(uint32(1), uint8(0), int64(time.Hour), uint8(0), int64(time.Hour+1))
	f.Add(uint32(10), uint8(1), int64(25*time.Millisecond), uint8(1), int64(24*time.Millisecond))
	f.Add(uint32(7), uint8(5), int64(0), uint8(0), int64(-1))
	f.Add(uint32(1), uint8(4), int64(34359738367*time.Millisecond), uint8(1), int64(math.MaxInt64))
	f.Add(uint32(3), uint8(2), int64(-5), uint8(0xF5), int64(time.Second))
}

// Ladder builds a ladder from fuzz inputs: unitMs 0 and maxNs 0 give the defaults, order picks
// one of the three orders; a negative maxNs or an order byte from 0xF0 up give an invalid
// ladder, which must be reported as such.
func Ladder(unitMs uint32, radixExp uint8, maxNs int64, order uint8) ttlbuckets.Ladder {
	l := ttlbuckets.Ladder{
		Unit:  time.Duration(unitMs) * time.Millisecond,
		Radix: 1 << (1 + radixExp%6),
		Order: ttlbuckets.Order(order % 3),
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

// Delays returns d and, for a valid ladder l, d folded into [-Unit, Max+Unit) and next to Max,
// where the edges are.
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
