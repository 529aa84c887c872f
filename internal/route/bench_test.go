package route_test

import (
	"testing"
	"time"

	"github.com/delaykit/rabbitdelay/internal/route"
	"github.com/delaykit/rabbitdelay/ttlbuckets"
)

// BenchmarkEncodeDigits measures writing a plan's 8 digit headers into a reused map.
func BenchmarkEncodeDigits(b *testing.B) {
	l := ttlbuckets.Ladder{}.WithDefaults()
	p, err := l.Plan(90*time.Minute, ttlbuckets.RoundUp)
	if err != nil {
		b.Fatal(err)
	}
	h := make(map[string]any, 16)
	b.ReportAllocs()
	for b.Loop() {
		route.EncodeDigits(l, p, h)
	}
}
