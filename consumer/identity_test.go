package consumer

import (
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// TestIdentify: the members of "a delivery whose identity cannot be told": no MessageId (the
// id is derived from the content, stable across what a redelivery or the Consumer's copies
// change), an id function returning "", an id longer than MaxIDLen (hashed, no two ids sharing
// a prefix collide). Contents that differ in anything a publisher set have different ids.
func TestIdentify(t *testing.T) {
	c := &Consumer{o: options{Options: Options{IDFunc: defaultID}}}
	base := amqp.Delivery{RoutingKey: "o.1", ContentType: "text/plain", Timestamp: time.Unix(1700000000, 0), Priority: 3,
		Headers: amqp.Table{"tenant": "a", "n": int32(7), "nested": amqp.Table{"k": []any{int64(1), "x"}}}, Body: []byte("hello")}
	id, why := c.identify(base)
	if why != DerivedMissing || !strings.HasPrefix(id, ContentIDPrefix) || len(id) > MaxIDLen {
		t.Fatalf("identify(no MessageId) = %q, %q", id, why)
	}
	same := func(name string, change func(d *amqp.Delivery)) {
		d := base
		d.Headers = amqp.Table{}
		for k, v := range base.Headers {
			d.Headers[k] = v
		}
		change(&d)
		if got, _ := c.identify(d); got != id {
			t.Errorf("%s: id %s, want the same %s", name, got, id)
		}
	}
	differs := func(name string, change func(d *amqp.Delivery)) {
		d := base
		d.Headers = amqp.Table{}
		for k, v := range base.Headers {
			d.Headers[k] = v
		}
		change(&d)
		if got, _ := c.identify(d); got == id {
			t.Errorf("%s: the same id as the original", name)
		}
	}
	same("a redelivery on RabbitMQ 4.3 (flag, x-delivery-count, x-acquired-count, tag)", func(d *amqp.Delivery) {
		d.Redelivered, d.DeliveryTag = true, 42
		d.Headers["x-delivery-count"], d.Headers["x-acquired-count"] = int64(1), int64(2)
	})
	same("a dead-lettered copy (x-death, exchange)", func(d *amqp.Delivery) {
		d.Headers["x-death"] = []any{amqp.Table{"reason": "expired"}}
		d.Exchange = "rabbitdelay.dispatch"
	})
	same("the Consumer's copy (routing key kept in its header, its own headers, delay headers, dropped properties)", func(d *amqp.Delivery) {
		d.RoutingKey = "work"
		d.Headers[HeaderRoutingKey], d.Headers[HeaderAttempt], d.Headers["rabbitdelay-due"] = "o.1", int64(2), int64(5)
		d.DeliveryMode, d.Expiration, d.UserId = 2, "", ""
	})
	same("headers in another map order", func(d *amqp.Delivery) {
		d.Headers = amqp.Table{"nested": amqp.Table{"k": []any{int64(1), "x"}}, "n": int32(7), "tenant": "a"}
	})
	differs("another body", func(d *amqp.Delivery) { d.Body = []byte("hello!") })
	differs("another routing key", func(d *amqp.Delivery) { d.RoutingKey = "o.2" })
	differs("another application header value", func(d *amqp.Delivery) { d.Headers["tenant"] = "b" })
	differs("another header type (int64 7)", func(d *amqp.Delivery) { d.Headers["n"] = int64(7) })
	differs("a header string instead of bytes", func(d *amqp.Delivery) { d.Headers["tenant"] = []byte("a") })
	differs("another timestamp", func(d *amqp.Delivery) { d.Timestamp = d.Timestamp.Add(time.Second) })
	differs("another correlation id", func(d *amqp.Delivery) { d.CorrelationId = "c" })
	differs("a body split differently from a header (no ambiguity)", func(d *amqp.Delivery) {
		d.Headers["tenant"], d.Body = "ahello", nil
	})

	withID := base
	withID.MessageId = "order-1"
	if id, why := c.identify(withID); id != "order-1" || why != "" {
		t.Errorf("identify(MessageId order-1) = %q, %q", id, why)
	}

	// An id function returning "" or an id longer than MaxIDLen.
	long := strings.Repeat("k", MaxIDLen)
	for _, tc := range []struct {
		idf  func(amqp.Delivery) string
		want string
	}{
		{func(amqp.Delivery) string { return "" }, DerivedMissing},
		{func(amqp.Delivery) string { return long + "1" }, DerivedTooLong},
	} {
		c := &Consumer{o: options{Options: Options{IDFunc: defaultID}}}
		c.o.IDFunc = tc.idf
		id, why := c.identify(withID)
		if why != tc.want || len(id) > MaxIDLen {
			t.Errorf("identify = %q, %q; want reason %s and at most %d bytes", id, why, tc.want, MaxIDLen)
		}
	}
	c2 := &Consumer{o: options{Options: Options{IDFunc: defaultID}}}
	c2.o.IDFunc = func(d amqp.Delivery) string { return long + d.MessageId }
	a, _ := c2.identify(amqp.Delivery{MessageId: "1"})
	b, _ := c2.identify(amqp.Delivery{MessageId: "2"})
	a2, _ := c2.identify(amqp.Delivery{MessageId: "1"})
	if a == b || a != a2 || !strings.HasPrefix(a, HashedIDPrefix) {
		t.Errorf("long ids sharing a prefix: %s, %s (again %s); want distinct, stable hashes", a, b, a2)
	}
	if id, why := c2.identify(amqp.Delivery{}); why != "" || id != long {
		t.Errorf("an id of exactly MaxIDLen bytes: %q, %q; want it as it is", id, why)
	}
}
