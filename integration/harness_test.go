//go:build integration

package integration

import (
	"context"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/delaykit/rabbitdelay/integration/brokertest"
)

// TestHarnessRoundTrip proves the harness: a persistent message published with publisher
// confirms to a queue in the test's own vhost comes back with the same body.
func TestHarnessRoundTrip(t *testing.T) {
	t.Parallel()
	env := brokertest.NewEnv(t)
	ch := env.Channel(t)
	q := env.Name("roundtrip")
	if _, err := ch.QueueDeclare(q, true, false, false, false, amqp.Table{"x-queue-type": "quorum"}); err != nil {
		t.Fatalf("declare queue %s: %v", q, err)
	}
	if env.VHost == "/" {
		t.Cleanup(func() { _, _ = env.Channel(t).QueueDelete(q, false, false, false) })
	}
	if err := ch.Confirm(false); err != nil {
		t.Fatalf("enable publisher confirms: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	body := []byte("hello " + env.Prefix)
	dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, "", q, true, false, amqp.Publishing{
		DeliveryMode: amqp.Persistent,
		Body:         body,
	})
	if err != nil {
		t.Fatalf("publish: %v", err)
	}
	acked, err := dc.WaitContext(ctx)
	if err != nil || !acked {
		t.Fatalf("publisher confirm: acked=%v err=%v", acked, err)
	}
	deliveries, err := ch.ConsumeWithContext(ctx, q, "", false, false, false, false, nil)
	if err != nil {
		t.Fatalf("consume: %v", err)
	}
	select {
	case d := <-deliveries:
		if string(d.Body) != string(body) {
			t.Fatalf("body = %q, want %q", d.Body, body)
		}
		if d.DeliveryMode != amqp.Persistent {
			t.Errorf("delivery mode = %d, want persistent (2)", d.DeliveryMode)
		}
		if err := d.Ack(false); err != nil {
			t.Fatalf("ack: %v", err)
		}
	case <-ctx.Done():
		t.Fatal("no delivery within 10 s")
	}
}
