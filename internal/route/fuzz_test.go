package route_test

import (
	"encoding/binary"
	"errors"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/delaykit/rabbitdelay/internal/laddertest"
	"github.com/delaykit/rabbitdelay/internal/route"
	"github.com/delaykit/rabbitdelay/ttlbuckets"
)

// FuzzHeaders builds digit headers of any Go type and value for a valid ladder, and checks
// that DecodeDigits reads exactly the valid ones, reports every bad one, and that
// encoding what it read decodes to the same digits and matches Plan.
func FuzzHeaders(f *testing.F) {
	f.Add(uint8(3), uint32(math.MaxUint32-1), []byte{4, 0, 4, 12, 4, 5, 4, 6, 4, 2, 4, 5, 4, 0, 4, 0})
	f.Add(uint8(5), uint32(4095), []byte{0, 1, 1, 63, 2, 2, 3, 3, 15})
	f.Add(uint8(0), uint32(1000), []byte{5, 1, 6, 0, 7, 1, 8, 1, 9, 0, 10, 1, 0, 0, 0, 0, 0, 0, 0, 4, 2})
	f.Add(uint8(2), uint32(100), []byte{11, 255, 255, 255, 255, 255, 255, 255, 255, 12, 13, 14, 15})
	f.Fuzz(func(t *testing.T, radixExp uint8, maxMs uint32, data []byte) {
		l := ttlbuckets.Ladder{Radix: 1 << (1 + radixExp%6), Max: (time.Duration(maxMs) + 1) * time.Millisecond}
		if err := l.Validate(); err != nil {
			t.Fatalf("%+v: %v", l, err)
		}
		levels, maxDigit := l.Levels(), int64(l.Radix-1)
		next := func(n int) []byte { // n bytes of data, zero-padded
			b := make([]byte, n)
			copy(b, data)
			data = data[min(n, len(data)):]
			return b
		}
		h := map[string]any{}
		want := make([]int, levels)
		bad := 0
		for level := range levels + 1 { // one level more than the ladder has
			kind := next(1)[0] % 16
			var v any
			var val int64 // the value as an integer, when it is one
			isInt, exact := true, true
			small := int64(int8(next(1)[0]))
			switch kind {
			case 0:
				v, val = int(small), small
			case 1:
				v, val = int8(small), small
			case 2:
				v, val = int16(small), small
			case 3:
				v, val = int32(small), small
			case 4:
				v, val = small, small
			case 5:
				v, val = uint(uint8(small)), int64(uint8(small))
			case 6:
				v, val = uint8(small), int64(uint8(small))
			case 7:
				v, val = uint16(uint8(small)), int64(uint8(small))
			case 8:
				v, val = uint32(uint8(small)), int64(uint8(small))
			case 9:
				v, val = uint64(uint8(small)), int64(uint8(small))
			case 10:
				val = int64(binary.LittleEndian.Uint64(next(8)))
				v = val
			case 11:
				u := binary.LittleEndian.Uint64(next(8))
				v, val, exact = u, int64(u), u <= math.MaxInt64
			case 12:
				v, isInt = "1", false
			case 13:
				v, isInt = float64(small), false
			case 14:
				v, isInt = small > 0, false
			case 15: // missing
				v, isInt = nil, false
			}
			if v != nil {
				h[route.DigitHeader(level)] = v
			}
			ok := isInt && exact && val >= 0 && val <= maxDigit
			if level == levels { // extra level: harmless only when absent or an integer 0
				if v != nil && !(isInt && exact && val == 0) {
					bad++
				}
				continue
			}
			if ok {
				want[level] = int(val)
			} else {
				bad++
			}
		}
		got, err := route.DecodeDigits(l, h)
		if !slices.Equal(got, want) {
			t.Fatalf("DecodeDigits(%v) = %v, want %v (%v)", h, got, want, err)
		}
		if n := len(unwrapAll(err)); n != bad || (err != nil && !errors.Is(err, route.ErrInvalidHeaders)) {
			t.Fatalf("DecodeDigits(%v): %d problems, want %d: %v", h, n, bad, err)
		}
		if bad > 0 {
			return
		}
		// Encode what was read, as a publisher would, and read it back.
		p := ttlbuckets.Plan{Digits: got}
		checkHeaders(t, l, p)
		// The digits name a delay; if the ladder accepts it, Plan writes the same digits.
		var units int64
		for level := levels - 1; level >= 0; level-- {
			units = units*int64(l.Radix) + int64(got[level])
		}
		if d := time.Duration(units) * time.Millisecond; d > 0 && d <= l.Max {
			pl, err := l.Plan(d, ttlbuckets.Strict)
			if err != nil || !slices.Equal(pl.Digits, got) {
				t.Fatalf("Plan(%v) = %v, %v; want digits %v", d, pl.Digits, err, got)
			}
		}
	})
}

// FuzzRoute checks Queues, Next and the digit headers for any delay on any ladder, with
// FuzzPlan's inputs (package ttlbuckets): see checkQueues and checkRoute.
func FuzzRoute(f *testing.F) {
	laddertest.Seed(f)
	f.Fuzz(func(t *testing.T, unitMs uint32, radixExp uint8, maxNs int64, order uint8, d int64) {
		l := laddertest.Ladder(unitMs, radixExp, maxNs, order)
		if l.Validate() == nil {
			checkQueues(t, l)
		}
		for _, d := range laddertest.Delays(l, d) {
			for _, mode := range modes {
				checkRoute(t, l, d, mode)
			}
		}
	})
}
