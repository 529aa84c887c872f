package ttlbuckets_test

import (
	"errors"
	"math/big"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/delaykit/rabbitdelay/internal/laddertest"
	"github.com/delaykit/rabbitdelay/ttlbuckets"
)

// The checks below recompute everything with an independent method (division and
// multiplication with math/big, instead of the package's shifts and masks), so tests and
// fuzz targets compare two implementations.

var radixes = laddertest.Radixes

var orders = laddertest.Orders

var unwrapAll = laddertest.UnwrapAll

var pow = laddertest.Pow

// refDigits writes units in base r with the given number of levels; ok is false when it
// does not fit.
func refDigits(units int64, r, levels int) (digits []int, ok bool) {
	digits = make([]int, levels)
	for i := range levels {
		digits[i] = int(units % int64(r))
		units /= int64(r)
	}
	return digits, units == 0
}

// checkLadder checks Levels of a valid ladder against its definition. (The queues and where
// each level hands a message on are checked in package internal/route.)
func checkLadder(t testing.TB, l ttlbuckets.Ladder) {
	t.Helper()
	lw := l.WithDefaults()
	r, u := lw.Radix, lw.Unit
	capacity := int64(lw.Max / u)
	if lw.Max%u != 0 {
		capacity++
	}
	levels := l.Levels()
	capBig := big.NewInt(capacity)
	// Smallest L with r^L > ceil(Max/Unit).
	if levels < 1 || pow(r, levels).Cmp(capBig) <= 0 || (levels > 1 && pow(r, levels-1).Cmp(capBig) > 0) {
		t.Fatalf("%+v: Levels() = %d, not the smallest L with %d^L > %d", lw, levels, r, capacity)
	}
	// r^Levels * Unit > Max.
	if new(big.Int).Mul(pow(r, levels), big.NewInt(int64(u))).Cmp(big.NewInt(int64(lw.Max))) <= 0 {
		t.Fatalf("%+v: %d^%d units do not exceed Max", lw, r, levels)
	}
	// The longest queue, digit r-1 at the top level, fits RabbitMQ's limit.
	top := new(big.Int).Mul(big.NewInt(int64(r-1)), pow(r, levels-1))
	top.Mul(top, big.NewInt(int64(u/time.Millisecond)))
	if !top.IsInt64() || top.Int64() > ttlbuckets.MaxQueueTTL {
		t.Fatalf("%+v: longest queue TTL %v above MaxQueueTTL", lw, top)
	}
}

// queueTTL is the definition of the TTL in ms of the queue of digit at level:
// digit·r^level·unit, computed with math/big.
func queueTTL(lw ttlbuckets.Ladder, level, digit int) *big.Int {
	want := new(big.Int).Mul(big.NewInt(int64(digit)), pow(lw.Radix, level))
	return want.Mul(want, big.NewInt(int64(lw.Unit/time.Millisecond)))
}

