//go:build integration

package integration

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/delaykit/rabbitdelay/consumer"
	"github.com/delaykit/rabbitdelay/internal/delayspec"
)

// The consumer's field faults: one delivery, or one handler result, that must not break the
// Consumer's handling of other messages, nor be handled without end.

// rawToQueue publishes msg to queue through the default exchange with a plain client (not the
// amqpdelay Publisher, which refuses what these tests need), confirmed.
func rawToQueue(t *testing.T, ch *amqp.Channel, queue string, msg amqp.Publishing) {
	t.Helper()
	if err := ch.Confirm(false); err != nil {
		t.Fatalf("confirm mode: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, "", queue, true, false, msg)
	if err != nil {
		t.Fatalf("publish to %s: %v", queue, err)
	}
	if ok, err := dc.WaitContext(ctx); err != nil || !ok {
		t.Fatalf("publish to %s: confirmed %v, %v", queue, ok, err)
	}
}

// manyHeaders is a table of n string headers.
func manyHeaders(n int) amqp.Table {
	h := make(amqp.Table, n)
	for i := range n {
		h[fmt.Sprintf("h%05d", i)] = "v"
	}
	return h
}

// nilPointerError's Error method reads its receiver: a nil *nilPointerError returned as an
// error is a non-nil error whose Error method panics.
type nilPointerError struct{ msg string }

func (e *nilPointerError) Error() string { return e.msg }

// TestConsumerHandlerErrorPanics: a handler returning a nil pointer of an error type (a
// non-nil error whose Error method panics) crashed the process from a Consumer goroutine. It
// is a failure like any other: retried, then parked with a text naming the type; the other
// messages are handled.
func TestConsumerHandlerErrorPanics(t *testing.T) {
	t.Parallel()
	f := newConsumerFixture(t)
	evs := newConsumerEvents()
	var calls atomic.Int64
	ok := newConsumerEffects()
	c := newConsumer(t, f.cfg, f.work, func(ctx context.Context, d amqp.Delivery) error {
		if d.MessageId == "typed-nil" {
			calls.Add(1)
			var e *nilPointerError
			return e
		}
		ok.add(d.MessageId)
		return nil
	}, consumer.Options{
		Backoff:  consumer.Backoff{MaxAttempts: 2, Initial: 50 * time.Millisecond, Max: 100 * time.Millisecond},
		Observer: evs.observe,
	})
	f.publish(t, "typed-nil", 10*time.Millisecond)
	for i := range 5 {
		f.publish(t, fmt.Sprintf("good-%d", i), 10*time.Millisecond)
	}
	runConsumer(t, c)
	waitFor(t, time.Minute, "the typed nil parked and the others handled", func() bool { return evs.n(consumer.Parked) == 1 && ok.distinct() == 5 })
	if calls.Load() != 2 || evs.n(consumer.Retried) != 1 {
		t.Errorf("the handler returning a typed nil ran %d times with %d retries, want 2 and 1", calls.Load(), evs.n(consumer.Retried))
	}
	parked := getAll(t, f.env, f.spec.Names().Parking())
	if len(parked) != 1 {
		t.Fatalf("parking queue holds %d messages, want 1", len(parked))
	}
	if text, _ := parked[0].Headers[consumer.HeaderError].(string); !strings.Contains(text, "*integration.nilPointerError") ||
		!strings.Contains(text, "return nil for success") {
		t.Errorf("parked with error %q, want it to name the type and the fix", text)
	}
}

// TestConsumerCopyRefused: a delivery with so many headers that no copy of it with the
// Consumer's own headers can be published (8,125 top-level headers from a plain client: readable,
// but the Publisher sends at most 8,128) and a handler that always fails. The Consumer gave it
// back to the queue after each refused retry, so the handler ran without end (hundreds of times
// on a classic queue). Now the handler runs once, and the delivery is rejected without requeue
// (Event Rejected): a quorum ready queue dead-letters it to the parking queue (x-death reason
// rejected), a classic ready queue (no dead-letter exchange) drops it. The messages beside it
// are handled.
func TestConsumerCopyRefused(t *testing.T) {
	t.Parallel()
	for _, qt := range []delayspec.QueueType{delayspec.Quorum, delayspec.Classic} {
		t.Run(string(qt), func(t *testing.T) {
			t.Parallel()
			f := newConsumerFixture(t, func(s *delayspec.Spec) { s.QueueType = qt })
			evs := newConsumerEvents()
			var calls atomic.Int64
			ok := newConsumerEffects()
			c := newConsumer(t, f.cfg, f.work, func(ctx context.Context, d amqp.Delivery) error {
				if d.MessageId == "crowded" {
					calls.Add(1)
					return errors.New("always fails")
				}
				ok.add(d.MessageId)
				return nil
			}, consumer.Options{
				Backoff:  consumer.Backoff{MaxAttempts: 3, Initial: 50 * time.Millisecond, Max: 100 * time.Millisecond},
				Observer: evs.observe,
			})
			rawToQueue(t, f.env.Channel(t), f.work, amqp.Publishing{MessageId: "crowded", Headers: manyHeaders(8125), Body: []byte("x")})
			for i := range 5 {
				f.publish(t, fmt.Sprintf("good-%d", i), 10*time.Millisecond)
			}
			stop := runConsumer(t, c)
			waitFor(t, time.Minute, "the crowded message rejected and the others handled", func() bool {
				return evs.n(consumer.Rejected) == 1 && ok.distinct() == 5
			})
			stop()
			if n := calls.Load(); n != 1 {
				t.Errorf("the handler of a message no copy of which can be published ran %d times, want 1", n)
			}
			if n := evs.n(consumer.Requeued); n != 0 {
				t.Errorf("%d requeues, want none", n)
			}
			parking := f.spec.Names().Parking()
			want := 0
			if qt == delayspec.Quorum {
				want = 1
				waitFor(t, 30*time.Second, "the rejected message in the parking queue", func() bool { return queueLen(t, f.env.Channel(t), parking) == 1 })
				d := getAll(t, f.env, parking)[0]
				deaths, _ := d.Headers["x-death"].([]any)
				reason := ""
				if len(deaths) > 0 {
					if death, isTable := deaths[0].(amqp.Table); isTable {
						reason, _ = death["reason"].(string)
					}
				}
				if d.MessageId != "crowded" || reason != "rejected" {
					t.Errorf("parking queue holds %q, x-death reason %q; want crowded, rejected", d.MessageId, reason)
				}
			}
			if n := queueLen(t, f.env.Channel(t), parking); qt == delayspec.Classic && n != want {
				t.Errorf("parking queue holds %d messages, want %d", n, want)
			}
			if n := queueLen(t, f.env.Channel(t), f.work); n != 0 {
				t.Errorf("%s holds %d messages after the Consumer stopped, want 0", f.work, n)
			}
		})
	}
}

// TestConsumerUnreadableDelivery: a message amqp091-go cannot read (8,200 top-level headers,
// from a plain client) first in a quorum ready queue, 20 messages behind it, a Consumer taking 4
// at a time. Each delivery of it closes the Consumer's connection, and every message in flight
// with it went back to the queue with it and was charged a delivery attempt, until the queue's
// delivery limit (20) dead-lettered innocent messages to the parking queue. Now, after such a
// loss, the Consumer takes one delivery at a time for a while: the 20 are handled, each once,
// none is parked, and the delivery limit parks the unreadable one. Every Disconnected event
// says what happened.
func TestConsumerUnreadableDelivery(t *testing.T) {
	t.Parallel()
	f := newConsumerFixture(t)
	evs := newConsumerEvents()
	ok := newConsumerEffects()
	var mu sync.Mutex
	var lost []string
	c := newConsumer(t, f.cfg, f.work, func(ctx context.Context, d amqp.Delivery) error {
		ok.add(d.MessageId)
		return nil
	}, consumer.Options{Concurrency: 4, ReconnectMin: 10 * time.Millisecond, ReconnectMax: 100 * time.Millisecond,
		Observer: func(e consumer.Event) {
			evs.observe(e)
			if e.Kind == consumer.Disconnected {
				mu.Lock()
				lost = append(lost, e.Err.Error())
				mu.Unlock()
			}
		}})
	ch := f.env.Channel(t)
	rawToQueue(t, ch, f.work, amqp.Publishing{MessageId: "unreadable", Headers: manyHeaders(8200), Body: []byte("x")})
	for i := range 20 {
		rawToQueue(t, ch, f.work, amqp.Publishing{MessageId: fmt.Sprintf("good-%d", i), Body: []byte("x")})
	}
	stop := runConsumer(t, c)
	parking := f.spec.Names().Parking()
	waitFor(t, 3*time.Minute, "the 20 handled and the unreadable one parked by the delivery limit", func() bool {
		return ok.distinct() == 20 && queueLen(t, f.env.Channel(t), parking) == 1
	})
	stop()
	if twice := ok.twice(); len(twice) > 0 {
		t.Errorf("handled more than once: %v", twice)
	}
	if n := queueLen(t, f.env.Channel(t), parking); n != 1 {
		t.Errorf("parking queue holds %d messages, want only the unreadable one", n)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(lost) == 0 {
		t.Fatal("no Disconnected event: the unreadable message did not reach the Consumer")
	}
	for _, text := range lost {
		if !strings.Contains(text, "could not read a delivery") || !strings.Contains(text, "Reject requeue false") {
			t.Errorf("Disconnected event %q does not say what happened and what to do", text)
			break
		}
	}
	t.Logf("%d connections lost to the unreadable message", len(lost))
}

// TestReplayUnreadableParked: a parked message amqp091-go cannot read, first in the parking
// queue: Replay cannot move past it (the client closes the connection on it), and says so and
// how to take it out, instead of a bare frame error.
func TestReplayUnreadableParked(t *testing.T) {
	t.Parallel()
	f := newConsumerFixture(t)
	parking := f.spec.Names().Parking()
	rawToQueue(t, f.env.Channel(t), parking, amqp.Publishing{MessageId: "unreadable", Headers: manyHeaders(8200), Body: []byte("x")})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	moved, err := consumer.Replay(ctx, f.cfg, f.work, 0)
	if err == nil || moved != 0 || !strings.Contains(err.Error(), "cannot be read") || !strings.Contains(err.Error(), "Reject requeue false") ||
		!strings.Contains(err.Error(), parking) {
		t.Errorf("Replay with an unreadable parked message = %d, %v; want 0 and an error naming %s and the fix", moved, err, parking)
	}
	// The message is back in the queue once the broker has closed Replay's connection, which
	// it does after Replay returned: wait for it, as a busy broker may take a moment.
	ch := f.env.Channel(t)
	waitFor(t, 30*time.Second, "the unreadable message back in the parking queue", func() bool { return queueLen(t, ch, parking) == 1 })
}

// TestConsumerRescheduleAfterHandled: a message handled, then rescheduled under the same id,
// is handled again, once, at its new time (its store id carries the new copy's tag); a plain
// resend of the same id before it (Publish, no Reschedule) is a duplicate and skipped.
func TestConsumerRescheduleAfterHandled(t *testing.T) {
	t.Parallel()
	f := newRevokeFixture(t)
	evs := newConsumerEvents()
	var mu sync.Mutex
	var ids []string // Info.ID of each handler call
	c := newConsumer(t, f.cfg, f.queue, func(ctx context.Context, d amqp.Delivery) error {
		in, _ := consumer.InfoFrom(ctx)
		mu.Lock()
		ids = append(ids, in.ID)
		mu.Unlock()
		return nil
	}, consumer.Options{Observer: evs.observe, Store: &consumer.MemoryStore{}})
	runConsumer(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	msg := amqp.Publishing{MessageId: "reminder-42", Body: []byte("remind")}
	if _, err := f.pub.Publish(ctx, f.target, "k", msg, 100*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	waitFor(t, time.Minute, "the first copy handled", func() bool { return evs.n(consumer.Handled) == 1 })
	if _, err := f.pub.Publish(ctx, f.target, "k", msg, 100*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	waitFor(t, time.Minute, "the plain resend skipped", func() bool { return evs.n(consumer.Skipped) == 1 })
	r, err := f.pub.Reschedule(ctx, f.target, "k", msg, 500*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, time.Minute, "the rescheduled copy handled", func() bool { return evs.n(consumer.Handled) == 2 })
	time.Sleep(time.Second) // nothing more arrives
	mu.Lock()
	defer mu.Unlock()
	if len(ids) != 2 || ids[0] != "reminder-42" || !strings.HasPrefix(ids[1], "reminder-42@r") || time.Now().Before(r.Due) {
		t.Errorf("handler calls with ids %q; want reminder-42, then reminder-42@r<tag> (the rescheduled copy), nothing more", ids)
	}
}
