package delayspec

import (
	"math"
	"regexp"
	"strconv"
	"strings"
)

// The naming rule of the delay queues and the ladder's exchanges, written once: each form is
// what follows "<prefix>.". [Names] formats, [IsDelayQueueName] parses and
// [Names.DelayQueuesPattern] matches names with them, so the three cannot disagree.

type fieldKind uint8

const (
	noField   fieldKind = iota // the literal alone
	twoDigits                  // a number written with at least two decimal digits (00, 01, ...); parsed and matched as exactly two
	digits                     // a number written in decimal, one digit or more
)

// part is literal text and a field; an optional part is written only when its value is not 0
// (without a field: 1, present).
type part struct {
	lit   string
	field fieldKind
	opt   bool
}

// form is a name's parts in order, one value each.
type form []part

var (
	// ladderQueueForm is ladder.LL.DD[.sK][.last][.first]: level, digit, shard, last hop, first hop.
	ladderQueueForm = form{{lit: "ladder.", field: twoDigits}, {lit: ".", field: twoDigits}, {lit: ".s", field: digits, opt: true},
		{lit: ".last", opt: true}, {lit: ".first", opt: true}}
	ladderExchangeForm = form{{lit: "ladder.", field: twoDigits}, {lit: ".s", field: digits, opt: true}, {lit: ".last", opt: true}}
	bucketQueueForm    = form{{lit: "bucket.", field: digits}, {lit: "ms"}}
	parkingForm        = form{{lit: "parking"}}
	delayQueueForms    = []form{ladderQueueForm, bucketQueueForm}
)

// name formats prefix, a dot and f with vals, one per part (missing values are 0).
func (f form) name(prefix string, vals ...int64) string {
	var buf [128]byte
	b := append(buf[:0], prefix...)
	b = append(b, '.')
	for i, p := range f {
		var v int64
		if i < len(vals) {
			v = vals[i]
		}
		if p.opt && v == 0 {
			continue
		}
		b = append(b, p.lit...)
		switch p.field {
		case twoDigits:
			if v >= 0 && v < 10 {
				b = append(b, '0')
			}
			b = strconv.AppendInt(b, v, 10)
		case digits:
			b = strconv.AppendInt(b, v, 10)
		}
	}
	return string(b)
}

// parse reads s (a name without its "<prefix>.") as f and returns its values, or ok false.
func (f form) parse(s string) (vals []int64, ok bool) {
	vals = make([]int64, len(f))
	for i, p := range f {
		rest, found := strings.CutPrefix(s, p.lit)
		if !found || p.opt && p.field != noField && (rest == "" || rest[0] < '0' || rest[0] > '9') {
			if p.opt {
				continue
			}
			return nil, false
		}
		s = rest
		n := 0
		for n < len(s) && s[n] >= '0' && s[n] <= '9' {
			n++
		}
		switch p.field {
		case noField:
			vals[i] = 1
			continue
		case twoDigits:
			if n < 2 {
				return nil, false
			}
			n = 2
		case digits:
			if n == 0 {
				return nil, false
			}
		}
		v, err := strconv.ParseInt(s[:n], 10, 64)
		if err != nil {
			v = math.MaxInt64 // more digits than an int64 holds: still the shape
		}
		vals[i], s = v, s[n:]
	}
	if s != "" {
		return nil, false
	}
	return vals, true
}

// pattern is f as a regular expression (PCRE, and Go's RE2 alike), unanchored.
func (f form) pattern() string {
	var b strings.Builder
	for _, p := range f {
		if p.opt {
			b.WriteString("(?:")
		}
		b.WriteString(regexp.QuoteMeta(p.lit))
		b.WriteString([...]string{noField: "", twoDigits: "[0-9]{2}", digits: "[0-9]+"}[p.field])
		if p.opt {
			b.WriteString(")?")
		}
	}
	return b.String()
}

// IsDelayQueueName reports whether name has the shape of a delay queue (ladder, last-hop,
// first-hop or bucket queue of any shard) of any prefix's topology.
func IsDelayQueueName(name string) bool {
	for i := range len(name) {
		if name[i] != '.' {
			continue
		}
		for _, f := range delayQueueForms {
			if _, ok := f.parse(name[i+1:]); ok {
				return true
			}
		}
	}
	return false
}
