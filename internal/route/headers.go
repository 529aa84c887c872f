package route

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"reflect"
	"slices"
	"strconv"
	"strings"

	"github.com/delaykit/rabbitdelay/ttlbuckets"
)

// Header names. None begins with "x-", which a headers exchange's bindings ignore
// (https://www.rabbitmq.com/docs/exchanges#headers). Integer values are int64.
const (
	// HeaderPrefix begins every header name rabbitdelay writes; only the routing headers are
	// stripped on a new delay ([IsDelayHeader]).
	HeaderPrefix = "rabbitdelay-"
	// TargetHeader (string) is the target exchange, matched by the dispatch exchange.
	TargetHeader = "rabbitdelay-target"
	// DueHeader (int64) is the due time, in Unix milliseconds.
	DueHeader = "rabbitdelay-due"
	// BucketHeader (int64) is a bucket's TTL in milliseconds, matched by the bucket exchange.
	BucketHeader = "rabbitdelay-bucket"
	// LastLevelHeader (int64) is the level of a ladder message's last hop ([LastLevel]), whose
	// digit header holds [LastHopValue]: it routes the message into a last-hop queue, which
	// dead-letters straight to the dispatch exchange.
	LastLevelHeader = "rabbitdelay-last-level"
)

// ErrInvalidHeaders is wrapped by every problem [DecodeDigits] reports.
var ErrInvalidHeaders = errors.New("route: invalid delay headers")

const digitHeaderPrefix = HeaderPrefix + "digit-"

// digitHeaders caches DigitHeader for a valid ladder's levels (at most 39), so that encoding
// does not allocate names.
var digitHeaders = func() (names [64]string) {
	for i := range names {
		names[i] = digitHeaderPrefix + strconv.Itoa(i)
	}
	return names
}()

// DigitHeader returns the name of level's digit header ("rabbitdelay-digit-3"), an int64 from
// 0 to Radix-1.
func DigitHeader(level int) string {
	if level >= 0 && level < len(digitHeaders) {
		return digitHeaders[level]
	}
	return digitHeaderPrefix + strconv.Itoa(level)
}

// IsDelayHeader reports whether name decides or records a delay: this package's routing
// headers, "x-delay", "x-death", "x-first-death-*" and "x-last-death-*". A publisher strips
// them before a delay path: a stale one must not decide the delay, and x-death entries can make
// dead-letter cycle detection drop the message (https://www.rabbitmq.com/docs/dlx).
func IsDelayHeader(name string) bool {
	switch name {
	case TargetHeader, DueHeader, BucketHeader, LastLevelHeader, "x-delay", "x-death":
		return true
	}
	return strings.HasPrefix(name, digitHeaderPrefix) || strings.HasPrefix(name, "x-first-death-") ||
		strings.HasPrefix(name, "x-last-death-")
}

// LastLevel returns the level of p's last hop, or -1 for a plan without hops.
func LastLevel(p ttlbuckets.Plan) int {
	if len(p.Hops) == 0 {
		return -1
	}
	return p.Hops[len(p.Hops)-1].Level
}

// FirstHopQueue reports whether p's first hop goes through a first-hop queue, which
// dead-letters into level 0: a [ttlbuckets.TopFirst] or [ttlbuckets.TopSplit] plan of several
// hops.
func FirstHopQueue(l ttlbuckets.Ladder, p ttlbuckets.Plan) bool {
	return (l.Order == ttlbuckets.TopFirst || l.Order == ttlbuckets.TopSplit) && len(p.Hops) > 1
}

// EncodeDigits sets in h the digit header of every level of l, zeros included, from p (from
// l.Plan). Nothing for an invalid ladder.
func EncodeDigits(l ttlbuckets.Ladder, p ttlbuckets.Plan, h map[string]any) {
	for level := range l.Levels() {
		h[DigitHeader(level)] = digitOf(p, level)
	}
}

// digitOf is p's digit at level, 0 beyond its digits.
func digitOf(p ttlbuckets.Plan, level int) int64 {
	if level < len(p.Digits) {
		return int64(p.Digits[level])
	}
	return 0
}

// LastHopValue returns the digit header value that sends digit into its level's last-hop
// queue: digit + Radix, which no other binding matches (digit for an invalid ladder).
func LastHopValue(l ttlbuckets.Ladder, digit int) int64 {
	g, ok := resolve(l)
	if !ok {
		return int64(digit)
	}
	return int64(digit) + g.mask + 1
}

// EncodeRoute sets in h the headers of a message whose last hop goes through a last-hop queue:
// the digit header of every level it reaches from p.Entry (or, after a first-hop queue, from
// level 0) to the last hop's, zeros included; [LastHopValue] of the last digit (the plain digit
// where the order ends); that level in [LastLevelHeader]. Without hops it is [EncodeDigits].
// Nothing for an invalid ladder.
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
	from := p.Entry
	if FirstHopQueue(l, p) {
		from = 0
	}
	for level := range g.levels {
		if level != p.Entry && (g.after(level, last) || g.after(from, level)) {
			continue
		}
		v := digitOf(p, level)
		if level == last {
			v = int64(p.Hops[len(p.Hops)-1].Digit) // a TopSplit plan's last hop is less than the level's digit
			// Where the order ends there are no last-hop queues.
			if !g.ends(last) {
				v += g.mask + 1
			}
		}
		h[DigitHeader(level)] = v
	}
	h[LastLevelHeader] = int64(last)
}

// DecodeDigits reads, for diagnostics, the digit per level of l that [EncodeDigits] or
// [EncodeRoute] wrote (any Go integer type; a [LastHopValue] reads as its digit, a header
// EncodeRoute leaves out as 0). Every problem is joined, each wrapping [ErrInvalidHeaders]:
// a digit header missing, not an integer or out of range, a non-zero digit for a level l lacks,
// a LastLevelHeader that is no level. The digits hold what could be read even on error. An
// invalid ladder returns nil and l.Validate's error.
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
			if _, ok := h[DigitHeader(level)]; ok && (first < 0 || g.after(first, level)) {
				first = level
			}
		}
	}
	for level := range g.levels {
		name := DigitHeader(level)
		raw, ok := h[name]
		if !ok {
			if last >= 0 && (g.after(level, last) || (first >= 0 && g.after(first, level))) {
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
	for _, name := range slices.Sorted(maps.Keys(h)) {
		rest, ok := strings.CutPrefix(name, digitHeaderPrefix)
		if level, err := strconv.Atoi(rest); !ok || err == nil && level >= 0 && level < g.levels && DigitHeader(level) == name {
			continue
		}
		if v, _, inRange := digitValue(h[name], math.MaxInt64); !(inRange && v == 0) {
			bad(name, "value %v for a level this ladder does not have (levels 0 to %d)", h[name], g.levels-1)
		}
	}
	return digits, errors.Join(errs...)
}

// digitValue converts an integer header value; inRange is false outside 0..max.
func digitValue(raw any, max int64) (v int64, isInt, inRange bool) {
	v, isInt, fits := HeaderInt(raw)
	return v, isInt, fits && v >= 0 && v <= max
}

// HeaderInt reads a header value of any Go integer type; isInt is false for another type, fits
// for an unsigned value above math.MaxInt64.
func HeaderInt(raw any) (v int64, isInt, fits bool) {
	switch raw.(type) {
	case int, int8, int16, int32, int64:
		return reflect.ValueOf(raw).Int(), true, true
	case uint, uint8, uint16, uint32, uint64:
		if u := reflect.ValueOf(raw).Uint(); u <= math.MaxInt64 {
			return int64(u), true, true
		}
		return 0, true, false
	}
	return 0, false, false
}