// checkPlan checks the result of l.Plan(d, mode) against the definitions.
func checkPlan(t testing.TB, l ttlbuckets.Ladder, d time.Duration, mode ttlbuckets.Rounding, p ttlbuckets.Plan, err error) {
	t.Helper()
	lw := l.WithDefaults()
	if verr := l.Validate(); verr != nil {
		if !errors.Is(err, ttlbuckets.ErrInvalidLadder) {
			t.Fatalf("%+v invalid (%v), Plan(%v) error = %v, want ErrInvalidLadder", lw, verr, d, err)
		}
		if l.Exact(d) || l.Levels() != 0 {
			t.Fatalf("%+v invalid, yet Exact/Levels answer", lw)
		}
		return
	}
	levels, r, u := l.Levels(), lw.Radix, lw.Unit
	if d <= 0 {
		if err != nil || p.Entry != -1 || len(p.Hops) != 0 || p.Effective != 0 || p.Rounded || p.Requested != d ||
			len(p.Digits) != levels || slices.ContainsFunc(p.Digits, func(v int) bool { return v != 0 }) {
			t.Fatalf("%+v Plan(%v) = %+v, %v; want no hops, Entry -1, zero digits", lw, d, p, err)
		}
		if l.Exact(d) != (d == 0) {
			t.Fatalf("%+v Exact(%v) = %v", lw, d, l.Exact(d))
		}
		return
	}
	if d > lw.Max {
		if !errors.Is(err, ttlbuckets.ErrDelayTooLong) || !strings.Contains(err.Error(), lw.Max.String()) {
			t.Fatalf("%+v Plan(%v) error = %v, want ErrDelayTooLong stating Max %v", lw, d, err, lw.Max)
		}
		if l.Exact(d) {
			t.Fatalf("%+v Exact(%v) true above Max", lw, d)
		}
		return
	}
	whole := d%u == 0
	if l.Exact(d) != whole {
		t.Fatalf("%+v Exact(%v) = %v, want %v", lw, d, l.Exact(d), whole)
	}
	if !whole && mode == ttlbuckets.Strict {
		if !errors.Is(err, ttlbuckets.ErrNotWholeUnit) || !strings.Contains(err.Error(), "Unit "+u.String()) {
			t.Fatalf("%+v Plan(%v, Strict) error = %v, want ErrNotWholeUnit stating the unit", lw, d, err)
		}
		return
	}
	if err != nil {
		t.Fatalf("%+v Plan(%v, %v) error = %v", lw, d, mode, err)
	}
	if p.Requested != d || p.Effective < d || p.Effective-d >= u || p.Effective%u != 0 || p.Rounded != !whole {
		t.Fatalf("%+v Plan(%v): Requested %v Effective %v Rounded %v", lw, d, p.Requested, p.Effective, p.Rounded)
	}
	digits, fits := refDigits(int64(p.Effective/u), r, levels)
	if !fits || !slices.Equal(digits, p.Digits) {
		t.Fatalf("%+v Plan(%v): digits %v, want %v (fits %v)", lw, d, p.Digits, digits, fits)
	}
	nonZero, top := 0, -1
	for level, v := range digits {
		if v != 0 {
			nonZero, top = nonZero+1, level
		}
	}
	// A top-split plan of several digits whose highest is 2 or more takes that level twice:
	// digit-u first, u last (u from splitLast).
	split := lw.Order == ttlbuckets.TopSplit && nonZero > 1 && digits[top] > 1
	// A top-split plan of several digits whose highest is 1 takes the top-first route.
	topFirst := (lw.Order == ttlbuckets.TopFirst || lw.Order == ttlbuckets.TopSplit && !split) && nonZero > 1
	wantHops := nonZero
	if split {
		wantHops++
	}
	if len(p.Hops) != wantHops || len(p.Hops) == 0 || p.Entry != p.Hops[0].Level {
		t.Fatalf("%+v Plan(%v): %d hops for %d non-zero digits, Entry %d", lw, d, len(p.Hops), nonZero, p.Entry)
	}
	if split {
		u := splitLast(digits, r, top)
		if p.Hops[0].Level != top || p.Hops[0].Digit != digits[top]-u || p.Hops[len(p.Hops)-1].Level != top || p.Hops[len(p.Hops)-1].Digit != u {
			t.Fatalf("%+v Plan(%v): hops %+v: top-split takes digit %d less %d of level %d first and %d units of it last", lw, d, p.Hops, digits[top], u, top, u)
		}
	}
	var sum int64
	for i, h := range p.Hops {
		wantDigit := p.Digits[h.Level]
		if split && h.Level == top {
			wantDigit = h.Digit // checked above
		}
		if want := queueTTL(lw, h.Level, h.Digit); h.Digit < 1 || h.Digit >= r || h.Level < 0 || h.Level >= levels ||
			!want.IsInt64() || want.Int64() != h.TTL || wantDigit != h.Digit {
			t.Fatalf("%+v Plan(%v): hop %+v is no queue of the ladder", lw, d, h)
		}
		if i > 0 {
			prev := p.Hops[i-1].Level
			highFirst := topFirst || split // the highest level first, then ascending
			ascending := lw.Order == ttlbuckets.ShortestFirst || (highFirst && i > 1)
			if (ascending && h.Level <= prev) || (lw.Order == ttlbuckets.LongestFirst && h.Level >= prev) ||
				(highFirst && i == 1 && h.Level >= prev) {
				t.Fatalf("%+v Plan(%v): hops %+v out of %v order", lw, d, p.Hops, lw.Order)
			}
			if topFirst && (h.Level >= p.Hops[0].Level || p.Hops[0].Level != top) {
				t.Fatalf("%+v Plan(%v): hops %+v: the top-first route takes the highest level %d first", lw, d, p.Hops, top)
			}
		}
		sum += h.TTL
	}
	if time.Duration(sum)*time.Millisecond != p.Effective {
		t.Fatalf("%+v Plan(%v): hop TTLs sum to %d ms, Effective %v", lw, d, sum, p.Effective)
	}
}

// splitLast is the units of level top (digit digits[top] >= 2) that a top-split plan takes
// last: 1 + (the value of the lower digits) mod (digits[top] - 1); the rest it takes first.
func splitLast(digits []int, radix, top int) int {
	var lower int64
	for level := top - 1; level >= 0; level-- {
		lower = lower*int64(radix) + int64(digits[level])
	}
	return 1 + int(lower%int64(digits[top]-1))
}
