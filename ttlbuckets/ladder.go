package ttlbuckets

import (
	"errors"
	"fmt"
	"math/bits"
	"time"
)

// Sentinel errors. Every error this package returns wraps exactly one of them (test with
// [errors.Is]); the message adds the field, the bad value and the allowed range.
var (
	// ErrInvalidLadder is wrapped by [Ladder.Validate]'s problems, by [Ladder.Plan] for an
	// invalid ladder, and by [ParseOrder], [Order.UnmarshalText] and [Order.MarshalText].
	ErrInvalidLadder = errors.New("ttlbuckets: invalid ladder")
	// ErrDelayTooLong is wrapped by [Ladder.Plan] for a delay above [Ladder.Max].
	ErrDelayTooLong = errors.New("ttlbuckets: delay too long")
	// ErrNotWholeUnit is wrapped by [Ladder.Plan] in [Strict] mode for a delay that is not a
	// whole number of [Ladder.Unit].
	ErrNotWholeUnit = errors.New("ttlbuckets: delay not a whole number of units")
	// ErrInvalidBuckets is wrapped by every problem [NewBuckets] reports.
	ErrInvalidBuckets = errors.New("ttlbuckets: invalid buckets")
)

// MaxQueueTTL is the largest x-message-ttl, in ms, RabbitMQ accepts on a queue (3,650 days); a
// larger one fails the declaration with PRECONDITION_FAILED value_too_large (rabbit_amqqueue.erl,
// check_message_ttl_arg). Every ladder queue and bucket stays at or below it.
const MaxQueueTTL int64 = 315_360_000_000

// Defaults for the zero fields of a [Ladder].
const (
	// DefaultUnit is 1 ms, the resolution of x-message-ttl.
	DefaultUnit = time.Millisecond
	// DefaultRadix is 16: for DefaultMax, 8 levels of 15 queues (120, and 105 first-hop queues
	// in [TopSplit] and [TopFirst]) and at most 9 hops in [TopSplit] (8 in the other orders).
	DefaultRadix = 16
	// DefaultMax is 2^32-1 ms (about 49.7 days), the delayed-message plugin's x-delay ceiling.
	DefaultMax = (1<<32 - 1) * time.Millisecond
)

// Ladder describes a delay ladder: a delay is written as a number of units in base Radix, and
// level L holds one queue per non-zero digit value v with x-message-ttl v·Radix^L·Unit. The
// zero value is the default ladder. A Ladder is a small value; its methods are safe for
// concurrent use. On an invalid ladder [Ladder.Plan] returns [Ladder.Validate]'s error,
// [Ladder.Levels] 0 and [Ladder.Exact] false.
type Ladder struct {
	// Unit is the resolution: whole milliseconds, at least 1 ms; 0 means [DefaultUnit].
	Unit time.Duration
	// Radix is the number base: a power of two from 2 to 64; 0 means [DefaultRadix]. Each
	// level has Radix-1 queues.
	Radix int
	// Max is the largest delay accepted, at least one Unit; 0 means [DefaultMax]. The ladder
	// is sized for ceil(Max/Unit) units, so when Max is not a whole number of units a delay
	// just below Max may round up above Max (by less than one Unit). A delay above Max is
	// rejected ([ErrDelayTooLong]) even when the ladder could carry it.
	Max time.Duration
	// Order is the travel order through the levels; the zero value is [TopSplit].
	Order Order
}

// WithDefaults returns l with its zero fields replaced by the defaults; invalid values are kept
// for [Ladder.Validate] to report.
func (l Ladder) WithDefaults() Ladder {
	if l.Unit == 0 {
		l.Unit = DefaultUnit
	}
	if l.Radix == 0 {
		l.Radix = DefaultRadix
	}
	if l.Max == 0 {
		l.Max = DefaultMax
	}
	return l
}

// geometry is a valid ladder resolved to the integers Plan works with.
type geometry struct {
	unit   time.Duration
	unitMs int64
	shift  uint  // log2(radix)
	mask   int64 // radix - 1
	max    time.Duration
	levels int // smallest L with radix^L > ceil(max/unit)
	order  Order
}

// problem bits reported by resolve.
const (
	badUnit = 1 << iota
	badRadix
	badMax
	badOrder
	badUnitTTL  // level 0's longest queue TTL above MaxQueueTTL
	badLevelTTL // the top level's longest queue TTL above MaxQueueTTL
)

