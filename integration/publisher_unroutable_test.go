//go:build integration

package integration

import (
	"testing"
	"time"

	"github.com/delaykit/rabbitdelay/amqpdelay"
)

// TestPublisherDueWithoutBindingWaitsForOne: a delayed message falls due while its target
// has no binding for its routing key. On quorum queues (at-least-once dead-lettering)
// RabbitMQ keeps it in the last delay queue's dead-letter state (rabbitdelay status shows it as
// messages_dlx) and publishes it again every dead_letter_worker_publisher_confirm_timeout
// (scripts/broker and the Dockerfile set 5 s; RabbitMQ's default is 3 min). Once a queue is
// bound for the key, a later retry delivers it: once, after the binding, never early.
func TestPublisherDueWithoutBindingWaitsForOne(t *testing.T) {
	t.Parallel()
	f := newDirectFixture(t)
	r, err := f.p.Publish(f.ctx, f.target, "late", textMsg("late"), 300*time.Millisecond)
	if err != nil {
		t.Fatalf("publish: %v", err)
	}
	time.Sleep(time.Until(r.Due.Add(1500 * time.Millisecond))) // due, and found unroutable
	q := f.env.Name("late")
	declareReadyQueue(t, f.env, q, f.target, "late")
	bound := time.Now()
	got := consumeQueue(t, f.env, q)
	var a arrival
	select {
	case a = <-got:
	case <-time.After(15 * time.Second): // one retry interval of 5 s, with room for a busy broker
		t.Fatalf("not delivered 15 s after the binding: does the broker set dead_letter_worker_publisher_confirm_timeout " +
			"to 5000 (scripts/broker, docker/, README)? With RabbitMQ's default it is retried only every 3 min")
	}
	if a.d.MessageId != r.MessageID {
		t.Errorf("delivered message %q, published %q", a.d.MessageId, r.MessageID)
	}
	if due, ok := deliveryDueOf(a); !ok || a.at.Before(due) || a.at.Before(bound) {
		t.Errorf("delivered at %s: due %s (header found: %v), bound at %s", a.at.Format(time.StampMilli), due.Format(time.StampMilli), ok, bound.Format(time.StampMilli))
	}
	t.Logf("delivered %v after the binding, %v after due", a.at.Sub(bound).Round(time.Millisecond), a.at.Sub(r.Due).Round(time.Millisecond))
	noDelivery(t, got, 6*time.Second) // and only once, though it was retried
}

// deliveryDueOf is the due time an arrival carries (amqpdelay.Due).
func deliveryDueOf(a arrival) (time.Time, bool) { return amqpdelay.Due(a.d) }
