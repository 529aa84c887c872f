package route

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/delaykit/rabbitdelay/ttlbuckets"
)

// Header names. None begins with "x-": a headers exchange ignores binding arguments whose
// names begin with "x-" (https://www.rabbitmq.com/docs/exchanges#headers), so a binding on
// such a header would match every message. Integer values are always int64: a Go int in
// an amqp091 Table goes on the wire as a signed 32-bit value.
const (
	// HeaderPrefix begins every header name rabbitdelay writes: this package's routing headers
	// below, and the headers other packages write (the consumer package's retry record, the
	// copy tag). Only the routing headers are stripped on a new delay ([IsDelayHeader]).
	HeaderPrefix = "rabbitdelay-"
	// TargetHeader (string) is the target exchange's name, matched by the dispatch
	// exchange's bindings.
	TargetHeader = "rabbitdelay-target"
	// DueHeader (int64) is the due time, in Unix milliseconds.
	DueHeader = "rabbitdelay-due"
	// BucketHeader (int64) is a bucket's TTL in milliseconds, matched by the bucket
	// exchange's bindings.
	BucketHeader = "rabbitdelay-bucket"
	// LastLevelHeader (int64) is the level of a ladder message's last hop ([LastLevel]), set
	// by [EncodeRoute], whose digit header at that level holds [LastHopValue] of the digit.
	// The level's exchange routes the message on it to the level's last-hop exchange, whose
	// bindings on the last-hop value send it into the digit's last-hop queue, which
	// dead-letters straight to the dispatch exchange.
	LastLevelHeader = "rabbitdelay-last-level"
)

// ErrInvalidHeaders is wrapped by every problem [DecodeDigits] reports: a digit header that
// is missing, not an integer, or outside 0..Radix-1, or a [LastLevelHeader] that is no level
// of the ladder.
var ErrInvalidHeaders = errors.New("route: invalid delay headers")

const digitHeaderPrefix = HeaderPrefix + "digit-"

// digitHeaders caches DigitHeader for the levels a valid ladder can have (at most 39: radix
// 2, 1 ms unit, Max 2^39-1 ms), so EncodeDigits does not allocate names.
var digitHeaders = func() (names [64]string) {
	for i := range names {
		names[i] = digitHeaderPrefix + strconv.Itoa(i)
	}
	return names
}()

// DigitHeader returns the name of the header carrying the digit of level, for example
// "rabbitdelay-digit-3" for level 3. Its value is an int64 from 0 to Radix-1, matched by
// level's ladder bindings.
func DigitHeader(level int) string {
	if level >= 0 && level < len(digitHeaders) {
		return digitHeaders[level]
	}
	return digitHeaderPrefix + strconv.Itoa(level)
}

// IsDelayHeader reports whether name is a header that decides or records a delay: this
// package's routing headers ([TargetHeader], [DueHeader], [BucketHeader], [LastLevelHeader]
// and every [DigitHeader]), the delayed-message plugin's "x-delay", and the broker's
// dead-lettering record "x-death", "x-first-death-*" and "x-last-death-*". A publisher
// strips exactly this set from a message (a copy of a delivery, say) before sending it into
// a delay path: a stale digit or "x-delay" must not decide the new delay, and "x-death"
// entries for the ladder's queues can make the broker's dead-letter cycle detection drop the
// message (https://www.rabbitmq.com/docs/dlx). Other headers beginning with [HeaderPrefix]
// travel with the message. Names are compared exactly (AMQP header names are case-sensitive).
func IsDelayHeader(name string) bool {
	return isRoutingHeader(name) ||
		name == "x-delay" ||
		name == "x-death" ||
		strings.HasPrefix(name, "x-first-death-") ||
		strings.HasPrefix(name, "x-last-death-")
}

// isRoutingHeader reports whether name is one of this package's routing headers.
func isRoutingHeader(name string) bool {
	switch name {
	case TargetHeader, DueHeader, BucketHeader, LastLevelHeader:
		return true
	}
	return strings.HasPrefix(name, digitHeaderPrefix)
}

