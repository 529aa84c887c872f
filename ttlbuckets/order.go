package ttlbuckets

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// Order is the order in which a message travels through the ladder's levels: it decides the
// level a message enters at ([Plan.Entry]), the order of [Plan.Hops], and so where each level's
// queues hand a message on. Publisher and topology must agree on it. The zero value is
// [TopSplit]; the text forms are "top-split", "shortest-first", "longest-first" and "top-first".
type Order int

const (
	// TopSplit (the default) splits the highest non-zero digit d's hop in two when d >= 2 and
	// other digits are non-zero: d-u units first, through its first-hop queue as [TopFirst]
	// does, then the other digits ascending, then u units ([Plan.Hops]). The broker does little
	// at publish time and only the last hop ends just before due, for one hop more; u spreads a
	// burst due at once over up to d-1 queues. A highest digit of 1 takes [TopFirst]'s route.
	TopSplit Order = iota
	// ShortestFirst enters at the lowest level with a non-zero digit and climbs (level L hands
	// to L+1, the top level to the dispatch exchange): only the last, longest hop ends just
	// before due, so a burst due at once costs one dead-lettering each in that window.
	ShortestFirst
	// LongestFirst enters at the highest level with a non-zero digit and descends (level L
	// hands to L-1, level 0 to the dispatch exchange), the textbook ladder: every hop but the
	// first falls into the last Radix^top units before due.
	LongestFirst
	// TopFirst takes the highest non-zero digit's hop first (at least half the delay, through
	// a first-hop queue per digit of every level but 0, dead-lettering into level 0), then the
	// others as [ShortestFirst] does.
	TopFirst
)

// orderNames are the text forms, indexed by Order.
var orderNames = [...]string{TopSplit: "top-split", ShortestFirst: "shortest-first", LongestFirst: "longest-first",
	TopFirst: "top-first"}

// String returns the text form, or "Order(N)" for an unknown value.
func (o Order) String() string {
	if !o.valid() {
		return "Order(" + strconv.Itoa(int(o)) + ")"
	}
	return orderNames[o]
}

// allowedOrders lists the orders with their numbers, for error messages.
var allowedOrders = fmt.Sprintf("0 (%s), 1 (%s), 2 (%s) or 3 (%s)", orderNames[0], orderNames[1], orderNames[2], orderNames[3])

func (o Order) valid() bool { return o >= TopSplit && o <= TopFirst }

// ParseOrder parses a text form (ASCII case and surrounding space ignored); "" gives [TopSplit].
// Other text returns an error wrapping [ErrInvalidLadder] that quotes it and lists the names.
func ParseOrder(s string) (Order, error) {
	t := strings.ToLower(strings.TrimSpace(s))
	if t == "" {
		return TopSplit, nil
	}
	if i := slices.Index(orderNames[:], t); i >= 0 {
		return Order(i), nil
	}
	return TopSplit, fmt.Errorf("%w: Order %q: allowed %q (default), %q, %q or %q",
		ErrInvalidLadder, s, orderNames[0], orderNames[1], orderNames[2], orderNames[3])
}

// UnmarshalText implements [encoding.TextUnmarshaler] with [ParseOrder], so configuration
// loaders (envconfig, encoding/json, flag.TextVar) accept the names. On error *o is unchanged.
func (o *Order) UnmarshalText(text []byte) error {
	v, err := ParseOrder(string(text))
	if err != nil {
		return err
	}
	*o = v
	return nil
}

// MarshalText implements [encoding.TextMarshaler]: the [Order.String] name, or an error
// wrapping [ErrInvalidLadder] for an unknown value.
func (o Order) MarshalText() ([]byte, error) {
	if !o.valid() {
		return nil, fmt.Errorf("%w: Order %d: allowed %s", ErrInvalidLadder, int(o), allowedOrders)
	}
	return []byte(o.String()), nil
}
