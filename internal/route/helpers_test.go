package route_test

import (
	"math/big"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/delaykit/rabbitdelay/internal/laddertest"
	"github.com/delaykit/rabbitdelay/internal/route"
	"github.com/delaykit/rabbitdelay/ttlbuckets"
)

// The checks below recompute everything with an independent method (multiplication with
// math/big, instead of the package's shifts), so tests and fuzz targets compare two
// implementations. The arithmetic itself (Levels, Plan) is checked in package ttlbuckets.

var radixes = laddertest.Radixes

var orders = laddertest.Orders

var modes = laddertest.Modes

var unwrapAll = laddertest.UnwrapAll

var pow = laddertest.Pow

// checkQueues checks Queues and Next of a valid ladder against the definitions.
func checkQueues(t testing.TB, l ttlbuckets.Ladder) {
	t.Helper()
	lw := l.WithDefaults()
	r, u := lw.Radix, lw.Unit
	levels := l.Levels()
	qs := route.Queues(l)
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
		next, ok := route.Next(l, level)
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

// checkRoute plans d on l and checks the plan against the queues and their hand-on: every hop
// is one of Queues, and routing the message as the broker would (from Entry, park in the
// digit's queue or pass through, then go to Next) takes exactly the plan's hops. Then it
// encodes and decodes the digit headers.
func checkRoute(t testing.TB, l ttlbuckets.Ladder, d time.Duration, mode ttlbuckets.Rounding) {
	t.Helper()
	lw := l.WithDefaults()
	if l.Validate() != nil {
		if route.Queues(l) != nil {
			t.Fatalf("%+v invalid, yet Queues answers", lw)
		}
		return
	}
	p, err := l.Plan(d, mode)
	if err != nil || d <= 0 {
		return // the arithmetic's errors and the plan without hops: checked in package ttlbuckets
	}
	levels := l.Levels()
	queues := map[[2]int]int64{}
	for _, q := range route.Queues(l) {
		queues[[2]int{q.Level, q.Digit}] = q.TTL
	}
	// A top-split plan of several digits whose highest, at level top, is 2 or more takes that
	// digit less u first and u last.
	nonZero, top := 0, -1
	for level, v := range p.Digits {
		if v != 0 {
			nonZero, top = nonZero+1, level
		}
	}
	split := lw.Order == ttlbuckets.TopSplit && nonZero > 1 && p.Digits[top] > 1
	// A top-first plan of several digits, and a top-split one whose highest digit is 1, take
	// the top digit first through its first-hop queue and end at the level below it.
	topFirst := (lw.Order == ttlbuckets.TopFirst || lw.Order == ttlbuckets.TopSplit && !split) && nonZero > 1
	u := 0
	if split {
		u = splitLast(p.Digits, lw.Radix, top)
	}
	digit := func(level int, first bool) int {
		switch {
		case split && level == top && first:
			return p.Digits[level] - u
		case split && level == top:
			return u
		}
		return p.Digits[level]
	}
	for i, h := range p.Hops {
		if ttl, ok := queues[[2]int{h.Level, h.Digit}]; !ok || ttl != h.TTL || digit(h.Level, i == 0) != h.Digit {
			t.Fatalf("%+v Plan(%v): hop %+v is no queue of Queues()", lw, d, h)
		}
	}
	// Route the message as the broker would: from Entry, park in the digit's queue or pass
	// through, then go to Next until the dispatch exchange.
	var path []ttlbuckets.Hop
	level := p.Entry
	if topFirst || split {
		// The first-hop queue of the top digit dead-letters into level 0.
		v := digit(level, true)
		path = append(path, ttlbuckets.Hop{Level: level, Digit: v, TTL: queues[[2]int{level, v}]})
		level = 0
	}
	for steps := 0; ; steps++ {
		if topFirst && level == p.Entry {
			break // the last hop (the one below Entry) left for the dispatch exchange
		}
		if steps >= levels {
			t.Fatalf("%+v Plan(%v): route from Entry %d does not end", lw, d, p.Entry)
		}
		if v := digit(level, false); v != 0 {
			path = append(path, ttlbuckets.Hop{Level: level, Digit: v, TTL: queues[[2]int{level, v}]})
		}
		next, ok := route.Next(l, level)
		if !ok {
			break
		}
		level = next
	}
	if !slices.Equal(path, p.Hops) {
		t.Fatalf("%+v Plan(%v): broker route %+v, plan hops %+v", lw, d, path, p.Hops)
	}
	checkHeaders(t, l, p)
}

// checkHeaders encodes p's digits and decodes them back.
func checkHeaders(t testing.TB, l ttlbuckets.Ladder, p ttlbuckets.Plan) {
	t.Helper()
	h := map[string]any{"keep": "me"}
	route.EncodeDigits(l, p, h)
	if len(h) != l.Levels()+1 {
		t.Fatalf("EncodeDigits set %d headers, want %d", len(h)-1, l.Levels())
	}
	for k, v := range h {
		if k == "keep" {
			continue
		}
		if strings.HasPrefix(k, "x-") || !route.IsDelayHeader(k) {
			t.Fatalf("header %q: starts with x- or is no delay header", k)
		}
		if _, ok := v.(int64); !ok {
			t.Fatalf("header %q = %T, want int64", k, v)
		}
	}
	got, err := route.DecodeDigits(l, h)
	if err != nil || !slices.Equal(got, p.Digits) {
		t.Fatalf("DecodeDigits = %v, %v; want %v", got, err, p.Digits)
	}
}

// splitLast is the units of level top (digit digits[top] >= 2) that a top-split route takes
// last: 1 + (the value of the lower digits) mod (digits[top] - 1); the rest it takes first.
func splitLast(digits []int, radix, top int) int {
	var lower int64
	for level := top - 1; level >= 0; level-- {
		lower = lower*int64(radix) + int64(digits[level])
	}
	return 1 + int(lower%int64(digits[top]-1))
}
