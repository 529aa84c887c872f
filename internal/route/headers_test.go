package route_test

import (
	"errors"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/delaykit/rabbitdelay/internal/route"
	"github.com/delaykit/rabbitdelay/ttlbuckets"
)

func TestHeaderNames(t *testing.T) {
	if got := route.DigitHeader(3); got != "rabbitdelay-digit-3" {
		t.Errorf("DigitHeader(3) = %q", got)
	}
	if got := route.DigitHeader(70); got != "rabbitdelay-digit-70" {
		t.Errorf("DigitHeader(70) = %q", got)
	}
	names := []string{route.TargetHeader, route.DueHeader, route.BucketHeader, route.LastLevelHeader}
	for level := range 64 {
		names = append(names, route.DigitHeader(level))
	}
	for _, n := range names {
		// A headers exchange ignores binding arguments that begin with "x-".
		if strings.HasPrefix(strings.ToLower(n), "x-") || !strings.HasPrefix(n, route.HeaderPrefix) {
			t.Errorf("header %q must not begin with x- and must begin with %q", n, route.HeaderPrefix)
		}
		if !route.IsDelayHeader(n) {
			t.Errorf("IsDelayHeader(%q) = false", n)
		}
	}
}

func TestIsDelayHeader(t *testing.T) {
	for name, want := range map[string]bool{
		"rabbitdelay-target":            true,
		"rabbitdelay-digit-0":           true,
		"rabbitdelay-due":               true,
		"rabbitdelay-bucket":            true,
		"rabbitdelay-last-level":        true,
		"rabbitdelay-digit-63":          true,
		"rabbitdelay-anything":          false,
		"rabbitdelay-attempt":           false,
		"rabbitdelay-copy":              false,
		"rabbitdelay-digit":             false,
		"x-delay":                       true,
		"x-death":                       true,
		"x-first-death-exchange":        true,
		"x-first-death-queue":           true,
		"x-first-death-reason":          true,
		"x-last-death-exchange":         true,
		"x-last-death-queue":            true,
		"x-last-death-reason":           true,
		"x-delayed-type":                false,
		"x-match":                       false,
		"x-deathly":                     false,
		"x-delay-":                      false,
		"X-Delay":                       false,
		"rabbitdelay":                   false,
		"traceparent":                   false,
		"":                              false,
		"x-first-death":                 false,
		"my-rabbitdelay-digit-0":        false,
		"x-last-death-exchange-renamed": true,
	} {
		if got := route.IsDelayHeader(name); got != want {
			t.Errorf("IsDelayHeader(%q) = %v, want %v", name, got, want)
		}
	}
}

func TestEncodeDigits(t *testing.T) {
	l := ttlbuckets.Ladder{}.WithDefaults()
	p, err := l.Plan(90*time.Minute, ttlbuckets.RoundUp)
	if err != nil {
		t.Fatal(err)
	}
	h := map[string]any{"rabbitdelay-digit-2": "stale", "other": 1}
	route.EncodeDigits(l, p, h)
	want := map[string]any{"other": 1}
	for level, v := range []int64{0, 12, 5, 6, 2, 5, 0, 0} {
		want[route.DigitHeader(level)] = v
	}
	if len(h) != len(want) {
		t.Fatalf("headers = %v, want %v", h, want)
	}
	for k, v := range want {
		if h[k] != v {
			t.Errorf("header %q = %#v, want %#v", k, h[k], v)
		}
	}
	// A plan with no hops (d <= 0) writes zeros; so does a Plan whose Digits are short.
	for _, p := range []ttlbuckets.Plan{{Entry: -1}, {Digits: []int{3}}} {
		h := map[string]any{}
		route.EncodeDigits(l, p, h)
		for level := range l.Levels() {
			want := int64(0)
			if level < len(p.Digits) {
				want = int64(p.Digits[level])
			}
			if h[route.DigitHeader(level)] != want {
				t.Errorf("%+v: level %d = %#v", p, level, h[route.DigitHeader(level)])
			}
		}
	}
}

