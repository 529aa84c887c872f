package amqpdelay

import (
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"unicode/utf8"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/delaykit/rabbitdelay/internal/delayspec"
)

// maxShortstr is the longest AMQP 0-9-1 short string, in bytes (not runes): an exchange
// name, a routing key, a table (header) key and the string properties of a message (Type,
// MessageId, CorrelationId, ReplyTo, AppId, UserId, ContentType, ContentEncoding, Expiration)
// are short strings, a length octet and at most 255 bytes (AMQP 0-9-1 specification, 4.2.5.3
// "shortstr"). amqp091-go refuses to encode a longer one and closes the whole connection
// (501 FRAME_ERROR), so Publish refuses it first.
const maxShortstr = 255

// maxExpirationMs is the largest per-message TTL (the expiration property) RabbitMQ takes:
// 10 years in milliseconds (rabbit_misc:check_expiry, 3.10 and 4.0); a larger one closes the
// channel with 406 PRECONDITION_FAILED "invalid expiration ... value_too_large".
const maxExpirationMs = 315_360_000_000

// maxFieldDepth and maxContainerElements are what amqp091-go reads (read.go, v1.16.0): tables
// and arrays nested at most 32 deep below the headers table, and at most 8,192 entries in any
// one table or array. RabbitMQ takes and confirms a message beyond them, but every amqp091-go
// consumer it is delivered to loses its connection on it (501 FRAME_ERROR from the client), and
// so does the Publisher's own connection when the broker returns it; Publish refuses it first.
const (
	maxFieldDepth        = 32
	maxContainerElements = 8192
)

// headerRoom is how many of the headers table's maxContainerElements entries a message must
// leave free: the Publisher adds its own (target, due time, copy tag, a ladder digit header per
// level: at most 40 with a radix-2 ladder), and each dead-lettering adds RabbitMQ's (x-death,
// x-first-death-* and x-last-death-*, 7 in all).
const headerRoom = 64