// LastLevel returns the level of p's last hop (p.Hops[len(p.Hops)-1].Level): the highest level
// with a non-zero digit for [ttlbuckets.ShortestFirst] and [ttlbuckets.TopSplit] (whose highest
// digit is 2 or more), the lowest for [ttlbuckets.LongestFirst], the second highest for
// [ttlbuckets.TopFirst] and a top-split plan whose highest digit is 1 (the highest when it is
// the only one). It returns -1 for a plan without hops.
func LastLevel(p ttlbuckets.Plan) int {
	if len(p.Hops) == 0 {
		return -1
	}
	return p.Hops[len(p.Hops)-1].Level
}

// FirstHopQueue reports whether p's first hop goes through its level's first-hop queue, which
// dead-letters into level 0's exchange: for a [ttlbuckets.TopFirst] or [ttlbuckets.TopSplit]
// plan of several hops. p should come from l.Plan.
func FirstHopQueue(l ttlbuckets.Ladder, p ttlbuckets.Plan) bool {
	return (l.Order == ttlbuckets.TopFirst || l.Order == ttlbuckets.TopSplit) && len(p.Hops) > 1
}

// EncodeDigits sets, in h, the digit header ([DigitHeader]) of every level of l, zeros
// included, to int64(p.Digits[level]) (0 for a level p.Digits lacks), so that whichever
// ladder exchange the message reaches can route it. p should come from l.Plan. h must not
// be nil. It sets nothing for an invalid ladder. It does not allocate for ladders of up to
// 64 levels beyond the map's own growth.
func EncodeDigits(l ttlbuckets.Ladder, p ttlbuckets.Plan, h map[string]any) {
	levels := l.Levels()
	for level := range levels {
		var v int64
		if level < len(p.Digits) {
			v = int64(p.Digits[level])
		}
		h[DigitHeader(level)] = v
	}
}

// LastHopValue returns the value of the digit header that sends a message with digit (1 to
// Radix-1) at its last hop's level of l into that level's last-hop queue: digit + Radix,
// which no other binding of the level matches. It returns digit for an invalid ladder.
func LastHopValue(l ttlbuckets.Ladder, digit int) int64 {
	g, ok := resolve(l)
	if !ok {
		return int64(digit)
	}
	return int64(digit) + g.mask + 1
}

// EncodeRoute sets, in h, the headers of a message whose last hop goes through a last-hop
// queue (same TTL as the level's queue of that digit, dead-lettering straight to the dispatch
// exchange, as a bucket does): the digit header of every level of l from p.Entry to the last
// hop's level in travel order, zeros included (after a first hop through a first-hop queue
// ([FirstHopQueue]), the entry level's and those of levels 0 to the last hop's); [LastHopValue]
// of the last hop's digit (the plain digit at the level where the order ends, which
// dead-letters to the dispatch exchange already);
// and that level in [LastLevelHeader]. Levels the message never reaches get no header. The
// topology must have the last-hop queues; for one without them use [EncodeDigits]. For a
// plan without hops it does what EncodeDigits does. p should come from l.Plan. h must not be
// nil; it sets nothing for an invalid ladder.
func EncodeRoute(l ttlbuckets.Ladder, p ttlbuckets.Plan, h map[string]any) {
	g, ok := resolve(l)
	if !ok {
		return
	}
	last := LastLevel(p)
	if last < 0 {
		EncodeDigits(l, p, h)
		return
	}
	// A message whose first hop goes through a first-hop queue comes back to level 0 after it,
	// and climbs from there to its last.
	from := p.Entry
	if FirstHopQueue(l, p) {
		from = 0
	}
	for level := range g.levels {
		if level != p.Entry && (g.beyond(level, last) || g.before(level, from)) {
			continue
		}
		var v int64
		if level < len(p.Digits) {
			v = int64(p.Digits[level])
		}
		if level == last {
			v = int64(p.Hops[len(p.Hops)-1].Digit) // a TopSplit plan's last hop is less than the level's digit
			// The level where the order ends dead-letters into the dispatch exchange already: it
			// has no last-hop queues.
			if !g.ends(last) {
				v += g.mask + 1
			}
		}
		h[DigitHeader(level)] = v
	}
	h[LastLevelHeader] = int64(last)
}