func TestDecodeDigitsIntegerTypes(t *testing.T) {
	l := ttlbuckets.Ladder{Radix: 64, Max: (64*64*64 - 1) * time.Millisecond} // 3 levels
	want := []int{63, 0, 17}
	convs := map[string]func(int) any{
		"int": func(v int) any { return v }, "int8": func(v int) any { return int8(v) },
		"int16": func(v int) any { return int16(v) }, "int32": func(v int) any { return int32(v) },
		"int64": func(v int) any { return int64(v) }, "uint": func(v int) any { return uint(v) },
		"uint8": func(v int) any { return uint8(v) }, "uint16": func(v int) any { return uint16(v) },
		"uint32": func(v int) any { return uint32(v) }, "uint64": func(v int) any { return uint64(v) },
	}
	for name, conv := range convs {
		h := map[string]any{}
		for level, v := range want {
			h[route.DigitHeader(level)] = conv(v)
		}
		got, err := route.DecodeDigits(l, h)
		if err != nil || !slices.Equal(got, want) {
			t.Errorf("%s: DecodeDigits = %v, %v; want %v", name, got, err, want)
		}
	}
}

func TestDecodeDigitsErrors(t *testing.T) {
	l := ttlbuckets.Ladder{Max: 4095 * time.Millisecond} // 3 levels, radix 16
	d0, d1, d2 := route.DigitHeader(0), route.DigitHeader(1), route.DigitHeader(2)
	for _, tc := range []struct {
		name    string
		h       map[string]any
		partial []int
		want    []string
	}{
		{"nil map", nil, []int{0, 0, 0}, []string{
			"header rabbitdelay-digit-0: missing; want an integer from 0 to 15",
			"header rabbitdelay-digit-1: missing", "header rabbitdelay-digit-2: missing"}},
		{"string", map[string]any{d0: "1", d1: int64(2), d2: int64(3)}, []int{0, 2, 3}, []string{
			`header rabbitdelay-digit-0: value 1 has type string; want an integer from 0 to 15`}},
		{"float", map[string]any{d0: int64(1), d1: 2.0, d2: int64(3)}, []int{1, 0, 3}, []string{
			`header rabbitdelay-digit-1: value 2 has type float64`}},
		{"too large", map[string]any{d0: int64(1), d1: int64(2), d2: int32(16)}, []int{1, 2, 0}, []string{
			"header rabbitdelay-digit-2: value 16 outside 0 to 15 (Radix 16)"}},
		{"negative", map[string]any{d0: int8(-1), d1: int64(2), d2: int64(3)}, []int{0, 2, 3}, []string{
			"header rabbitdelay-digit-0: value -1 outside 0 to 15"}},
		{"huge unsigned", map[string]any{d0: uint64(math.MaxUint64), d1: int64(2), d2: int64(3)}, []int{0, 2, 3}, []string{
			"header rabbitdelay-digit-0: value 18446744073709551615 outside 0 to 15"}},
		{"min int64", map[string]any{d0: int64(math.MinInt64), d1: int64(2), d2: int64(3)}, []int{0, 2, 3}, []string{
			"value -9223372036854775808 outside 0 to 15"}},
		{"extra level", map[string]any{d0: int64(1), d1: int64(2), d2: int64(3), "rabbitdelay-digit-3": int64(4), "rabbitdelay-digit-9": uint8(0)},
			[]int{1, 2, 3}, []string{"header rabbitdelay-digit-3: value 4 for a level this ladder does not have (levels 0 to 2)"}},
		{"odd digit names", map[string]any{d0: int64(1), d1: int64(2), d2: int64(3), "rabbitdelay-digit-01": int64(1), "rabbitdelay-digit-x": "?"},
			[]int{1, 2, 3}, []string{"header rabbitdelay-digit-01: value 1", "header rabbitdelay-digit-x: value ?"}},
		{"extra level huge", map[string]any{d0: int64(1), d1: int64(2), d2: int64(3), "rabbitdelay-digit-5": uint64(math.MaxUint64)},
			[]int{1, 2, 3}, []string{"header rabbitdelay-digit-5"}},
		{"many", map[string]any{d1: true}, []int{0, 0, 0}, []string{"digit-0: missing", "digit-1: value true has type bool", "digit-2: missing"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := route.DecodeDigits(l, tc.h)
			if !errors.Is(err, route.ErrInvalidHeaders) {
				t.Fatalf("DecodeDigits error = %v, want ErrInvalidHeaders", err)
			}
			if !slices.Equal(got, tc.partial) {
				t.Errorf("digits = %v, want %v", got, tc.partial)
			}
			errs := unwrapAll(err)
			if len(errs) != len(tc.want) {
				t.Fatalf("%d problems, want %d:\n%v", len(errs), len(tc.want), err)
			}
			for i, e := range errs {
				if !errors.Is(e, route.ErrInvalidHeaders) || !strings.Contains(e.Error(), tc.want[i]) {
					t.Errorf("problem %d = %q, want %q", i, e, tc.want[i])
				}
			}
		})
	}
	// Digit headers for extra levels whose value is 0 are harmless.
	got, err := route.DecodeDigits(l, map[string]any{d0: int64(1), d1: int64(2), d2: int64(3), "rabbitdelay-digit-3": int64(0), "rabbitdelay-digit-4": uint32(0)})
	if err != nil || !slices.Equal(got, []int{1, 2, 3}) {
		t.Errorf("zero extra levels: %v, %v", got, err)
	}
}

