package amqpdelay

import (
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"syscall"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/delaykit/rabbitdelay/internal/delayspec"
	"github.com/delaykit/rabbitdelay/internal/route"
)

// maxShortstr is the longest AMQP short string in bytes (AMQP 0-9-1 specification, 4.2.5.3):
// amqp091-go closes the whole connection on a longer one.
const maxShortstr = route.MaxShortstr

// maxExpirationMs is RabbitMQ's largest per-message TTL, 10 years (rabbit_misc:check_expiry);
// a larger one closes the channel with 406.
const maxExpirationMs = 315_360_000_000

// maxContainerElements is the most entries amqp091-go reads in one table ([route.TableProblems]).
const maxContainerElements = route.MaxContainerElements

const headerRoom = 64 // header entries left free for the Publisher's and dead-lettering's own

// stringNames are the short-string properties, in the order stringProps returns them.
var stringNames = [...]string{"msg.ContentType", "msg.ContentEncoding", "msg.CorrelationId", "msg.ReplyTo", "msg.Expiration",
	"msg.MessageId", "msg.Type", "msg.UserId", "msg.AppId"}

func stringProps(m *amqp.Publishing) [9]string {
	return [9]string{m.ContentType, m.ContentEncoding, m.CorrelationId, m.ReplyTo, m.Expiration, m.MessageId, m.Type, m.UserId, m.AppId}
}

// validateMessage checks, before anything is sent, what amqp091 would fail to encode or change
// (short strings, int headers beyond 32 bits, nesting amqp091-go cannot read back) or the broker
// would answer by closing the connection or channel (NaN or ±Inf floats: 541; expiration,
// delivery mode, CC/BCC: 406). The header types must have passed amqp.Table.Validate. The error
// wraps ErrInvalidInput and lists every problem.
func validateMessage(exchange, routingKey string, msg *amqp.Publishing) error {
	var problems []string
	short := func(field, s string) {
		if len(s) > maxShortstr {
			problems = append(problems, fmt.Sprintf("%s %s is %d bytes long, more than the AMQP short-string limit of %d bytes: shorten it",
				field, preview(s), len(s), maxShortstr))
		}
	}
	short("exchange", exchange)
	// Stays: a name that is not UTF-8 closes the connection; CR or LF are dropped on declare.
	if problem := delayspec.NameProblem(exchange); problem != "" {
		problems = append(problems, fmt.Sprintf("exchange %s %s: correct the name (RabbitMQ would close the connection, "+
			"or declare the name one way and publish to it another)", preview(exchange), problem))
	}
	short("routing key", routingKey)
	for i, s := range stringProps(msg) {
		short(stringNames[i], s)
	}
	// Stay: the broker's 406 for these names neither the field nor the limit.
	if e := msg.Expiration; e != "" && strings.Trim(e, "0123456789") != "" {
		problems = append(problems, fmt.Sprintf("msg.Expiration %s is not a whole number of milliseconds: RabbitMQ closes the channel "+
			"(406 PRECONDITION_FAILED, failing every publish in flight on it); write it as digits, e.g. \"60000\"", preview(e)))
	} else if e != "" {
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
	if n := len(msg.Headers); n > maxContainerElements-headerRoom {
		problems = append(problems, fmt.Sprintf("msg.Headers has %d entries, more than the %d a message may carry: amqp091-go reads at "+
			"most %d per table, and the Publisher and RabbitMQ add up to %d of their own (consumers would lose their connection on it); "+
			"send fewer headers, or the values in the body", n, maxContainerElements-headerRoom, maxContainerElements, headerRoom))
	}
	if len(msg.Headers) > 0 {
		problems = append(problems, route.TableProblems("msg.Headers", msg.Headers)...)
	}
	if len(problems) == 0 {
		return nil
	}
	return fmt.Errorf("%w: %s", ErrInvalidInput, strings.Join(problems, "; "))
}

// preview quotes s, cut to its first 40 bytes.
func preview(s string) string { return route.Preview(s) }

// isIOError tells a connection failure from an encoding error (which would close the next one).
func isIOError(err error) bool {
	if errors.Is(err, amqp.ErrClosed) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, io.ErrClosedPipe) || errors.Is(err, net.ErrClosed) {
		return true
	}
	var ne net.Error
	var errno syscall.Errno
	return errors.As(err, &ne) || errors.As(err, &errno)
}

const frameOverhead = 8 // a frame's type, channel, size and end octet (AMQP 0-9-1, 4.2.3)

// contentHeaderSize returns the bytes of the content-header frame payload amqp091 writes for
// m, which must fit in one frame (else 501 FRAME_ERROR closes the connection).
func contentHeaderSize(m *amqp.Publishing) int {
	n := 14 // class id, weight, body size, property flags
	for _, s := range stringProps(m) {
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

// tableSize is the encoded size of t's fields, without the table's 4-byte length.
func tableSize(t amqp.Table) int {
	n := 0
	for k, v := range t {
		n += 1 + len(k) + fieldSize(v)
	}
	return n
}

// fieldSize is the encoded size of a field value with its type octet, as amqp091 writes it.
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
