package ttlbuckets

import (
	"errors"
	"fmt"
	"time"
)

// MaxQueueTTL is the largest x-message-ttl, in milliseconds, that RabbitMQ accepts on a
// queue: 315,360,000,000 ms (3,650 days). A larger value makes the queue declaration fail
// with PRECONDITION_FAILED "value_too_large" (rabbit_amqqueue.erl, check_message_ttl_arg,
// through rabbit_misc:check_expiry). Every ladder queue and bucket stays at or below it.
const MaxQueueTTL int64 = 315_360_000_000

// Defaults for the zero fields of a [Ladder].
const (
	// DefaultUnit is the ladder's resolution: 1 ms, the resolution of x-message-ttl.
	DefaultUnit = time.Millisecond
	// DefaultRadix is 16: 8 levels of 15 queues (120 queues, and 105 first-hop queues in the
	// default order, [TopSplit]) for DefaultMax, at most 9 hops in that order (8 in the others).
	DefaultRadix = 16
	// DefaultMax is 2^32-1 ms (about 49.7 days), the same ceiling as the delayed-message
	// plugin's x-delay, and more than 30 days at 1 ms resolution.
	DefaultMax = (1<<32 - 1) * time.Millisecond
)

// Ladder describes a delay ladder: a delay is written as a number of units in base Radix,
// and level L holds one queue per non-zero digit value v with x-message-ttl v·Radix^L·Unit.
// The zero value is the default ladder: 1 ms unit, radix 16, maximum 2^32-1 ms,
// [TopSplit] (8 levels of 15 queues and 105 first-hop queues; a message takes at most 9
// hops). A Ladder is a small value; its methods are safe for concurrent use.
//
// Methods that need a valid ladder report an invalid one as documented on each: [Ladder.Plan]
// returns [Ladder.Validate]'s error; [Ladder.Levels] returns 0 and [Ladder.Exact] false.
type Ladder struct {
	// Unit is the resolution: a whole number of milliseconds, at least 1 ms. A delay that
	// is not a whole number of units is rounded up (or rejected, see [Strict]). 0 means
	// [DefaultUnit].
	Unit time.Duration

	// Radix is the number base: a power of two from 2 to 64. Each level has Radix-1
	// queues, and a delay takes one hop per non-zero digit ([TopSplit]: at most one more). 0
	// means [DefaultRadix].
	Radix int

	// Max is the largest delay accepted, at least one Unit. 0 means [DefaultMax].
	//
	// The ladder is sized for Max rounded UP to a whole number of units, its capacity:
	// ceil(Max/Unit) units. Every delay d <= Max is accepted and rounds up to at most
	// the capacity, so when Max is not a whole number of units a delay just below Max
	// may have an effective delay above Max (by less than one Unit), never above what
	// the ladder's levels represent. A delay above Max is rejected ([ErrDelayTooLong])
	// even when it is below the capacity, so [Ladder.Exact] and [Ladder.Plan] agree.
	Max time.Duration

	// Order is the travel order through the levels; the zero value is [TopSplit].
	Order Order
}

// WithDefaults returns l with its zero fields replaced by the defaults ([DefaultUnit],
// [DefaultRadix], [DefaultMax]; the zero Order is already [TopSplit]). Negative or
// otherwise invalid values are kept for [Ladder.Validate] to report.
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
	unit     time.Duration
	unitMs   int64 // unit in ms
	shift    uint  // log2(radix)
	mask     int64 // radix - 1
	max      time.Duration
	maxUnits int64 // capacity: ceil(max / unit)
	levels   int   // smallest L with radix^L > maxUnits
	order    Order
}

// problem bits reported by resolve.
const (
	badUnit     = 1 << iota // unit below 1 ms or not whole ms
	badRadix                // radix not a power of two in 2..64
	badMax                  // max below one unit
	badOrder                // order not TopSplit, ShortestFirst, LongestFirst or TopFirst
	badUnitTTL              // level 0's longest queue TTL above MaxQueueTTL
	badLevelTTL             // the top level's longest queue TTL above MaxQueueTTL
)

// radixShift returns log2(r) for a power of two r in 2..64, or 0.
func radixShift(r int) uint {
	if r < 2 || r > 64 || r&(r-1) != 0 {
		return 0
	}
	var s uint
	for 1<<s < r {
		s++
	}
	return s
}