// validateMessage checks what amqp091 would fail to encode or silently change, or the broker
// would answer by closing the connection or channel, before anything is sent: msg.Expiration
// that is not digits and msg.DeliveryMode above 2 (RabbitMQ 3.10 closes the channel with
// 406), Go int header values outside 32 bits (amqp091 writes an int as a 32-bit field,
// truncating it), the byte length of every short string (exchange, routing key, the string
// properties, header keys at any depth), the float header values NaN and ±Inf (RabbitMQ 3.10
// closes the connection with 541 INTERNAL_ERROR), and header tables and arrays that
// amqp091-go cannot read back (maxFieldDepth, maxContainerElements, headerRoom). The value
// types must already have passed amqp.Table.Validate. It returns nil or an error wrapping
// ErrInvalidInput that lists every problem.
func validateMessage(exchange, routingKey string, msg *amqp.Publishing) error {
	var problems []string
	short := func(field, s string) {
		if len(s) > maxShortstr {
			problems = append(problems, fmt.Sprintf("%s %s is %d bytes long, more than the AMQP short-string limit of %d bytes: shorten it",
				field, preview(s), len(s), maxShortstr))
		}
	}
	// Stays: a short string over 255 bytes makes amqp091 close the whole connection.
	short("exchange", exchange)
	// Stays: a name that is not UTF-8 closes the whole connection; one with CR or LF is
	// declared without them and published to with them on 3.10.
	if problem := delayspec.NameProblem(exchange); problem != "" {
		problems = append(problems, fmt.Sprintf("exchange %s %s: correct the name (RabbitMQ would close the connection, "+
			"or declare the name one way and publish to it another)", preview(exchange), problem))
	}
	short("routing key", routingKey)
	short("msg.ContentType", msg.ContentType)
	short("msg.ContentEncoding", msg.ContentEncoding)
	short("msg.CorrelationId", msg.CorrelationId)
	short("msg.ReplyTo", msg.ReplyTo)
	short("msg.Expiration", msg.Expiration)
	short("msg.MessageId", msg.MessageId)
	short("msg.Type", msg.Type)
	short("msg.UserId", msg.UserId)
	short("msg.AppId", msg.AppId)
	// Stay: the broker's 406 for these (channel closed) names neither the field nor the limit.
	if e := msg.Expiration; e != "" && strings.Trim(e, "0123456789") != "" {
		problems = append(problems, fmt.Sprintf("msg.Expiration %s is not a whole number of milliseconds: RabbitMQ closes the channel "+
			"(406 PRECONDITION_FAILED, failing every publish in flight on it); write it as digits, e.g. \"60000\"", preview(e)))
	}
	if e := msg.Expiration; e != "" && strings.Trim(e, "0123456789") == "" {
		if v, err := strconv.ParseUint(e, 10, 64); err != nil || v > maxExpirationMs {
			problems = append(problems, fmt.Sprintf("msg.Expiration %s is above RabbitMQ's maximum of %d ms (10 years): RabbitMQ closes "+
				"the channel (406 PRECONDITION_FAILED value_too_large); use at most %d", preview(e), maxExpirationMs, maxExpirationMs))
		}
	}
	for _, h := range []string{"CC", "BCC"} {
		if v, ok := msg.Headers[h]; ok {
			if _, isArray := v.([]any); !isArray {
				problems = append(problems, fmt.Sprintf("msg.Headers[%q] is a %T: RabbitMQ takes the %s header only as an array of "+
					"strings (routing keys) and closes the channel otherwise (406 invalid message); send []any{\"key\", ...}", h, v, h))
			}
		}
	}
	if msg.DeliveryMode > amqp.Persistent {
		problems = append(problems, fmt.Sprintf("msg.DeliveryMode %d: want 0 (the Publisher's default, persistent), 1 (amqp.Transient) "+
			"or 2 (amqp.Persistent); RabbitMQ closes the channel on any other value", msg.DeliveryMode))
	}
	// Stay: RabbitMQ confirms these, and no amqp091-go consumer could read them.
	if n := len(msg.Headers); n > maxContainerElements-headerRoom {
		problems = append(problems, fmt.Sprintf("msg.Headers has %d entries, more than the %d a message may carry: amqp091-go reads at "+
			"most %d per table, and the Publisher and RabbitMQ add up to %d of their own (consumers would lose their connection on it); "+
			"send fewer headers, or the values in the body", n, maxContainerElements-headerRoom, maxContainerElements, headerRoom))
	}
	if len(msg.Headers) > 0 {
		problems = append(problems, tableProblems("msg.Headers", msg.Headers, 0)...)
	}
	if len(problems) == 0 {
		return nil
	}
	return fmt.Errorf("%w: %s", ErrInvalidInput, strings.Join(problems, "; "))
}

