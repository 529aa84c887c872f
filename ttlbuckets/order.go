package ttlbuckets

import (
	"fmt"
	"strconv"
	"strings"
)

// Order is the order in which a message travels through the ladder's levels. It decides
// which level a message enters at ([Plan.Entry]), the order of [Plan.Hops], and so the
// level to which each level's queues hand a message on. Publisher and topology must agree
// on it.
//
// The zero value is [TopSplit], the default. Its text form ([Order.String], [ParseOrder],
// [Order.UnmarshalText]) is "shortest-first", "longest-first", "top-first" or "top-split".
type Order int

const (
	// TopSplit (the default) splits the hop of the highest non-zero digit d, at level T, in two when d is 2
	// or more and other digits are non-zero: d-u units of level T first, through level T's
	// first-hop queue as [TopFirst] does, then the other digits from level 0 up and u units
	// of level T last, as [ShortestFirst] does ([Plan.Hops] gives u). The broker does little
	// while a message is being published, and only the last hop (u Radix^T units) ends in the
	// moments before due, at the price of one hop more; u varies with the lower digits, so
	// the last hops of a burst due at once leave through up to d-1 queues, not one. A delay
	// whose highest digit is 1 takes [TopFirst]'s route (that hop first, the last hop is the
	// second-highest digit's), so no delay of several digits has its short hops right after
	// the publish. Its queues are [TopFirst]'s.
	TopSplit Order = iota

	// ShortestFirst enters at the lowest level with a non-zero digit and
	// climbs: level L hands to level L+1, the top level to the dispatch exchange. Only
	// the last, longest hop ends in the moments before the message is due, so a burst of
	// messages due at the same time costs the broker one dead-lettering each in that
	// window, not one per hop.
	ShortestFirst

	// LongestFirst enters at the highest level with a non-zero digit and descends: level
	// L hands to level L-1, level 0 to the dispatch exchange. This is the order of
	// the textbook ladder; every hop but the first falls into the last Radix^top units
	// before the message is due.
	LongestFirst

	// TopFirst takes the hop of the highest non-zero digit first, then the others as
	// [ShortestFirst] does, from level 0 up. The first hop is at least half the delay, so
	// the broker does next to nothing while a message is being published, and the short
	// hops run after it, before the last. It needs a first-hop queue per digit of every
	// level but 0 (same TTL, dead-lettering into level 0's exchange); the other queues are
	// [ShortestFirst]'s.
	TopFirst
)

const (
	shortestFirstName = "shortest-first"
	longestFirstName  = "longest-first"
	topFirstName      = "top-first"
	topSplitName      = "top-split"
)

// String returns "shortest-first", "longest-first", "top-first" or "top-split", or
// "Order(N)" for any other value.
func (o Order) String() string {
	switch o {
	case ShortestFirst:
		return shortestFirstName
	case LongestFirst:
		return longestFirstName
	case TopFirst:
		return topFirstName
	case TopSplit:
		return topSplitName
	}
	return "Order(" + strconv.Itoa(int(o)) + ")"
}

// allowedOrders lists the orders with their numbers, for error messages.
var allowedOrders = fmt.Sprintf("%d (%s), %d (%s), %d (%s) or %d (%s)",
	int(TopSplit), topSplitName, int(ShortestFirst), shortestFirstName, int(LongestFirst), longestFirstName,
	int(TopFirst), topFirstName)

func (o Order) valid() bool { return o >= TopSplit && o <= TopFirst }

// ParseOrder parses "shortest-first", "longest-first", "top-first" or "top-split" (ASCII
// case and surrounding space ignored). The empty string gives the default, [TopSplit], as the
// zero value does. Any other text returns an error wrapping [ErrInvalidLadder] that quotes
// the text and lists the allowed names.
func ParseOrder(s string) (Order, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "", topSplitName:
		return TopSplit, nil
	case shortestFirstName:
		return ShortestFirst, nil
	case longestFirstName:
		return LongestFirst, nil
	case topFirstName:
		return TopFirst, nil
	}
	return TopSplit, fmt.Errorf("%w: Order %q: allowed %q (default), %q, %q or %q",
		ErrInvalidLadder, s, topSplitName, shortestFirstName, longestFirstName, topFirstName)
}

// UnmarshalText implements [encoding.TextUnmarshaler] with [ParseOrder], so configuration
// loaders (envconfig, encoding/json, flag.TextVar) accept the names. On error *o is left
// unchanged.
func (o *Order) UnmarshalText(text []byte) error {
	v, err := ParseOrder(string(text))
	if err != nil {
		return err
	}
	*o = v
	return nil
}

// MarshalText implements [encoding.TextMarshaler]: the [Order.String] name. Any other
// value returns an error wrapping [ErrInvalidLadder].
func (o Order) MarshalText() ([]byte, error) {
	if !o.valid() {
		return nil, fmt.Errorf("%w: Order %d: allowed %s", ErrInvalidLadder, int(o), allowedOrders)
	}
	return []byte(o.String()), nil
}
