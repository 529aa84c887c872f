package ttlbuckets_test

import (
	"testing"
	"time"

	"github.com/delaykit/rabbitdelay/ttlbuckets"
)

// benchDelays mixes short and long delays, whole and rounded.
var benchDelays = []time.Duration{
	90 * time.Minute, 1500 * time.Microsecond, 30 * 24 * time.Hour, 5 * time.Second,
	ttlbuckets.DefaultMax, 123456789 * time.Microsecond, time.Millisecond, 7 * 24 * time.Hour,
}

// BenchmarkPlan measures Plan on the default ladder. Target: under 1 µs and at most 2
// allocations (Digits and Hops) per call.
func BenchmarkPlan(b *testing.B) {
	for _, o := range orders {
		l := ttlbuckets.Ladder{Order: o}
		b.Run(o.String(), func(b *testing.B) {
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				if _, err := l.Plan(benchDelays[i%len(benchDelays)], ttlbuckets.RoundUp); err != nil {
					b.Fatal(err)
				}
				i++
			}
		})
	}
}
