package ttlbuckets_test

import (
	"errors"
	"math/big"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/delaykit/rabbitdelay/ttlbuckets"
)

// The checks below recompute everything with an independent method (division and
// multiplication with math/big, instead of the package's shifts and masks), so tests and
// fuzz targets compare two implementations.

var radixes = []int{2, 4, 8, 16, 32, 64}

var orders = []ttlbuckets.Order{ttlbuckets.ShortestFirst, ttlbuckets.LongestFirst, ttlbuckets.TopFirst}

// unwrapAll returns the errors joined in err (or err itself).
func unwrapAll(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	if err == nil {
		return nil
	}
	return []error{err}
}

// pow returns r^n as a big.Int.
func pow(r, n int) *big.Int {
	return new(big.Int).Exp(big.NewInt(int64(r)), big.NewInt(int64(n)), nil)
}

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

// checkLadder checks Levels, Queues and Next of a valid ladder against the definitions.
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
	qs := l.Queues()
	if len(qs) != levels*(r-1) {
		t.Fatalf("%+v: %d queues, want %d", lw, len(qs), levels*(r-1))
	}
	i := 0
	for level := range levels {
		for digit := 1; digit < r; digit++ {
			want := new(big.Int).Mul(big.NewInt(int64(digit)), pow(r, level))
			want.Mul(want, big.NewInt(int64(u/time.Millisecond)))
			q := qs[i]
			if q.Level != level || q.Digit != digit || !want.IsInt64() || q.TTL != want.Int64() {
				t.Fatalf("%+v: queue %d = %+v, want level %d digit %d TTL %v", lw, i, q, level, digit, want)
			}
			if q.TTL > ttlbuckets.MaxQueueTTL {
				t.Fatalf("%+v: queue %+v above MaxQueueTTL", lw, q)
			}
			i++
		}
	}
	for level := -1; level <= levels; level++ {
		next, ok := l.Next(level)
		wantNext, wantOK := -1, false
		switch {
		case level < 0 || level >= levels:
		case lw.Order == ttlbuckets.LongestFirst && level > 0:
			wantNext, wantOK = level-1, true
		case lw.Order != ttlbuckets.LongestFirst && level < levels-1:
			wantNext, wantOK = level+1, true
		}
		if next != wantNext || ok != wantOK {
			t.Fatalf("%+v: Next(%d) = %d, %v; want %d, %v", lw, level, next, ok, wantNext, wantOK)
		}
	}
}

// checkPlan checks the result of l.Plan(d, mode) against the definitions.
func checkPlan(t testing.TB, l ttlbuckets.Ladder, d time.Duration, mode ttlbuckets.Rounding, p ttlbuckets.Plan, err error) {
	t.Helper()
	lw := l.WithDefaults()
	if verr := l.Validate(); verr != nil {
		if !errors.Is(err, ttlbuckets.ErrInvalidLadder) {
			t.Fatalf("%+v invalid (%v), Plan(%v) error = %v, want ErrInvalidLadder", lw, verr, d, err)
		}
		if l.Exact(d) || l.Levels() != 0 || l.Queues() != nil {
			t.Fatalf("%+v invalid, yet Exact/Levels/Queues answer", lw)
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
	nonZero := 0
	for _, v := range digits {
		if v != 0 {
			nonZero++
		}
	}
	if len(p.Hops) != nonZero || len(p.Hops) == 0 || p.Entry != p.Hops[0].Level {
		t.Fatalf("%+v Plan(%v): %d hops for %d non-zero digits, Entry %d", lw, d, len(p.Hops), nonZero, p.Entry)
	}
	queues := map[[2]int]int64{}
	for _, q := range l.Queues() {
		queues[[2]int{q.Level, q.Digit}] = q.TTL
	}
	var sum int64
	for i, h := range p.Hops {
		if ttl, ok := queues[[2]int{h.Level, h.Digit}]; !ok || ttl != h.TTL || p.Digits[h.Level] != h.Digit {
			t.Fatalf("%+v Plan(%v): hop %+v is no queue of Queues()", lw, d, h)
		}
		if i > 0 {
			prev := p.Hops[i-1].Level
			ascending := lw.Order == ttlbuckets.ShortestFirst || (lw.Order == ttlbuckets.TopFirst && i > 1)
			if (ascending && h.Level <= prev) || (lw.Order == ttlbuckets.LongestFirst && h.Level >= prev) ||
				(lw.Order == ttlbuckets.TopFirst && i == 1 && h.Level >= prev) {
				t.Fatalf("%+v Plan(%v): hops %+v out of %v order", lw, d, p.Hops, lw.Order)
			}
			if lw.Order == ttlbuckets.TopFirst && h.Level >= p.Hops[0].Level {
				t.Fatalf("%+v Plan(%v): hops %+v: top-first takes the highest level first", lw, d, p.Hops)
			}
		}
		sum += h.TTL
	}
	if time.Duration(sum)*time.Millisecond != p.Effective {
		t.Fatalf("%+v Plan(%v): hop TTLs sum to %d ms, Effective %v", lw, d, sum, p.Effective)
	}
	// Route the message as the broker would: from Entry, park in the digit's queue or pass
	// through, then go to Next until the dispatch exchange.
	var route []ttlbuckets.Hop
	level := p.Entry
	if lw.Order == ttlbuckets.TopFirst && len(p.Hops) > 1 {
		// The first-hop queue of the top digit dead-letters into level 0.
		route = append(route, ttlbuckets.Hop{Level: level, Digit: p.Digits[level], TTL: queues[[2]int{level, p.Digits[level]}]})
		level = 0
	}
	for steps := 0; ; steps++ {
		if lw.Order == ttlbuckets.TopFirst && len(p.Hops) > 1 && level == p.Entry {
			break // the last hop (the one below Entry) left for the dispatch exchange
		}
		if steps >= levels {
			t.Fatalf("%+v Plan(%v): route from Entry %d does not end", lw, d, p.Entry)
		}
		if v := p.Digits[level]; v != 0 {
			route = append(route, ttlbuckets.Hop{Level: level, Digit: v, TTL: queues[[2]int{level, v}]})
		}
		next, ok := l.Next(level)
		if !ok {
			break
		}
		level = next
	}
	if !slices.Equal(route, p.Hops) {
		t.Fatalf("%+v Plan(%v): broker route %+v, plan hops %+v", lw, d, route, p.Hops)
	}
	checkHeaders(t, l, p)
}

// checkHeaders encodes p's digits and decodes them back.
func checkHeaders(t testing.TB, l ttlbuckets.Ladder, p ttlbuckets.Plan) {
	t.Helper()
	h := map[string]any{"keep": "me"}
	l.EncodeDigits(p, h)
	if len(h) != l.Levels()+1 {
		t.Fatalf("EncodeDigits set %d headers, want %d", len(h)-1, l.Levels())
	}
	for k, v := range h {
		if k == "keep" {
			continue
		}
		if strings.HasPrefix(k, "x-") || !ttlbuckets.IsDelayHeader(k) {
			t.Fatalf("header %q: starts with x- or is no delay header", k)
		}
		if _, ok := v.(int64); !ok {
			t.Fatalf("header %q = %T, want int64", k, v)
		}
	}
	got, err := l.DecodeDigits(h)
	if err != nil || !slices.Equal(got, p.Digits) {
		t.Fatalf("DecodeDigits = %v, %v; want %v", got, err, p.Digits)
	}
}
