package route

import (
	"math/bits"

	"github.com/delaykit/rabbitdelay/ttlbuckets"
)

// geometry is a valid ladder as integers.
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

// ttl is the TTL in ms of digit's queue at level (at most ttlbuckets.MaxQueueTTL).
func (g geometry) ttl(level, digit int) int64 {
	return int64(digit) << (g.shift * uint(level)) * g.unitMs
}

// ends reports whether level is where the travel order ends (into the dispatch exchange).
func (g geometry) ends(level int) bool {
	if g.order == ttlbuckets.LongestFirst {
		return level == 0
	}
	return level == g.levels-1
}

// beyond reports whether level comes after last in travel order.
func (g geometry) beyond(level, last int) bool {
	if g.order == ttlbuckets.LongestFirst {
		return level < last
	}
	return level > last
}

// before reports whether level comes before entry in travel order.
func (g geometry) before(level, entry int) bool {
	if g.order == ttlbuckets.LongestFirst {
		return level > entry
	}
	return level < entry
}
