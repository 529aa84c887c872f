package consumer

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"hash"
	"maps"
	"slices"
	"strings"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/delaykit/rabbitdelay/internal/route"
)

// MaxIDLen is the longest id, in bytes, the Consumer puts in a [Store]'s key: the longest
// MessageId AMQP 0-9-1 carries (a short string). A longer id from [Options.IDFunc] is replaced
// by HashedIDPrefix and its hex SHA-256.
const MaxIDLen = 255

// Prefixes of the ids the Consumer derives ([IDDerived]).
const (
	// ContentIDPrefix begins the id of a delivery without one, before the hex SHA-256 of its
	// content (see [IDDerived]).
	ContentIDPrefix = "content-sha256:"
	// HashedIDPrefix begins the id that replaces one longer than MaxIDLen.
	HashedIDPrefix = "id-sha256:"
)

// Why an id was derived: the reason label of rabbitdelay_consumer_derived_ids_total.
const (
	// DerivedMissing: the delivery has no MessageId (or the id function returned "").
	DerivedMissing = "missing"
	// DerivedTooLong: the id was longer than MaxIDLen.
	DerivedTooLong = "too-long"
)

// identify returns d's id for deduplication and, when the Consumer derived it, why.
func (c *Consumer) identify(d amqp.Delivery) (id, derived string) {
	id = c.o.IDFunc(d)
	switch {
	case id == "":
		return contentID(d), DerivedMissing
	case len(id) > MaxIDLen:
		sum := sha256.Sum256([]byte(id))
		return HashedIDPrefix + hex.EncodeToString(sum[:]), DerivedTooLong
	}
	return id, ""
}

func derivedError(why string, id string) error {
	if why == DerivedTooLong {
		return fmt.Errorf("consumer: the delivery's id is longer than %d bytes, the longest a store key holds, so it was "+
			"replaced by its SHA-256 (%s)", MaxIDLen, id)
	}
	return fmt.Errorf("consumer: the delivery has no MessageId, so its id was derived from its content (%s): messages "+
		"with the same routing key, properties, application headers and body count as one; publish with a MessageId "+
		"(the amqpdelay Publisher always sets one) to tell them apart", id)
}

// contentID is ContentIDPrefix and the SHA-256 of what every copy of a delivery has in common:
// the first routing key, the properties the copies keep, the application headers but x-*
// (RabbitMQ's, on redelivery and dead-lettering), rabbitdelay-*, CC and BCC, and the body.
func contentID(d amqp.Delivery) string {
	h := sha256.New()
	key := d.RoutingKey
	if rk, ok := d.Headers[HeaderRoutingKey].(string); ok {
		key = rk
	}
	app := maps.Clone(d.Headers)
	maps.DeleteFunc(app, func(k string, _ any) bool {
		return strings.HasPrefix(k, "x-") || strings.HasPrefix(k, route.HeaderPrefix) || k == "CC" || k == "BCC"
	})
	for _, v := range []any{key, d.ContentType, d.ContentEncoding, d.CorrelationId, d.ReplyTo, d.Type, d.AppId, d.Timestamp, d.Priority, app, d.Body} {
		hashValue(h, v)
	}
	return ContentIDPrefix + hex.EncodeToString(h.Sum(nil))
}

// hashValue writes v, any type amqp091-go decodes a field value to, to h unambiguously.
func hashValue(h hash.Hash, v any) {
	switch v := v.(type) {
	case amqp.Table:
		keys := slices.Sorted(maps.Keys(v))
		fmt.Fprintf(h, "F%d{", len(keys))
		for _, k := range keys {
			hashValue(h, k)
			hashValue(h, v[k])
		}
		fmt.Fprint(h, "}")
	case []any:
		fmt.Fprintf(h, "A%d[", len(v))
		for _, x := range v {
			hashValue(h, x)
		}
		fmt.Fprint(h, "]")
	case string:
		fmt.Fprintf(h, "S%d:", len(v))
		_, _ = h.Write([]byte(v))
	case []byte:
		fmt.Fprintf(h, "x%d:", len(v))
		_, _ = h.Write(v)
	case time.Time:
		fmt.Fprintf(h, "T%d;", v.Unix()) // AMQP timestamps are whole seconds; the zone is the reader's
	case nil:
		fmt.Fprint(h, "V;")
	default: // booleans, integers, floats, amqp.Decimal
		fmt.Fprintf(h, "%T:%v;", v, v)
	}
}
