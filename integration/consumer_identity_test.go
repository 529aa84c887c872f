//go:build integration

package integration

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/delaykit/rabbitdelay/consumer"
)

// Deliveries whose identity cannot be told, each on a real broker with the Redis store. A
// message without a MessageId (a plain client's publish) was handled again after a
// redelivery, with no error and no event.

// identityRecorder records a Consumer's handler calls (by Info.ID) and its events.
type identityRecorder struct {
	evs   *consumerEvents
	mu    sync.Mutex
	calls []consumer.Info
}

func (r *identityRecorder) handled(in consumer.Info) {
	r.mu.Lock()
	r.calls = append(r.calls, in)
	r.mu.Unlock()
}

func (r *identityRecorder) handlerCalls() []consumer.Info {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]consumer.Info(nil), r.calls...)
}

// derivedEvents returns the IDDerived events.
func (r *identityRecorder) derivedEvents() []consumer.Event {
	r.evs.mu.Lock()
	defer r.evs.mu.Unlock()
	var out []consumer.Event
	for _, e := range r.evs.all {
		if e.Kind == consumer.IDDerived {
			out = append(out, e)
		}
	}
	return out
}

// TestConsumerNoMessageIDRedelivered: a message without a MessageId is handled; its handler
// closes the Consumer's connection before returning, so the ack is lost and the broker
// delivers it again (RabbitMQ 4.3 adds x-delivery-count and x-acquired-count to the
// redelivery). The redelivery is skipped: the id derived from the content is the same. Each
// delivery reports an IDDerived event naming why, with the same content id.
func TestConsumerNoMessageIDRedelivered(t *testing.T) {
	t.Parallel()
	f := newConsumerFixture(t)
	store := redisStore(t)
	r := &identityRecorder{evs: newConsumerEvents()}
	var once sync.Once
	c := newConsumer(t, f.cfg, f.work, func(ctx context.Context, d amqp.Delivery) error {
		in, _ := consumer.InfoFrom(ctx)
		r.handled(in)
		once.Do(func() { closeConnection(t, f.env, "idless") })
		return nil
	}, consumer.Options{
		Store:          store(),
		ConnectionName: "idless",
		Observer:       r.evs.observe,
		ReconnectMin:   10 * time.Millisecond,
		ReconnectMax:   100 * time.Millisecond,
	})
	rawToQueue(t, f.env.Channel(t), f.work, amqp.Publishing{ContentType: "text/plain", Headers: amqp.Table{"tenant": "a"}, Body: []byte("no id")})
	stop := runConsumer(t, c)
	waitFor(t, time.Minute, "the redelivery skipped", func() bool { return r.evs.n(consumer.Skipped) == 1 })
	stop()
	calls := r.handlerCalls()
	if len(calls) != 1 || calls[0].IDDerived != consumer.DerivedMissing || !strings.HasPrefix(calls[0].ID, consumer.ContentIDPrefix) {
		t.Fatalf("handler calls %+v; want one, with a derived content id", calls)
	}
	if n := r.evs.n(consumer.Unsettled); n != 1 {
		t.Errorf("%d Unsettled events, want 1 (the ack lost with the connection)", n)
	}
	derived := r.derivedEvents()
	if len(derived) != 2 {
		t.Fatalf("%d IDDerived events, want 2 (the delivery and its redelivery)", len(derived))
	}
	for _, e := range derived {
		if e.Info.ID != calls[0].ID || e.Info.IDDerived != consumer.DerivedMissing || e.Err == nil ||
			!strings.Contains(e.Err.Error(), "no MessageId") || !strings.Contains(e.Err.Error(), "count as one") {
			t.Errorf("IDDerived event: id %s (%s), err %v; want %s, missing, and an error saying why and what it means", e.Info.ID, e.Info.IDDerived, e.Err, calls[0].ID)
		}
	}
}

