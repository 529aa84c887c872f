package route

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"unicode/utf8"

	amqp "github.com/rabbitmq/amqp091-go"
)

// MaxShortstr is the longest AMQP short string in bytes (AMQP 0-9-1 specification, 4.2.5.3):
// amqp091-go closes the whole connection on a longer one.
const MaxShortstr = 255

// What amqp091-go reads (read.go, v1.16.0): RabbitMQ confirms a message beyond these, and every
// amqp091-go consumer it reaches loses its connection.
const (
	MaxFieldDepth        = 32   // tables and arrays nested in a message's headers
	MaxContainerElements = 8192 // entries of one table or array
)

// TableProblems describes, in key order, what in t (a message's headers, named path in the
// texts) amqp091-go would fail to send or read back, or RabbitMQ would close the connection on:
// keys over MaxShortstr bytes, NaN or infinite floats (541 INTERNAL_ERROR), Go ints beyond 32
// bits, tables or arrays nested deeper than MaxFieldDepth or holding more than
// MaxContainerElements entries. The value types must have passed amqp.Table.Validate.
func TableProblems(path string, t amqp.Table) []string { return tableProblems(path, t, 0) }

// tableProblems is TableProblems of a table at depth (the headers table: 0).
func tableProblems(path string, t amqp.Table, depth int) []string {
	var out []string
	for _, k := range slices.Sorted(maps.Keys(t)) {
		if len(k) > MaxShortstr {
			out = append(out, fmt.Sprintf("%s key %s is %d bytes long, more than the AMQP short-string limit of %d bytes for a table key: shorten it",
				path, Preview(k), len(k), MaxShortstr))
		}
		out = append(out, valueProblems(path+"["+Preview(k)+"]", t[k], depth)...)
	}
	return out
}

func valueProblems(path string, v any, depth int) []string {
	switch v := v.(type) {
	case float64:
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return []string{fmt.Sprintf("%s is %v: RabbitMQ closes the whole connection (541 INTERNAL_ERROR) on a NaN or "+
				"infinite float; send a finite number, or the value as a string", path, v)}
		}
	case float32:
		return valueProblems(path, float64(v), depth)
	case int:
		if v > math.MaxInt32 || v < math.MinInt32 {
			return []string{fmt.Sprintf("%s is the int %d, outside the 32-bit range amqp091 sends a Go int in: it would arrive "+
				"changed; use int64", path, v)}
		}
	case amqp.Table:
		if p := containerProblem(path, "table", len(v), depth+1); p != "" {
			return []string{p}
		}
		return tableProblems(path, v, depth+1)
	case []any:
		if p := containerProblem(path, "array", len(v), depth+1); p != "" {
			return []string{p}
		}
		var out []string
		for i, e := range v {
			out = append(out, valueProblems(path+"["+strconv.Itoa(i)+"]", e, depth+1)...)
		}
		return out
	}
	return nil
}

// containerProblem describes a table or array of n entries at depth amqp091-go cannot read.
func containerProblem(path, kind string, n, depth int) string {
	switch {
	case depth > MaxFieldDepth:
		return fmt.Sprintf("%s is a %s nested %d deep, deeper than the %d levels amqp091-go reads: RabbitMQ would take it, and "+
			"every amqp091-go consumer it reaches would lose its connection; flatten the headers, or send the structure in the body",
			path, kind, depth, MaxFieldDepth)
	case n > MaxContainerElements:
		return fmt.Sprintf("%s is a %s of %d entries, more than the %d amqp091-go reads in one table or array: RabbitMQ would take "+
			"it, and every amqp091-go consumer it reaches would lose its connection; send fewer, or the values in the body",
			path, kind, n, MaxContainerElements)
	}
	return ""
}

// preview quotes s, cut to its first 40 bytes.
func Preview(s string) string {
	if len(s) <= 40 {
		return strconv.Quote(s)
	}
	cut := 40
	for cut > 0 && !utf8.RuneStart(s[cut]) { // never in the middle of a character
		cut--
	}
	return strconv.Quote(s[:cut]) + "..."
}
