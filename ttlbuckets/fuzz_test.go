package ttlbuckets_test

import (
	"testing"

	"github.com/delaykit/rabbitdelay/internal/laddertest"
)

// FuzzPlan checks Plan, Exact and Levels for any delay on any ladder: see checkPlan and
// checkLadder. FuzzRoute in package internal/route checks the queues, where each level hands
// a message on, and the digit headers on the same inputs.
func FuzzPlan(f *testing.F) {
	laddertest.Seed(f)
	f.Fuzz(func(t *testing.T, unitMs uint32, radixExp uint8, maxNs int64, order uint8, d int64) {
		l := laddertest.Ladder(unitMs, radixExp, maxNs, order)
		if l.Validate() == nil {
			checkLadder(t, l)
		}
		for _, d := range laddertest.Delays(l, d) {
			for _, mode := range modes {
				p, err := l.Plan(d, mode)
				checkPlan(t, l, d, mode, p, err)
			}
		}
	})
}