// TestConsumerNoMessageIDContent: messages without a MessageId that are alike in routing key,
// properties, application headers and body count as one (the second is a duplicate, as the
// package documents); ones that differ in any of them are handled each; a failing one is
// retried under the same id (its retry copy carries the derived id as MessageId) and handled
// once.
func TestConsumerNoMessageIDContent(t *testing.T) {
	t.Parallel()
	f := newConsumerFixture(t)
	store := redisStore(t)
	r := &identityRecorder{evs: newConsumerEvents()}
	c := newConsumer(t, f.cfg, f.work, func(ctx context.Context, d amqp.Delivery) error {
		in, _ := consumer.InfoFrom(ctx)
		if string(d.Body) == "fails once" && in.Attempt == 1 {
			return errors.New("first attempt fails")
		}
		r.handled(in)
		return nil
	}, consumer.Options{
		Store:       store(),
		Observer:    r.evs.observe,
		Concurrency: 1,
		Backoff:     consumer.Backoff{MaxAttempts: 3, Initial: 50 * time.Millisecond, Max: 100 * time.Millisecond},
	})
	ch := f.env.Channel(t)
	msg := func(body, tenant string) amqp.Publishing {
		return amqp.Publishing{Headers: amqp.Table{"tenant": tenant}, Body: []byte(body)}
	}
	for _, m := range []amqp.Publishing{msg("a", "t1"), msg("a", "t1"), msg("a", "t2"), msg("b", "t1"), msg("fails once", "t1")} {
		rawToQueue(t, ch, f.work, m)
	}
	stop := runConsumer(t, c)
	waitFor(t, time.Minute, "4 distinct messages handled and 1 skipped", func() bool {
		return len(r.handlerCalls()) == 4 && r.evs.n(consumer.Skipped) == 1
	})
	time.Sleep(time.Second) // a second handling would show now
	stop()
	var retriedID string
	r.evs.mu.Lock()
	for _, e := range r.evs.all {
		if e.Kind == consumer.Retried {
			retriedID = e.Info.ID
		}
	}
	r.evs.mu.Unlock()
	ids := map[string]bool{}
	for _, in := range r.handlerCalls() {
		ids[in.ID] = true
		switch {
		case in.Attempt == 2 && (in.ID != retriedID || in.IDDerived != ""):
			t.Errorf("the retry handled with id %s (%q), want the first attempt's derived id %s as its MessageId", in.ID, in.IDDerived, retriedID)
		case in.Attempt == 1 && in.IDDerived != consumer.DerivedMissing:
			t.Errorf("handled %s with IDDerived %q, want missing", in.ID, in.IDDerived)
		}
	}
	if !strings.HasPrefix(retriedID, consumer.ContentIDPrefix) {
		t.Errorf("retried with id %q, want a content id", retriedID)
	}
	if len(ids) != 4 || len(r.handlerCalls()) != 4 {
		t.Errorf("handled %d times with %d distinct ids, want 4 and 4", len(r.handlerCalls()), len(ids))
	}
	if n := r.evs.n(consumer.Retried); n != 1 {
		t.Errorf("%d Retried events, want 1", n)
	}
	// The 5 first deliveries report their derived ids; the retry copy carries its id as
	// MessageId, so it reports none.
	if n := len(r.derivedEvents()); n != 5 {
		t.Errorf("%d IDDerived events, want 5 (the retry copy has the derived id as its MessageId)", n)
	}
}

// TestConsumerIDFuncEmptyOrLong: an id function that returns "" (here: a header the message
// lacks) gets the content id; one that returns more than consumer.MaxIDLen bytes gets the
// hash of that id (HashedIDPrefix), stable across copies, and two ids differing only after
// the first 255 bytes stay two. With the Redis store, each message is handled once and its
// duplicate skipped.
func TestConsumerIDFuncEmptyOrLong(t *testing.T) {
	t.Parallel()
	f := newConsumerFixture(t)
	store := redisStore(t)
	r := &identityRecorder{evs: newConsumerEvents()}
	long := strings.Repeat("L", consumer.MaxIDLen)
	c := newConsumer(t, f.cfg, f.work, func(ctx context.Context, d amqp.Delivery) error {
		in, _ := consumer.InfoFrom(ctx)
		r.handled(in)
		return nil
	}, consumer.Options{Store: store(), Observer: r.evs.observe, Concurrency: 1, IDFunc: func(d amqp.Delivery) string {
		k, _ := d.Headers["order"].(string)
		if k == "" {
			return ""
		}
		return long + k
	}})
	ch := f.env.Channel(t)
	for _, m := range []amqp.Publishing{
		{MessageId: "m1", Headers: amqp.Table{"order": "1"}, Body: []byte("x")},
		{MessageId: "m2", Headers: amqp.Table{"order": "1"}, Body: []byte("y")}, // the same long id: a duplicate
		{MessageId: "m3", Headers: amqp.Table{"order": "2"}, Body: []byte("x")}, // differs after 255 bytes
		{MessageId: "m4", Body: []byte("no order")},
		{MessageId: "m5", Body: []byte("no order")}, // MessageId is no part of the content id
	} {
		rawToQueue(t, ch, f.work, m)
	}
	stop := runConsumer(t, c)
	waitFor(t, time.Minute, "3 handled and 2 skipped", func() bool {
		return len(r.handlerCalls()) == 3 && r.evs.n(consumer.Skipped) == 2
	})
	time.Sleep(time.Second)
	stop()
	var hashed, content int
	for _, in := range r.handlerCalls() {
		switch {
		case in.IDDerived == consumer.DerivedTooLong && strings.HasPrefix(in.ID, consumer.HashedIDPrefix) && len(in.ID) <= consumer.MaxIDLen:
			hashed++
		case in.IDDerived == consumer.DerivedMissing && strings.HasPrefix(in.ID, consumer.ContentIDPrefix):
			content++
		default:
			t.Errorf("handled with id %q (%q)", in.ID, in.IDDerived)
		}
	}
	if hashed != 2 || content != 1 || len(r.handlerCalls()) != 3 {
		t.Errorf("handled %d: %d with a hashed id, %d with a content id; want 3: 2 and 1", len(r.handlerCalls()), hashed, content)
	}
	if n := len(r.derivedEvents()); n != 5 {
		t.Errorf("%d IDDerived events, want 5", n)
	}
}