// tableProblems walks t (and the tables and arrays inside it) in key order and describes
// every key longer than maxShortstr, every NaN or infinite float, every table or array nested
// deeper than maxFieldDepth below the headers table (t is at depth; the headers table at 0)
// and every one below it with more than maxContainerElements entries.
func tableProblems(path string, t amqp.Table, depth int) []string {
	keys := make([]string, 0, len(t))
	for k := range t {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var out []string
	for _, k := range keys {
		if len(k) > maxShortstr {
			out = append(out, fmt.Sprintf("%s key %s is %d bytes long, more than the AMQP short-string limit of %d bytes for a table key: shorten it",
				path, preview(k), len(k), maxShortstr))
			// Go on into the value: name it by the shortened key.
		}
		out = append(out, valueProblems(path+"["+preview(k)+"]", t[k], depth)...)
	}
	return out
}

// valueProblems describes what is wrong with v, a value inside a table or array at depth.
func valueProblems(path string, v any, depth int) []string {
	switch v := v.(type) {
	case float64:
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return []string{floatProblem(path, v)}
		}
	case float32:
		if f := float64(v); math.IsNaN(f) || math.IsInf(f, 0) {
			return []string{floatProblem(path, f)}
		}
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

// containerProblem describes a table or array of n entries at depth (1: a value of the
// headers table) that amqp091-go cannot read, or returns "".
func containerProblem(path, kind string, n, depth int) string {
	switch {
	case depth > maxFieldDepth:
		return fmt.Sprintf("%s is a %s nested %d deep, deeper than the %d levels amqp091-go reads: RabbitMQ would take it, and "+
			"every amqp091-go consumer it reaches would lose its connection; flatten the headers, or send the structure in the body",
			path, kind, depth, maxFieldDepth)
	case n > maxContainerElements:
		return fmt.Sprintf("%s is a %s of %d entries, more than the %d amqp091-go reads in one table or array: RabbitMQ would take "+
			"it, and every amqp091-go consumer it reaches would lose its connection; send fewer, or the values in the body",
			path, kind, n, maxContainerElements)
	}
	return ""
}

func floatProblem(path string, f float64) string {
	return fmt.Sprintf("%s is %v: RabbitMQ closes the whole connection (541 INTERNAL_ERROR) on a NaN or infinite float; "+
		"send a finite number, or the value as a string", path, f)
}

// preview quotes s, cut to its first 40 bytes when longer (a 300-byte key in full would
// bury the message).
func preview(s string) string {
	if len(s) <= 40 {
		return strconv.Quote(s)
	}
	cut := 40
	for cut > 0 && !utf8.RuneStart(s[cut]) { // never in the middle of a character
		cut--
	}
	return strconv.Quote(s[:cut]) + "..."
}

// isIOError reports whether err, from amqp091's publish, is a failure of the connection
// itself (closed, reset, broken pipe, timed out) rather than of encoding the message. After
// an I/O error the broker has not received the whole message; after an encoding error
// amqp091 closes the connection, and sending the same message again would close the next
// one too.
func isIOError(err error) bool {
	if errors.Is(err, amqp.ErrClosed) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, io.ErrClosedPipe) || errors.Is(err, net.ErrClosed) {
		return true
	}
	var ne net.Error
	var errno syscall.Errno
	return errors.As(err, &ne) || errors.As(err, &errno)
}

// frameOverhead is what an AMQP 0-9-1 frame adds around its payload: type (1 byte), channel
// (2), payload size (4) and the frame-end octet (1). A frame, overhead included, must not
// exceed the connection's negotiated frame_max (AMQP 0-9-1 specification, 4.2.3).
const frameOverhead = 8

// contentHeaderSize returns the size in bytes of the content-header frame payload that
// amqp091 writes for m: class id, weight, body size and property flags (14 bytes), then each
// property that is set. AMQP 0-9-1 allows no continuation for it: properties and headers
// together must fit in one frame, and RabbitMQ closes the whole connection (501 FRAME_ERROR)
// when they do not.
func contentHeaderSize(m *amqp.Publishing) int {
	n := 14
	for _, s := range []string{m.ContentType, m.ContentEncoding, m.CorrelationId, m.ReplyTo, m.Expiration, m.MessageId, m.Type, m.UserId, m.AppId} {
		if s != "" {
			n += 1 + len(s)
		}
	}
	if len(m.Headers) > 0 {
		n += 4 + tableSize(m.Headers)
	}
	if m.DeliveryMode > 0 {
		n++
	}
	if m.Priority > 0 {
		n++
	}
	if !m.Timestamp.IsZero() {
		n += 8
	}
	return n
}

// tableSize is the encoded size of t's fields (without the table's own 4-byte length).
func tableSize(t amqp.Table) int {
	n := 0
	for k, v := range t {
		n += 1 + len(k) + fieldSize(v)
	}
	return n
}

// fieldSize is the encoded size of one field value, its type octet included, as amqp091
// writes it. A type amqp091 does not encode (amqp.Table.Validate refuses it first) counts 9.
func fieldSize(v any) int {
	switch v := v.(type) {
	case nil:
		return 1
	case bool, byte, int8:
		return 2
	case int16, uint16:
		return 3
	case int, int32, uint32, float32:
		return 5
	case amqp.Decimal:
		return 6
	case string:
		return 5 + len(v)
	case []byte:
		return 5 + len(v)
	case amqp.Table:
		return 5 + tableSize(v)
	case []any:
		n := 5
		for _, e := range v {
			n += fieldSize(e)
		}
		return n
	}
	return 9 // int64, float64, time.Time
}
