//go:build integration

package integration

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/delaykit/rabbitdelay/amqpdelay"
	"github.com/delaykit/rabbitdelay/consumer"
	"github.com/delaykit/rabbitdelay/integration/brokertest"
	"github.com/delaykit/rabbitdelay/internal/delayspec"
	"github.com/delaykit/rabbitdelay/internal/route"
)

// How the Consumer gives a delivery back, against RabbitMQ 4.3's delivery counting
// (rabbitmq-server PR #15387): basic.reject with requeue counts toward a quorum queue's
// delivery limit (x-delivery-count), basic.nack with requeue does not (only x-acquired-count);
// before 4.3 both count.

// headerCount is an integer header of d (0 when absent).
func headerCount(d amqp.Delivery, name string) int64 {
	n, _, _ := route.HeaderInt(d.Headers[name])
	return n
}

// TestConsumerRetryFailingParkedByLimit: a message whose handler fails and whose retry publish
// keeps failing (the delay queues deleted) is given back after each settle timeout. On
// RabbitMQ 4.3 it was given back with basic.nack, which 4.3 does not count: it looped forever,
// never parked. Now it is given back with basic.reject, which every version counts: the quorum
// ready queue's delivery limit (3 here) dead-letters it to the parking queue (x-death reason
// delivery_limit) after 4 deliveries, on 3.10 and on 4.3 alike. It is never dropped.
func TestConsumerRetryFailingParkedByLimit(t *testing.T) {
	t.Parallel()
	const limit = 3
	f := newConsumerFixture(t, func(s *delayspec.Spec) { s.ReadyDeliveryLimit = limit })
	var calls atomic.Int32
	ok := newConsumerEffects()
	evs := newConsumerEvents()
	c := newConsumer(t, f.cfg, f.work, func(ctx context.Context, d amqp.Delivery) error {
		if d.MessageId == "warm-up" {
			ok.add(d.MessageId)
			return nil
		}
		calls.Add(1)
		return errors.New("always fails")
	}, consumer.Options{
		Backoff:       consumer.Backoff{MaxAttempts: 5, Initial: 50 * time.Millisecond, Max: 100 * time.Millisecond},
		Observer:      evs.observe,
		SettleTimeout: 300 * time.Millisecond,
	})
	stop := runConsumer(t, c)
	f.publish(t, "warm-up", 0)
	waitFor(t, time.Minute, "the warm-up message handled", func() bool { return ok.count("warm-up") == 1 })
	deleteDelayQueues(t, f)
	f.publish(t, "poison", 0) // the direct path: no delay queue on the way in
	parking := f.spec.Names().Parking()
	waitFor(t, 2*time.Minute, "the message parked by the ready queue's delivery limit", func() bool {
		return queueLen(t, f.env.Channel(t), parking) == 1
	})
	stop()
	parked := getAll(t, f.env, parking)
	if len(parked) != 1 {
		t.Fatalf("parking queue holds %d messages, want 1", len(parked))
	}
	deaths, _ := parked[0].Headers["x-death"].([]any)
	reason := ""
	if len(deaths) > 0 {
		if death, isTable := deaths[0].(amqp.Table); isTable {
			reason, _ = death["reason"].(string)
		}
	}
	if parked[0].MessageId != "poison" || reason != "delivery_limit" {
		t.Errorf("parked %q with x-death reason %q, want poison, delivery_limit", parked[0].MessageId, reason)
	}
	if n := queueLen(t, f.env.Channel(t), f.work); n != 0 {
		t.Errorf("%s holds %d messages, want 0", f.work, n)
	}
	if n := calls.Load(); n != limit+1 {
		t.Errorf("the handler ran %d times, want %d (the delivery limit %d counts each give-back)", n, limit+1, limit)
	}
	evs.mu.Lock()
	defer evs.mu.Unlock()
	requeued := 0
	for _, e := range evs.all {
		if e.Kind == consumer.Requeued {
			requeued++
			if !errors.Is(e.Err, amqpdelay.ErrUnroutable) {
				t.Errorf("Requeued event: %v, want the retry publish's ErrUnroutable", e.Err)
			}
		}
	}
	if requeued != limit+1 {
		t.Errorf("%d Requeued events, want %d", requeued, limit+1)
	}
}

// TestConsumerShutdownNotCounted: a healthy message whose handler is running when the
// Consumer shuts down (shutdown timeout 0) is given back, three times, by three Consumers;
// then a fourth handles it. On RabbitMQ 4.3 the give-backs are basic.nacks, which do not count:
// with a delivery limit of 2 the message is not parked, and it arrives with no
// x-delivery-count and an x-acquired-count of 3. Before 4.3 every return counts (RabbitMQ's
// own rule): it arrives with x-delivery-count 3 (the default limit, 20, is not reached).
func TestConsumerShutdownNotCounted(t *testing.T) {
	t.Parallel()
	env := brokertest.NewEnv(t)
	only := brokerAtLeast(t, env, 4, 3) // RabbitMQ 4.3 counts only failed returns
	limit := 2
	if !only {
		limit = 0 // the default, 20
	}
	f := newConsumerFixture(t, func(s *delayspec.Spec) { s.ReadyDeliveryLimit = limit })
	f.publish(t, "healthy", 0)
	const rounds = 3
	for i := range rounds {
		entered := make(chan struct{}, 1)
		c := newConsumer(t, f.cfg, f.work, func(ctx context.Context, d amqp.Delivery) error {
			entered <- struct{}{}
			<-ctx.Done()
			return ctx.Err()
		}, consumer.Options{ShutdownTimeout: -1, Concurrency: 1, ConnectionName: fmt.Sprintf("round-%d", i)})
		stop := runConsumer(t, c)
		select {
		case <-entered:
		case <-time.After(time.Minute):
			t.Fatalf("round %d: the handler did not start within 1 min", i)
		}
		stop()
	}
	var mu sync.Mutex
	var got []amqp.Delivery
	c := newConsumer(t, f.cfg, f.work, func(ctx context.Context, d amqp.Delivery) error {
		mu.Lock()
		got = append(got, d)
		mu.Unlock()
		return nil
	}, consumer.Options{})
	stop := runConsumer(t, c)
	waitFor(t, time.Minute, "the message handled", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(got) == 1
	})
	stop()
	if n := queueLen(t, f.env.Channel(t), f.spec.Names().Parking()); n != 0 {
		t.Errorf("parking queue holds %d messages after %d shutdowns, want 0", n, rounds)
	}
	d := got[0]
	dc, ac := headerCount(d, "x-delivery-count"), headerCount(d, "x-acquired-count")
	if only && (dc != 0 || ac != rounds) {
		t.Errorf("RabbitMQ 4.3+: delivered with x-delivery-count %d, x-acquired-count %d; want 0 (a shutdown's give-back is no failure) and %d", dc, ac, rounds)
	}
	if !only && dc != rounds {
		t.Errorf("RabbitMQ before 4.3: delivered with x-delivery-count %d, want %d (every return counts)", dc, rounds)
	}
	t.Logf("after %d shutdowns: x-delivery-count %v, x-acquired-count %v", rounds, d.Headers["x-delivery-count"], d.Headers["x-acquired-count"])
}
