package ttlbuckets

import (
	"cmp"
	"errors"
	"fmt"
	"math/bits"
	"slices"
	"strconv"
	"strings"
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

// Ladder describes a delay ladder (see the package documentation); the zero value is the
// default ladder. Its methods are safe for concurrent use. On an invalid ladder [Ladder.Plan]
// returns [Ladder.Validate]'s error, [Ladder.Levels] 0 and [Ladder.Exact] false.
type Ladder struct {
	// Unit is the resolution: whole milliseconds, at least 1 ms; 0 means [DefaultUnit].
	Unit time.Duration
	// Radix is the number base: a power of two from 2 to 64; 0 means [DefaultRadix]. Each
	// level has Radix-1 queues.
	Radix int
	// Max is the largest delay accepted, at least one Unit; 0 means [DefaultMax]. The ladder
	// holds ceil(Max/Unit) units, so a delay just below a Max of partial units may round up
	// above Max (by less than one Unit); a delay above Max is refused ([ErrDelayTooLong]).
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
		add("Unit %v: level 0's queue for digit %d would have x-message-ttl %d ms, above RabbitMQ's limit of %d ms; allowed with Radix %d: 1ms to %v",
			l.Unit, g.mask, g.mask*g.unitMs, MaxQueueTTL, l.Radix, durationMs(time.Duration(MaxQueueTTL/g.mask)*time.Millisecond))
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

// Levels returns the smallest L with Radix^L > ceil(Max/Unit) (8 by default), or 0 for an invalid
// ladder: at most Levels hops ([TopSplit], Radix > 2: Levels+1), Levels·(Radix-1) queues, and
// (Levels-1)·(Radix-1) first-hop queues more in the [TopSplit] and [TopFirst] orders.
func (l Ladder) Levels() int {
	g, p := l.resolve()
	if p != 0 {
		return 0
	}
	return g.levels
}

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
	// ShortestFirst climbs from the lowest non-zero level (the top hands to the dispatch
	// exchange): only the last, longest hop ends just before due.
	ShortestFirst
	// LongestFirst descends from the highest non-zero level (level 0 hands to the dispatch
	// exchange), the textbook ladder: all hops but the first fall in the last Radix^top units.
	LongestFirst
	// TopFirst takes the highest digit's hop first (through a first-hop queue that dead-letters
	// into level 0), then the others as [ShortestFirst] does.
	TopFirst
)

var orderNames = [...]string{TopSplit: "top-split", ShortestFirst: "shortest-first", LongestFirst: "longest-first",
	TopFirst: "top-first"}

// String returns the text form, or "Order(N)" for an unknown value.
func (o Order) String() string {
	if !o.valid() {
		return "Order(" + strconv.Itoa(int(o)) + ")"
	}
	return orderNames[o]
}

var allowedOrders = fmt.Sprintf("0 (%s), 1 (%s), 2 (%s) or 3 (%s)", orderNames[0], orderNames[1], orderNames[2], orderNames[3])

func (o Order) valid() bool { return o >= TopSplit && o <= TopFirst }

// ParseOrder parses a text form (ASCII case and surrounding space ignored); "" gives [TopSplit].
// Other text returns an error wrapping [ErrInvalidLadder] that quotes it and lists the names.
func ParseOrder(s string) (Order, error) {
	if i := slices.Index(orderNames[:], cmp.Or(strings.ToLower(strings.TrimSpace(s)), orderNames[TopSplit])); i >= 0 {
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

// Rounding says what [Ladder.Plan] does with a delay that is not a whole number of
// [Ladder.Unit].
type Rounding int

const (
	// RoundUp (the default) rounds it up to the next whole unit, so a message is never early;
	// [Plan.Rounded] reports it.
	RoundUp Rounding = iota
	// Strict rejects it with an error wrapping [ErrNotWholeUnit]. Any Rounding value other
	// than RoundUp behaves as Strict.
	Strict
)

// Plan is the route of one delayed message through a ladder.
type Plan struct {
	// Requested is the delay asked for.
	Requested time.Duration
	// Effective is the sum of the hops' TTLs: Requested <= Effective < Requested+Unit for a
	// positive Requested, 0 otherwise.
	Effective time.Duration
	// Rounded reports Effective > Requested for a positive Requested.
	Rounded bool
	// Digits[L] is level L's digit (0..Radix-1) of Effective in units; len(Digits) == Levels().
	Digits []int
	// Entry is the level of the first hop, or -1 when there are none (Requested <= 0: publish
	// straight to the target).
	Entry int
	// Hops lists one hop per non-zero digit in travel order: levels ascending ([ShortestFirst]),
	// descending ([LongestFirst]), or the highest first, then the others ascending ([TopFirst]).
	// A split [TopSplit] route has the highest level twice, digit d-u first and u last, where
	// u = 1 + (the units below the highest level) mod (d-1); an unsplit one is [TopFirst]'s.
	Hops []Hop
}

// Hop is one stay in the ladder queue of digit Digit at level Level, x-message-ttl TTL ms.
type Hop struct {
	Level, Digit int
	TTL          int64 // ms
}

// Plan computes the route of a message delayed by d; d <= 0 gives no hops, Entry -1, Effective
// 0. A d of partial units is rounded up ([RoundUp]) or refused ([Strict], [ErrNotWholeUnit]); a
// d above [Ladder.Max] is refused with [ErrDelayTooLong]; an invalid ladder returns
// [Ladder.Validate]'s error. On error the Plan is the zero value. It allocates Digits and Hops.
func (l Ladder) Plan(d time.Duration, mode Rounding) (Plan, error) {
	g, p := l.resolve()
	if p != 0 {
		return Plan{}, l.Validate()
	}
	if d <= 0 {
		return Plan{Requested: d, Digits: make([]int, g.levels), Entry: -1}, nil
	}
	if d > g.max {
		return Plan{}, fmt.Errorf("%w: %v is above the ladder's maximum (Max) of %v", ErrDelayTooLong, d, durationMs(g.max))
	}
	units := int64(d / g.unit)
	rounded := d%g.unit != 0
	if rounded {
		if mode != RoundUp {
			return Plan{}, fmt.Errorf("%w: %v is not a whole number of the ladder's Unit %v (Strict rounding)", ErrNotWholeUnit, d, g.unit)
		}
		units++
	}
	digits := make([]int, g.levels)
	n, top := 0, 0 // non-zero digits, the highest one's level
	for level, u := 0, units; u != 0; level, u = level+1, u>>g.shift {
		if v := int(u & g.mask); v != 0 {
			digits[level], top = v, level
			n++
		}
	}
	split := g.order == TopSplit && n > 1 && digits[top] > 1
	// With split, the units of level top taken last: 1 + (units below level top) mod (d-1), so a
	// burst's last hops spread over the top level's queues 1 to d-1, not all through one.
	last := 0
	if split {
		last = 1 + int((units&(int64(1)<<(g.shift*uint(top))-1))%int64(digits[top]-1))
	}
	hops := make([]Hop, 0, n+1)
	if g.order == LongestFirst {
		for level := g.levels - 1; level >= 0; level-- {
			if v := digits[level]; v != 0 {
				hops = append(hops, Hop{Level: level, Digit: v, TTL: g.ttl(level, v)})
			}
		}
	} else {
		first := -1 // the level taken first, out of ascending order
		switch {
		case (g.order == TopFirst || (g.order == TopSplit && !split)) && n > 1:
			first = top
			hops = append(hops, Hop{Level: top, Digit: digits[top], TTL: g.ttl(top, digits[top])})
		case split:
			hops = append(hops, Hop{Level: top, Digit: digits[top] - last, TTL: g.ttl(top, digits[top]-last)})
		}
		for level, v := range digits {
			if level == top && split {
				v = last
			}
			if v != 0 && level != first {
				hops = append(hops, Hop{Level: level, Digit: v, TTL: g.ttl(level, v)})
			}
		}
	}
	return Plan{Requested: d, Effective: time.Duration(units) * g.unit, Rounded: rounded, Digits: digits,
		Entry: hops[0].Level, Hops: hops}, nil
}

// Exact reports whether the ladder carries d without rounding: 0 <= d <= [Ladder.Max] and d a
// whole number of [Ladder.Unit]; for d > 0, exactly when [Ladder.Plan](d, [Strict]) succeeds.
// It is false for an invalid ladder. It does not allocate.
func (l Ladder) Exact(d time.Duration) bool {
	g, p := l.resolve()
	return p == 0 && d >= 0 && d%g.unit == 0 && d <= g.max
}

// Bucket is one fixed delay served by its own queue with x-message-ttl TTL ms (Delay in ms):
// one hop, exact (as exact as the broker's TTL timer).
type Bucket struct {
	Delay time.Duration
	TTL   int64 // ms
}

// Buckets is a set of fixed delays with exact-match lookup. The zero value is the empty set.
// A Buckets value is immutable and safe for concurrent use.
type Buckets struct {
	list []Bucket // ascending Delay, no duplicates
}

// NewBuckets returns the set of the given delays: each whole ms, 1 ms to [MaxQueueTTL] ms, once.
// Every problem is reported, joined, each wrapping [ErrInvalidBuckets] and naming the delay, its
// position and the allowed range; the set is then empty. No delays give the empty set.
func NewBuckets(delays ...time.Duration) (Buckets, error) {
	var errs []error
	first := make(map[time.Duration]int, len(delays))
	list := make([]Bucket, 0, len(delays))
	const maxDelay = time.Duration(MaxQueueTTL) * time.Millisecond
	for i, d := range delays {
		switch {
		case d <= 0 || d > maxDelay:
			errs = append(errs, fmt.Errorf("%w: delay #%d %v: allowed 1ms to %v (%d ms, RabbitMQ's x-message-ttl limit)",
				ErrInvalidBuckets, i, d, maxDelay, MaxQueueTTL))
		case d%time.Millisecond != 0:
			errs = append(errs, fmt.Errorf("%w: delay #%d %v: allowed a whole number of milliseconds (x-message-ttl's resolution), 1ms to %d ms",
				ErrInvalidBuckets, i, d, MaxQueueTTL))
		default:
			if j, dup := first[d]; dup {
				errs = append(errs, fmt.Errorf("%w: delay #%d %v: duplicate of delay #%d; allowed each delay once",
					ErrInvalidBuckets, i, d, j))
				continue
			}
			first[d] = i
			list = append(list, Bucket{Delay: d, TTL: int64(d / time.Millisecond)})
		}
	}
	if len(errs) > 0 {
		return Buckets{}, errors.Join(errs...)
	}
	slices.SortFunc(list, func(a, b Bucket) int { return cmp.Compare(a.Delay, b.Delay) })
	return Buckets{list: list}, nil
}

// List returns the buckets in ascending order of delay. The slice is a copy.
func (b Buckets) List() []Bucket { return slices.Clone(b.list) }

// Lookup returns the bucket whose Delay is exactly d (no rounding). It does not allocate.
func (b Buckets) Lookup(d time.Duration) (Bucket, bool) {
	i, ok := slices.BinarySearchFunc(b.list, d, func(x Bucket, d time.Duration) int { return cmp.Compare(x.Delay, d) })
	if !ok {
		return Bucket{}, false
	}
	return b.list[i], true
}