// DecodeDigits reads the digits that [EncodeDigits] or [EncodeRoute] wrote for l, for
// diagnostics: one per level, len == l.Levels(). Values may have any Go integer type, as
// amqp091 decodes AMQP's integer types. At the [LastLevelHeader] level, [LastHopValue] of a
// digit reads as that digit (for a [ttlbuckets.TopSplit] plan that takes that level twice,
// the last hop's digit), and digit headers that EncodeRoute leaves out read as 0.
// Every problem is reported, joined, each wrapping [ErrInvalidHeaders]: a digit header that
// is missing, not an integer, or outside 0..Radix-1; a non-zero digit for a level the ladder
// does not have; a LastLevelHeader that is not a level of the ladder. The returned digits
// hold what could be read (0 where a header was bad) even on error. An invalid ladder
// returns nil and l.Validate's error (wrapping [ttlbuckets.ErrInvalidLadder]).
func DecodeDigits(l ttlbuckets.Ladder, h map[string]any) ([]int, error) {
	g, ok := resolve(l)
	if !ok {
		return nil, l.Validate()
	}
	digits := make([]int, g.levels)
	var errs []error
	bad := func(name, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%w: header %s: "+format, append([]any{ErrInvalidHeaders, name}, args...)...))
	}
	last := -1 // with LastLevelHeader: the last level that has a digit header
	if raw, ok := h[LastLevelHeader]; ok {
		if v, isInt, inRange := digitValue(raw, int64(g.levels-1)); isInt && inRange {
			last = int(v)
		} else {
			bad(LastLevelHeader, "value %v (%T); want an integer level from 0 to %d", raw, raw, g.levels-1)
		}
	}
	first := -1 // with LastLevelHeader: the first level in travel order that has a digit header
	if last >= 0 {
		for level := range g.levels {
			if _, ok := h[DigitHeader(level)]; ok && (first < 0 || g.before(level, first)) {
				first = level
			}
		}
	}
	for level := range g.levels {
		name := DigitHeader(level)
		raw, ok := h[name]
		if !ok {
			if last >= 0 && (g.beyond(level, last) || (first >= 0 && g.before(level, first))) {
				continue // left out by EncodeRoute: the message enters the ladder after, or leaves it before, this level
			}
			bad(name, "missing; want an integer from 0 to %d", g.mask)
			continue
		}
		limit := g.mask
		if level == last {
			limit = 2*g.mask + 1 // LastHopValue
		}
		v, isInt, inRange := digitValue(raw, limit)
		if level == last && v > g.mask {
			v -= g.mask + 1
		}
		switch {
		case !isInt:
			bad(name, "value %v has type %T; want an integer from 0 to %d", raw, raw, g.mask)
		case !inRange:
			bad(name, "value %v outside 0 to %d (Radix %d)", raw, g.mask, g.mask+1)
		default:
			digits[level] = int(v)
		}
	}
	// Digit headers of levels this ladder does not have, in a stable order.
	var extra []string
	for name := range h {
		if rest, ok := strings.CutPrefix(name, digitHeaderPrefix); ok {
			if level, err := strconv.Atoi(rest); err != nil || level < 0 || level >= g.levels || DigitHeader(level) != name {
				extra = append(extra, name)
			}
		}
	}
	slices.Sort(extra)
	for _, name := range extra {
		if v, _, inRange := digitValue(h[name], math.MaxInt64); inRange && v == 0 {
			continue
		}
		bad(name, "value %v for a level this ladder does not have (levels 0 to %d)", h[name], g.levels-1)
	}
	return digits, errors.Join(errs...)
}

// digitValue converts an integer header value. isInt is false for a non-integer type;
// inRange is false for a value outside 0..max.
func digitValue(raw any, max int64) (v int64, isInt, inRange bool) {
	v, isInt, fits := HeaderInt(raw)
	return v, isInt, fits && v >= 0 && v <= max
}

// HeaderInt reads an integer header value of any Go integer type that amqp091 may decode a
// table value into (int8..int64, uint8..uint64, int, uint). isInt is false for any other type;
// fits is false for an unsigned value above math.MaxInt64.
func HeaderInt(raw any) (v int64, isInt, fits bool) {
	var u uint64 // for unsigned types
	switch x := raw.(type) {
	case int:
		return int64(x), true, true
	case int8:
		return int64(x), true, true
	case int16:
		return int64(x), true, true
	case int32:
		return int64(x), true, true
	case int64:
		return x, true, true
	case uint:
		u = uint64(x)
	case uint8:
		u = uint64(x)
	case uint16:
		u = uint64(x)
	case uint32:
		u = uint64(x)
	case uint64:
		u = x
	default:
		return 0, false, false
	}
	if u > math.MaxInt64 {
		return 0, true, false
	}
	return int64(u), true, true
}