// resolve checks l (with defaults applied) without allocating and returns its geometry and
// the set of problems (0 when valid). The arithmetic cannot overflow: a Duration is below
// 2^63 ns, so Max/Unit < 2^44 units, radix^levels < 2^50, and every TTL computed is below
// 2^51 ms.
func (l Ladder) resolve() (geometry, uint) {
	l = l.WithDefaults()
	var p uint
	if l.Unit < time.Millisecond || l.Unit%time.Millisecond != 0 {
		p |= badUnit
	}
	shift := radixShift(l.Radix)
	if shift == 0 {
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
	g := geometry{
		unit:   l.Unit,
		unitMs: int64(l.Unit / time.Millisecond),
		shift:  shift,
		mask:   int64(l.Radix - 1),
		max:    l.Max,
		order:  l.Order,
	}
	if g.mask*g.unitMs > MaxQueueTTL {
		return geometry{}, p | badUnitTTL
	}
	if p&badMax != 0 {
		return geometry{}, p
	}
	g.maxUnits = int64(l.Max / l.Unit)
	if l.Max%l.Unit != 0 {
		g.maxUnits++
	}
	g.levels = levelsFor(g.maxUnits, shift)
	if g.topTTL() > MaxQueueTTL {
		// g is returned filled in for Validate's message.
		return g, p | badLevelTTL
	}
	if p != 0 {
		return geometry{}, p
	}
	return g, 0
}

// levelsFor returns the smallest L with 2^(shift·L) > units (at least 1).
func levelsFor(units int64, shift uint) int {
	levels := 1
	for top := int64(1); top<<shift <= units; top <<= shift {
		levels++
	}
	return levels
}

// topTTL is the TTL in ms of the longest queue: digit radix-1 at the top level.
func (g geometry) topTTL() int64 {
	return g.mask << (g.shift * uint(g.levels-1)) * g.unitMs
}

// ttl is the TTL in ms of the queue for digit at level.
func (g geometry) ttl(level, digit int) int64 {
	return int64(digit) << (g.shift * uint(level)) * g.unitMs
}

// Validate checks l, with zero fields replaced by their defaults, and returns nil or every
// problem at once, joined with [errors.Join]; each problem wraps [ErrInvalidLadder] and
// names the field, the bad value and the allowed range:
//
//   - Unit below 1 ms or not a whole number of milliseconds;
//   - Radix not a power of two from 2 to 64;
//   - Max below one Unit;
//   - Order not one of [TopSplit], [ShortestFirst], [LongestFirst] and [TopFirst];
//   - a queue TTL above [MaxQueueTTL], RabbitMQ's x-message-ttl limit: reported on Unit
//     when even level 0's longest queue, (Radix-1)·Unit, is too long, otherwise on Max
//     with the largest Max this Unit and Radix allow.
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
		// The most levels whose longest queue still fits: the allowed Max is
		// (Radix^most - 1) units.
		most := 1
		for (geometry{shift: g.shift, mask: g.mask, unitMs: g.unitMs, levels: most + 1}).topTTL() <= MaxQueueTTL {
			most++
		}
		allowed := time.Duration(int64(1)<<(g.shift*uint(most))-1) * l.Unit
		add("Max %v: needs %d levels, whose longest queue (level %d, digit %d) would have x-message-ttl %d ms, above RabbitMQ's limit of %d ms; allowed with Unit %v and Radix %d: %v to %v",
			l.Max, g.levels, g.levels-1, g.mask, g.topTTL(), MaxQueueTTL, l.Unit, l.Radix, l.Unit, durationMs(allowed))
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

// Levels returns the number of levels: the smallest L with Radix^L > ceil(Max/Unit), so
// that Radix^L·Unit > Max and every delay up to Max, rounded up to whole units, can be
// written with L digits. A message takes at most Levels hops (with [TopSplit] and a Radix
// above 2, Levels+1), and the ladder has Levels·(Radix-1) queues, and (Levels-1)·(Radix-1)
// first-hop queues more in the [TopSplit] and [TopFirst] orders. It returns 0 for an invalid
// ladder. The default ladder has 8.
func (l Ladder) Levels() int {
	g, p := l.resolve()
	if p != 0 {
		return 0
	}
	return g.levels
}
