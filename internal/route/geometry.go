package route

import (
	"math/bits"

	"github.com/delaykit/rabbitdelay/ttlbuckets"
)

type geometry struct {
	levels int
	shift  uint  // log2(radix)
	mask   int64 // radix - 1
	unitMs int64 // unit in ms
	order  ttlbuckets.Order
}

// resolve returns l's geometry, or false for an invalid ladder.
func resolve(l ttlbuckets.Ladder) (geometry, bool) {
	levels := l.Levels()
	if levels == 0 {
		return geometry{}, false
	}
	l = l.WithDefaults()
	return geometry{
		levels: levels,
		shift:  uint(bits.TrailingZeros(uint(l.Radix))),
		mask:   int64(l.Radix - 1),
		unitMs: l.Unit.Milliseconds(),
		order:  l.Order,
	}, true
}

// ends reports whether level is where the travel order ends (into the dispatch exchange).
func (g geometry) ends(level int) bool {
	if g.order == ttlbuckets.LongestFirst {
		return level == 0
	}
	return level == g.levels-1
}

// after reports whether level a comes after level b in travel order.
func (g geometry) after(a, b int) bool {
	if g.order == ttlbuckets.LongestFirst {
		return a < b
	}
	return a > b
}
