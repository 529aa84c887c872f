//go:build integration

package integration

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/delaykit/rabbitdelay/amqpdelay"
	"github.com/delaykit/rabbitdelay/consumer"
	"github.com/delaykit/rabbitdelay/internal/admin"
	"github.com/delaykit/rabbitdelay/internal/route"
)

// TestConsumerAckAfterRetryConfirmed: a failed delivery is acked only once its retry copy is
// confirmed. With the topology's delay queues deleted (after the Consumer started), the retry
// publish comes back unroutable (amqpdelay.ErrUnroutable): the Consumer publishes again with
// back-off until its settle timeout (3 s here, consumer.Options.SettleTimeout) ends, then gives the
// delivery back (Requeued)
// instead of acking it, and the broker delivers it again, flagged redelivered. The
// handler holds that delivery until `rabbitdelay apply` (admin.Apply) has declared the delay
// queues again, then fails once more: that retry is confirmed, the delivery acked, and attempt
// 2 handled, once. A Consumer that acked before the confirm would lose the message at the first
// failure, and attempt 2 would never come.
func TestConsumerAckAfterRetryConfirmed(t *testing.T) {
	t.Parallel()
	f := newConsumerFixture(t)
	restored := make(chan struct{})
	var firsts atomic.Int32
	var redelivered atomic.Bool
	ok := newConsumerEffects()
	evs := newConsumerEvents()
	c := newConsumer(t, f.cfg, f.work, func(ctx context.Context, d amqp.Delivery) error {
		in, _ := consumer.InfoFrom(ctx)
		if d.MessageId == "warm-up" || in.Attempt > 1 {
			ok.add(d.MessageId)
			return nil
		}
		if firsts.Add(1) > 1 { // the delivery given back after the failed retry publish
			redelivered.Store(d.Redelivered)
			select {
			case <-restored:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		return errors.New("fails until retried")
	}, consumer.Options{
		Backoff:       consumer.Backoff{MaxAttempts: 3, Initial: 50 * time.Millisecond, Max: 100 * time.Millisecond},
		Observer:      evs.observe,
		SettleTimeout: 3 * time.Second,
	})
	runConsumer(t, c)
	// A message handled first: the Consumer (and its retry Publisher) runs before the queues go.
	f.publish(t, "warm-up", 0)
	waitFor(t, time.Minute, "the warm-up message handled", func() bool { return ok.count("warm-up") == 1 })

	deleted := deleteDelayQueues(t, f)
	f.publish(t, "m", 0) // the direct path: no delay queue on the way in
	waitFor(t, 3*time.Minute, "the delivery given back after its retry publish failed until the settle timeout, and delivered again", func() bool {
		return evs.n(consumer.Requeued) >= 1 && firsts.Load() >= 2
	})
	if n := evs.n(consumer.Retried); n != 0 {
		t.Fatalf("%d Retried events while the delay queues were missing, want 0", n)
	}
	evs.mu.Lock()
	var requeued consumer.Event
	for _, e := range evs.all {
		if e.Kind == consumer.Requeued {
			requeued = e
			break
		}
	}
	evs.mu.Unlock()
	if !errors.Is(requeued.Err, amqpdelay.ErrUnroutable) || !errors.Is(requeued.Err, context.DeadlineExceeded) || requeued.Info.ID != "m" {
		t.Errorf("Requeued event: id %q, err %v; want m and an error wrapping amqpdelay.ErrUnroutable and the settle timeout's context.DeadlineExceeded",
			requeued.Info.ID, requeued.Err)
	}
	if !redelivered.Load() {
		t.Errorf("the second delivery of m was not flagged redelivered: want the broker's own copy, given back with a nack")
	}
	declareTopology(t, f.env, f.spec)
	close(restored)
	waitFor(t, time.Minute, "m retried and its attempt 2 handled", func() bool { return ok.count("m") == 1 })
	time.Sleep(time.Second) // a second copy would show now
	if n := ok.count("m"); n != 1 {
		t.Errorf("m handled %d times, want 1", n)
	}
	if n := evs.n(consumer.Retried); n != 1 {
		t.Errorf("%d Retried events, want 1 (the retry after the delay queues were back)", n)
	}
	t.Logf("deleted %d delay queues; m given back %d times (%d deliveries of attempt 1) before its retry was confirmed",
		deleted, evs.n(consumer.Requeued), firsts.Load())
}

// TestConsumerRetryPublishHeld: while the retry publish fails (the delay queues deleted), the
// Consumer holds the failed delivery and publishes again with back-off instead of giving it
// back: once `rabbitdelay apply` has declared the queues again, within the settle timeout, the
// retry is confirmed and the delivery acked, with no give-back (no Requeued event, the handler
// called once for attempt 1), and attempt 2 is handled once.
func TestConsumerRetryPublishHeld(t *testing.T) {
	t.Parallel()
	f := newConsumerFixture(t)
	var firsts atomic.Int32
	ok := newConsumerEffects()
	evs := newConsumerEvents()
	c := newConsumer(t, f.cfg, f.work, func(ctx context.Context, d amqp.Delivery) error {
		in, _ := consumer.InfoFrom(ctx)
		if d.MessageId == "warm-up" || in.Attempt > 1 {
			ok.add(d.MessageId)
			return nil
		}
		firsts.Add(1)
		return errors.New("fails until retried")
	}, consumer.Options{
		Backoff:  consumer.Backoff{MaxAttempts: 3, Initial: 50 * time.Millisecond, Max: 100 * time.Millisecond},
		Observer: evs.observe,
	})
	runConsumer(t, c)
	f.publish(t, "warm-up", 0)
	waitFor(t, time.Minute, "the warm-up message handled", func() bool { return ok.count("warm-up") == 1 })

	deleteDelayQueues(t, f)
	f.publish(t, "m", 0)
	waitFor(t, time.Minute, "attempt 1 of m failed", func() bool { return firsts.Load() >= 1 })
	time.Sleep(time.Second) // several retry publishes fail meanwhile (back-off from 100 ms)
	declareTopology(t, f.env, f.spec)
	waitFor(t, time.Minute, "m retried and its attempt 2 handled", func() bool { return ok.count("m") == 1 })
	time.Sleep(time.Second) // a second copy would show now
	if n := ok.count("m"); n != 1 {
		t.Errorf("m handled %d times at attempt 2, want 1", n)
	}
	if n := firsts.Load(); n != 1 {
		t.Errorf("attempt 1 of m handled %d times, want 1 (the delivery held while its retry publish failed)", n)
	}
	if n := evs.n(consumer.Requeued); n != 0 {
		t.Errorf("%d Requeued events, want 0: the delivery was given back while its retry publish could still pass", n)
	}
	if n := evs.n(consumer.Retried); n != 1 {
		t.Errorf("%d Retried events, want 1", n)
	}
}

// deleteDelayQueues deletes every delay queue of f's topology (its retry path) and returns how
// many; a plan without one fails the test.
func deleteDelayQueues(t *testing.T, f *consumerFixture) int {
	t.Helper()
	plan, err := admin.NewPlan(f.spec)
	if err != nil {
		t.Fatal(err)
	}
	ch := f.env.Channel(t)
	deleted := 0
	for _, q := range plan.Queues {
		if q.IsDelay() {
			if _, err := ch.QueueDelete(q.Name, false, false, false); err != nil {
				t.Fatalf("delete delay queue %s: %v", q.Name, err)
			}
			deleted++
		}
	}
	if deleted == 0 {
		t.Fatal("the plan has no delay queue to delete")
	}
	return deleted
}

// TestConsumerLateness: Info (InfoFrom) carries the message's due time, the Publisher's
// Receipt.Due (whole ms), its delay path, and Late, how long after due the handler started: a
// Consumer started 1.5 s after the message fell due reports Late of at least the time between
// due and its start, and at most the time between due and the handler's call. A message
// published without rabbitdelay (no rabbitdelay-due header) has HasDue false, Late 0 and the
// direct path.
func TestConsumerLateness(t *testing.T) {
	t.Parallel()
	f := newConsumerFixture(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	r, err := f.pub.Publish(ctx, f.target(), "o.late", amqp.Publishing{MessageId: "late", Body: []byte("x")}, 100*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	ch := f.env.Channel(t)
	if err := ch.PublishWithContext(ctx, "", f.work, false, false, amqp.Publishing{MessageId: "plain", Body: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Until(r.Due) + 1500*time.Millisecond)
	type call struct {
		in consumer.Info
		at time.Time
	}
	got := make(chan call, 4)
	started := time.Now()
	c := newConsumer(t, f.cfg, f.work, func(ctx context.Context, d amqp.Delivery) error {
		at := time.Now()
		in, _ := consumer.InfoFrom(ctx)
		got <- call{in: in, at: at}
		return nil
	}, consumer.Options{Concurrency: 1})
	runConsumer(t, c)
	calls := map[string]call{}
	for len(calls) < 2 {
		select {
		case cl := <-got:
			calls[cl.in.ID] = cl
		case <-time.After(time.Minute):
			t.Fatalf("handled %d of 2 messages in 1 min", len(calls))
		}
	}
	late := calls["late"]
	if !late.in.HasDue || !late.in.Due.Equal(r.Due) || late.in.Path != r.Path || late.in.Attempt != 1 {
		t.Errorf("late: HasDue %v, Due %s, path %s, attempt %d; want true, %s, %s, 1", late.in.HasDue,
			late.in.Due.Format(time.StampMilli), late.in.Path, late.in.Attempt, r.Due.Format(time.StampMilli), r.Path)
	}
	if lo, hi := started.Sub(r.Due), late.at.Sub(r.Due); late.in.Late < lo || late.in.Late > hi {
		t.Errorf("late: Late %v, want between %v (due to the Consumer's start) and %v (due to the handler's call)", late.in.Late, lo, hi)
	}
	plain := calls["plain"]
	if plain.in.HasDue || plain.in.Late != 0 || !plain.in.Due.IsZero() || plain.in.Path != amqpdelay.PathDirect {
		t.Errorf("plain: HasDue %v, Late %v, Due %v, path %s; want false, 0, zero, direct", plain.in.HasDue, plain.in.Late, plain.in.Due, plain.in.Path)
	}
	t.Logf("late: path %s, Late %v (the Consumer started %v after due)", late.in.Path, late.in.Late, started.Sub(r.Due))
}

// TestConsumerConcurrencyAndShutdown: with concurrency 4 and a backlog of 40 messages, exactly 4
// handlers run at once and the Consumer's AMQP consumer has prefetch 4 (the management API's
// prefetch_count); no fifth handler starts while they run. Then Run's context ends (shutdown
// timeout 10 s): two running handlers are let finish and are acked (Handled), the two others
// ignore everything but their context, which ends at the shutdown timeout, and their messages
// are given back (Requeued); no handler starts after the shutdown began, and the 38 messages
// not handled are back in the queue once Run has returned.
func TestConsumerConcurrencyAndShutdown(t *testing.T) {
	t.Parallel()
	f := newConsumerFixture(t)
	const n, workers = 40, 4
	ch := f.env.Channel(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for i := range n {
		msg := amqp.Publishing{MessageId: fmt.Sprintf("c%02d", i), Body: []byte("x")}
		if err := ch.PublishWithContext(ctx, "", f.work, false, false, msg); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, time.Minute, "the backlog in the queue", func() bool { return queueLen(t, ch, f.work) == n })
	var running, most, entered, afterStop atomic.Int32
	var stopping atomic.Bool
	release := make(chan struct{}, workers)
	var cancelled atomic.Int32
	evs := newConsumerEvents()
	c := newConsumer(t, f.cfg, f.work, func(ctx context.Context, d amqp.Delivery) error {
		if stopping.Load() {
			afterStop.Add(1)
		}
		entered.Add(1)
		r := running.Add(1)
		defer running.Add(-1)
		for {
			m := most.Load()
			if r <= m || most.CompareAndSwap(m, r) {
				break
			}
		}
		select {
		case <-release:
			return nil
		case <-ctx.Done():
			cancelled.Add(1)
			return ctx.Err()
		}
	}, consumer.Options{Concurrency: workers, ShutdownTimeout: 10 * time.Second, Observer: evs.observe})
	stop := runConsumer(t, c)
	waitFor(t, time.Minute, "4 handlers running", func() bool { return running.Load() == workers })
	var prefetch []int
	waitFor(t, 30*time.Second, "the Consumer's AMQP consumer listed by the management API", func() bool {
		var cs []struct {
			Prefetch int `json:"prefetch_count"`
			Queue    struct {
				Name string `json:"name"`
			} `json:"queue"`
		}
		if err := f.env.Broker.Management(http.MethodGet, "api/consumers/"+url.PathEscape(f.env.VHost), nil, &cs); err != nil {
			t.Fatalf("list consumers: %v", err)
		}
		prefetch = prefetch[:0]
		for _, c := range cs {
			if c.Queue.Name == f.work {
				prefetch = append(prefetch, c.Prefetch)
			}
		}
		return len(prefetch) > 0
	})
	if len(prefetch) != 1 || prefetch[0] != workers {
		t.Errorf("consumers of %s: prefetch counts %v, want one consumer with prefetch %d", f.work, prefetch, workers)
	}
	time.Sleep(time.Second) // a fifth handler would start now
	if e, m := entered.Load(), most.Load(); e != workers || m != workers {
		t.Fatalf("%d handlers entered, at most %d at once; want %d and %d", e, m, workers, workers)
	}
	stopping.Store(true)
	done := make(chan struct{})
	go func() { stop(); close(done) }()
	// Release two handlers once Run has had a moment to see its context end; a worker freed
	// before that could take the next message, legitimately.
	time.Sleep(time.Second)
	release <- struct{}{}
	release <- struct{}{}
	select {
	case <-done:
	case <-time.After(2 * time.Minute):
		t.Fatal("Run did not return within 2 min of its context ending")
	}
	if h, r := evs.n(consumer.Handled), evs.n(consumer.Requeued); h != 2 || r < 2 || cancelled.Load() != 2 {
		t.Errorf("after the shutdown: handled %d, requeued %d, handlers cancelled %d; want 2, at least 2, 2", h, r, cancelled.Load())
	}
	if a := afterStop.Load(); a != 0 {
		t.Errorf("%d handlers started after the shutdown began, want 0", a)
	}
	waitFor(t, 30*time.Second, fmt.Sprintf("%d messages back in the queue", n-2), func() bool { return queueLen(t, ch, f.work) == n-2 })
	t.Logf("handled %d, requeued %d, cancelled %d, most at once %d", evs.n(consumer.Handled), evs.n(consumer.Requeued), cancelled.Load(), most.Load())
}

// TestConsumerReconnects: the broker closes the Consumer's connection (as when a node or the
// network goes); the Consumer reports Disconnected, reconnects (Reconnected) and handles a
// message published afterwards, once.
func TestConsumerReconnects(t *testing.T) {
	t.Parallel()
	f := newConsumerFixture(t)
	fx := newConsumerEffects()
	evs := newConsumerEvents()
	c := newConsumer(t, f.cfg, f.work, func(ctx context.Context, d amqp.Delivery) error {
		fx.add(d.MessageId)
		return nil
	}, consumer.Options{ConnectionName: "reconnecting", Observer: evs.observe})
	runConsumer(t, c)
	f.publish(t, "before", 0)
	waitFor(t, time.Minute, "the first message handled", func() bool { return fx.count("before") == 1 })
	closeConnection(t, f.env, "reconnecting")
	waitFor(t, time.Minute, "Disconnected and Reconnected reported", func() bool {
		return evs.n(consumer.Disconnected) == 1 && evs.n(consumer.Reconnected) == 1
	})
	f.publish(t, "after", 0)
	waitFor(t, time.Minute, "the message published after the reconnection handled", func() bool { return fx.count("after") == 1 })
	time.Sleep(time.Second)
	if fx.count("before") != 1 || fx.count("after") != 1 {
		t.Errorf("handled before %d, after %d; want 1 each", fx.count("before"), fx.count("after"))
	}
}

// TestConsumerSettleAfterLongHandler: the settle timeout bounds the settling after the handler
// returned, not the handler's run. A handler that runs longer (6 s) than the settle timeout
// (5 s, consumer.Options.SettleTimeout) and fails still has its retry published and the delivery
// acked (Retried), never given back; attempt 2, as long, succeeds and its done mark is written
// (a Handled event without an error). With one settle timeout counted from the delivery, both
// settlings would find it over.
func TestConsumerSettleAfterLongHandler(t *testing.T) {
	t.Parallel()
	f := newConsumerFixture(t)
	ok := newConsumerEffects()
	evs := newConsumerEvents()
	c := newConsumer(t, f.cfg, f.work, func(ctx context.Context, d amqp.Delivery) error {
		in, _ := consumer.InfoFrom(ctx)
		select {
		case <-time.After(6 * time.Second):
		case <-ctx.Done():
			return ctx.Err()
		}
		if in.Attempt == 1 {
			return errors.New("fails once")
		}
		ok.add(d.MessageId)
		return nil
	}, consumer.Options{
		Backoff:       consumer.Backoff{MaxAttempts: 3, Initial: 50 * time.Millisecond, Max: 100 * time.Millisecond},
		Observer:      evs.observe,
		SettleTimeout: 5 * time.Second,
	})
	runConsumer(t, c)
	f.publish(t, "slow", 0)
	waitFor(t, 3*time.Minute, "attempt 2 of slow handled", func() bool { return evs.n(consumer.Handled) >= 1 })
	evs.mu.Lock()
	defer evs.mu.Unlock()
	for _, e := range evs.all {
		switch e.Kind {
		case consumer.Requeued, consumer.Unsettled:
			t.Errorf("%v event (err %v): the settling after a handler longer than the settle timeout failed", e.Kind, e.Err)
		case consumer.Handled:
			if e.Err != nil || e.Info.Attempt != 2 {
				t.Errorf("Handled event: attempt %d, err %v; want attempt 2 and its done mark written (no error)", e.Info.Attempt, e.Err)
			}
		}
	}
	if n := evs.kind[consumer.Retried]; n != 1 {
		t.Errorf("%d Retried events, want 1", n)
	}
	if n := ok.count("slow"); n != 1 {
		t.Errorf("slow handled %d times, want 1", n)
	}
}

// TestConsumerHoldsEarlyDelivery: a delivery that arrives before its due time (a broker whose
// timers run fast while Erlang's time correction catches up with a clock step; here published
// straight to the queue with a due time 1.5 s ahead) is held until its due time before the
// revocation check, the claim and the handler's timeout: the handler starts at the due time
// with its whole timeout (500 ms here, less than the hold), and a revocation confirmed during
// the hold keeps the handler from running. One due further ahead than consumer.EarlyHold (an
// hour) is not handled: it is sent back through the delay topology (Deferred, ErrEarly).
func TestConsumerHoldsEarlyDelivery(t *testing.T) {
	t.Parallel()
	f := newConsumerFixture(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ch := f.env.Channel(t)
	soon := time.Now().Add(1500 * time.Millisecond)
	far := time.Now().Add(time.Hour)
	for id, due := range map[string]time.Time{"soon": soon, "far": far, "revoked": soon} {
		m := amqp.Publishing{MessageId: id, Body: []byte("x"), Headers: amqp.Table{route.DueHeader: due.UnixMilli()}}
		if err := ch.PublishWithContext(ctx, "", f.work, false, false, m); err != nil {
			t.Fatal(err)
		}
	}
	type call struct {
		at     time.Time
		ctxErr error
	}
	var mu sync.Mutex
	calls := map[string]call{}
	evs := newConsumerEvents()
	c := newConsumer(t, f.cfg, f.work, func(ctx context.Context, d amqp.Delivery) error {
		mu.Lock()
		calls[d.MessageId] = call{at: time.Now(), ctxErr: ctx.Err()}
		mu.Unlock()
		return nil
	}, consumer.Options{Concurrency: 3, HandlerTimeout: 500 * time.Millisecond, Observer: evs.observe})
	runConsumer(t, c)
	time.Sleep(300 * time.Millisecond) // the deliveries are held by now
	if err := f.pub.Revoke(ctx, "revoked"); err != nil {
		t.Fatalf("revoke: %v", err)
	}
	waitFor(t, time.Minute, "soon handled and far deferred", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return !calls["soon"].at.IsZero() && evs.n(consumer.Deferred) == 1
	})
	time.Sleep(time.Until(soon) + time.Second) // the revoked one would have run by now
	mu.Lock()
	defer mu.Unlock()
	if due := time.UnixMilli(soon.UnixMilli()); calls["soon"].at.Before(due) || calls["soon"].ctxErr != nil {
		t.Errorf("soon: handled %v before its due time, handler context error %v", due.Sub(calls["soon"].at), calls["soon"].ctxErr)
	}
	if r, ok := calls["far"]; ok {
		t.Errorf("far: handled at %s, an hour before its due time", r.at.Format(time.StampMilli))
	}
	evs.mu.Lock()
	for _, e := range evs.all {
		if e.Kind == consumer.Deferred && (e.Info.ID != "far" || !errors.Is(e.Err, consumer.ErrEarly) || !e.Info.Due.Equal(time.UnixMilli(far.UnixMilli()))) {
			t.Errorf("Deferred event: id %s, err %v, Info.Due %s; want far, ErrEarly, %s", e.Info.ID, e.Err, e.Info.Due, far)
		}
	}
	evs.mu.Unlock()
	if r, ok := calls["revoked"]; ok {
		t.Errorf("revoked during the hold, yet handled at %s", r.at.Format(time.StampMilli))
	}
}