func TestHeaderInt(t *testing.T) {
	for _, tc := range []struct {
		raw         any
		v           int64
		isInt, fits bool
	}{
		{int8(-3), -3, true, true},
		{int32(7), 7, true, true},
		{int64(1) << 40, 1 << 40, true, true},
		{uint8(200), 200, true, true},
		{uint64(math.MaxInt64), math.MaxInt64, true, true},
		{uint64(math.MaxInt64) + 1, 0, true, false},
		{"1", 0, false, false},
		{1.0, 0, false, false},
		{nil, 0, false, false},
	} {
		v, isInt, fits := route.HeaderInt(tc.raw)
		if v != tc.v || isInt != tc.isInt || fits != tc.fits {
			t.Errorf("HeaderInt(%T %v) = %d, %v, %v; want %d, %v, %v", tc.raw, tc.raw, v, isInt, fits, tc.v, tc.isInt, tc.fits)
		}
	}
}

// TestEncodeRoute: the last-level header names the last hop's level, the digit headers start at
// the entry level and stop at the last hop's (in travel order), and DecodeDigits reads the same digits as from EncodeDigits; a plan
// without hops gets EncodeDigits' headers.
func TestEncodeRoute(t *testing.T) {
	for _, order := range orders {
		l := ttlbuckets.Ladder{Unit: time.Millisecond, Radix: 16, Order: order}
		for _, d := range []time.Duration{time.Millisecond, 90 * time.Second, 0x1000 * time.Millisecond, 0x10001 * time.Millisecond, 0xF000000 * time.Millisecond, time.Hour,
			0x2001 * time.Millisecond, 0xF0000001 * time.Millisecond} {
			p, err := l.Plan(d, ttlbuckets.Strict)
			if err != nil {
				t.Fatal(err)
			}
			nonZero := 0
			for _, v := range p.Digits {
				if v != 0 {
					nonZero++
				}
			}
			// The first hop through a first-hop queue (top-first of several hops; top-split that
			// takes the highest level twice, its digit less u first and u last, or, when that
			// digit is 1, the top-first route).
			split := order == ttlbuckets.TopSplit && len(p.Hops) > nonZero
			firstHop := (order == ttlbuckets.TopFirst || order == ttlbuckets.TopSplit) && len(p.Hops) > 1
			if firstHop != route.FirstHopQueue(l, p) {
				t.Errorf("%v %v: FirstHopQueue() = %v, want %v", order, d, !firstHop, firstHop)
			}
			routeDigits := slices.Clone(p.Digits) // what the headers carry after the first hop
			if split {
				routeDigits[p.Entry] = splitLast(p.Digits, 16, p.Entry)
			}
			last := p.Hops[len(p.Hops)-1].Level
			if route.LastLevel(p) != last {
				t.Errorf("%v %v: LastLevel() = %d, want %d", order, d, route.LastLevel(p), last)
			}
			h := map[string]any{}
			route.EncodeRoute(l, p, h)
			if h[route.LastLevelHeader] != int64(last) {
				t.Errorf("%v %v: last-level header %v, want int64 %d", order, d, h[route.LastLevelHeader], last)
			}
			for level := range l.Levels() {
				outside := level > last || level < p.Entry
				switch {
				case order == ttlbuckets.LongestFirst:
					outside = level < last || level > p.Entry
				case firstHop:
					// the entry (top) level, then back to level 0 and up to the last hop's
					outside = level > last && level != p.Entry
				}
				v, has := h[route.DigitHeader(level)]
				want := int64(routeDigits[level])
				if _, more := route.Next(l, level); level == last && more {
					want = route.LastHopValue(l, routeDigits[level]) // into the last-hop queue
				}
				if has == outside || (has && v != want) {
					t.Errorf("%v %v (last level %d): level %d digit header %v (present %v)", order, d, last, level, v, has)
				}
			}
			digits, err := route.DecodeDigits(l, h)
			if err != nil || !slices.Equal(digits, routeDigits) {
				t.Errorf("%v %v: DecodeDigits = %v, %v; want %v", order, d, digits, err, routeDigits)
			}
			// Messages of earlier versions carry a 0 for every level before the entry too.
			for level := range l.Levels() {
				if (order != ttlbuckets.LongestFirst && level < p.Entry && !firstHop) ||
					(order == ttlbuckets.LongestFirst && level > p.Entry) {
					h[route.DigitHeader(level)] = int64(0)
				}
			}
			if digits, err := route.DecodeDigits(l, h); err != nil || !slices.Equal(digits, routeDigits) {
				t.Errorf("%v %v with zeros before the entry: DecodeDigits = %v, %v; want %v", order, d, digits, err, routeDigits)
			}
		}
		p, _ := l.Plan(0, ttlbuckets.Strict)
		if route.LastLevel(p) != -1 {
			t.Errorf("LastLevel of a plan without hops = %d", route.LastLevel(p))
		}
		h := map[string]any{}
		route.EncodeRoute(l, p, h)
		if _, has := h[route.LastLevelHeader]; has || len(h) != l.Levels() {
			t.Errorf("%v: EncodeRoute without hops = %v, want every level's digit 0", order, h)
		}
	}
	if got := route.LastHopValue(ttlbuckets.Ladder{}, 3); got != 19 {
		t.Errorf("LastHopValue(3) = %d, want 3 + 16", got)
	}
	// A digit left out is an error without the last-level header, and a bad last level is named.
	l := ttlbuckets.Ladder{}.WithDefaults()
	p, _ := l.Plan(90*time.Second, ttlbuckets.Strict)
	h := map[string]any{}
	route.EncodeRoute(l, p, h)
	delete(h, route.LastLevelHeader)
	if _, err := route.DecodeDigits(l, h); !errors.Is(err, route.ErrInvalidHeaders) || !strings.Contains(err.Error(), route.DigitHeader(7)) {
		t.Errorf("without the last-level header: %v", err)
	}
	// A digit header missing between the entry and the last hop is reported, in either order.
	for _, order := range []ttlbuckets.Order{ttlbuckets.ShortestFirst, ttlbuckets.LongestFirst} {
		l := ttlbuckets.Ladder{Unit: time.Millisecond, Radix: 16, Order: order}
		p, _ := l.Plan(time.Hour, ttlbuckets.Strict) // digits 0 8 e e 6 3: levels 1 to 5
		h := map[string]any{}
		route.EncodeRoute(l, p, h)
		delete(h, route.DigitHeader(3))
		if _, err := route.DecodeDigits(l, h); !errors.Is(err, route.ErrInvalidHeaders) || !strings.Contains(err.Error(), route.DigitHeader(3)) {
			t.Errorf("%v: level 3 left out between entry and last hop: %v", order, err)
		}
	}
	for _, bad := range []any{int64(8), int64(-1), "4"} {
		h[route.LastLevelHeader] = bad
		if _, err := route.DecodeDigits(l, h); err == nil || !strings.Contains(err.Error(), route.LastLevelHeader) {
			t.Errorf("last level %v: %v", bad, err)
		}
	}
}