// resolve checks l (with defaults) without allocating and returns its geometry (partial when
// there are problems) and problem bits.
// Nothing overflows: Max/Unit < 2^44 units, radix^levels < 2^50, every TTL < 2^51 ms.
func (l Ladder) resolve() (geometry, uint) {
	l = l.WithDefaults()
	var p uint
	if l.Unit < time.Millisecond || l.Unit%time.Millisecond != 0 {
		p |= badUnit
	}
	if l.Radix < 2 || l.Radix > 64 || l.Radix&(l.Radix-1) != 0 {
		p |= badRadix
	}
	if l.Max < 0 || (p&badUnit == 0 && l.Max < l.Unit) {
		p |= badMax
	}
	if !l.Order.valid() {
		p |= badOrder
	}
	if p&(badUnit|badRadix) != 0 {
		return geometry{}, p
	}
	g := geometry{unit: l.Unit, unitMs: int64(l.Unit / time.Millisecond), shift: uint(bits.TrailingZeros(uint(l.Radix))),
		mask: int64(l.Radix - 1), max: l.Max, order: l.Order}
	if g.mask*g.unitMs > MaxQueueTTL {
		return g, p | badUnitTTL
	}
	if p&badMax != 0 {
		return g, p
	}
	units := int64(l.Max / l.Unit)
	if l.Max%l.Unit != 0 {
		units++
	}
	g.levels = 1
	for top := int64(1); top<<g.shift <= units; top <<= g.shift {
		g.levels++
	}
	if g.ttl(g.levels-1, int(g.mask)) > MaxQueueTTL {
		p |= badLevelTTL
	}
	return g, p
}

// ttl is the TTL in ms of the queue for digit at level.
func (g geometry) ttl(level, digit int) int64 {
	return int64(digit) << (g.shift * uint(level)) * g.unitMs
}

// Validate checks l, with zero fields replaced by their defaults, and returns nil or every
// problem, joined with [errors.Join], each wrapping [ErrInvalidLadder] and naming the field, the
// bad value and the allowed range: Unit below 1 ms or not whole ms; Radix not a power of two
// from 2 to 64; Max below one Unit; an unknown Order; a queue TTL above [MaxQueueTTL] (reported
// on Unit when level 0's (Radix-1)·Unit is too long, else on Max with the largest Max allowed).
func (l Ladder) Validate() error {
	g, p := l.resolve()
	if p == 0 {
		return nil
	}
	l = l.WithDefaults()
	var errs []error
	add := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("%w: "+format, append([]any{ErrInvalidLadder}, args...)...))
	}
	if p&badUnit != 0 {
		add("Unit %v: allowed a whole number of milliseconds, at least 1ms", l.Unit)
	}
	if p&badRadix != 0 {
		add("Radix %d: allowed a power of two from 2 to 64 (2, 4, 8, 16, 32 or 64)", l.Radix)
	}
	if p&badMax != 0 {
		if p&badUnit == 0 {
			add("Max %v: allowed at least one Unit (%v)", l.Max, l.Unit)
		} else {
			add("Max %v: allowed at least one Unit (at least 1ms)", l.Max)
		}
	}
	if p&badOrder != 0 {
		add("Order %d: allowed %s", int(l.Order), allowedOrders)
	}
	if p&badUnitTTL != 0 {
		r := int64(l.Radix)
		unitMs := int64(l.Unit / time.Millisecond)
		add("Unit %v: level 0's queue for digit %d would have x-message-ttl %d ms, above RabbitMQ's limit of %d ms; allowed with Radix %d: 1ms to %v",
			l.Unit, r-1, (r-1)*unitMs, MaxQueueTTL, r, durationMs(time.Duration(MaxQueueTTL/(r-1))*time.Millisecond))
	}
	if p&badLevelTTL != 0 {
		most := 1 // the most levels whose longest queue fits: Max up to (Radix^most - 1) units
		for g.ttl(most, int(g.mask)) <= MaxQueueTTL {
			most++
		}
		allowed := time.Duration(int64(1)<<(g.shift*uint(most))-1) * l.Unit
		add("Max %v: needs %d levels, whose longest queue (level %d, digit %d) would have x-message-ttl %d ms, above RabbitMQ's limit of %d ms; allowed with Unit %v and Radix %d: %v to %v",
			l.Max, g.levels, g.levels-1, g.mask, g.ttl(g.levels-1, int(g.mask)), MaxQueueTTL, l.Unit, l.Radix, l.Unit, durationMs(allowed))
	}
	return errors.Join(errs...)
}

// durationMs formats d as a Duration, followed by its milliseconds when whole.
func durationMs(d time.Duration) string {
	if d%time.Millisecond == 0 {
		return fmt.Sprintf("%v (%d ms)", d, d/time.Millisecond)
	}
	return d.String()
}

// Levels returns the number of levels, the smallest L with Radix^L > ceil(Max/Unit), or 0 for
// an invalid ladder (the default ladder has 8). A message takes at most Levels hops ([TopSplit]
// with a Radix above 2: Levels+1); the ladder has Levels·(Radix-1) queues, and
// (Levels-1)·(Radix-1) first-hop queues more in the [TopSplit] and [TopFirst] orders.
func (l Ladder) Levels() int {
	g, p := l.resolve()
	if p != 0 {
		return 0
	}
	return g.levels
}
