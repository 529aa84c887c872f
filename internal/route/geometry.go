package route

import (
	"math/bits"

	"github.com/delaykit/rabbitdelay/ttlbuckets"
)

// geometry is a valid ladder resolved to the integers the codec and the queue list work with.
type geometry struct {
	levels int
	shift  uint  // log2(radix)
	mask   int64 // radix - 1
	unitMs int64 // unit in ms
	order  ttlbuckets.Order
}

// resolve returns l's geometry, and false for an invalid ladder (its Levels is 0). It does
// not allocate.
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

// ttl is the TTL in ms of the queue for digit at level: digit·Radix^level·Unit. It cannot
// overflow for a valid ladder, whose longest queue is at most ttlbuckets.MaxQueueTTL.
func (g geometry) ttl(level, digit int) int64 {
	return int64(digit) << (g.shift * uint(level)) * g.unitMs
}

// ends reports whether level is where the travel order ends (the top level for ShortestFirst,
// TopFirst and TopSplit, level 0 for LongestFirst): its queues dead-letter into the dispatch exchange.
func (g geometry) ends(level int) bool {
	if g.order == ttlbuckets.LongestFirst {
		return level == 0
	}
	return level == g.levels-1
}

// beyond reports whether level comes after last in travel order: a message whose last hop is
// at level last never reaches it.
func (g geometry) beyond(level, last int) bool {
	if g.order == ttlbuckets.LongestFirst {
		return level < last
	}
	return level > last
}

// before reports whether level comes before entry in travel order: a message that enters the
// ladder at level entry never reaches it.
func (g geometry) before(level, entry int) bool {
	if g.order == ttlbuckets.LongestFirst {
		return level > entry
	}
	return level < entry
}
