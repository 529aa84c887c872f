//go:build integration

package integration

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/delaykit/rabbitdelay/consumer"
	"github.com/delaykit/rabbitdelay/internal/admin"
	"github.com/delaykit/rabbitdelay/internal/delayspec"
	"github.com/delaykit/rabbitdelay/internal/route"
)

var consumerLoad = flag.Int("consumer-load", 10000, "messages of TestConsumerLoadRetries")

// TestConsumerLoadRetries: -consumer-load messages (10,000 by default, the size: 66-165 s
// under -race on the 2-core development VM, on RabbitMQ 3.10.8 and 4.0.5 alike, with the VM's
// other load deciding where in that range), each due 1-50 ms after
// publishing, handled by one Consumer (16 at a time, memory store) whose handler fails 20 % of
// first attempts at random. Every message is handled successfully exactly once; every retry
// arrives no earlier than its back-off after its failure and is due no earlier; the other queue
// bound to the same target with the same key gets every message once and no retry. The Consumer
// runs with Options.NoRetryBinding: the retries reach the queue through the binding `rabbitdelay apply`
// made for it as a ready queue (the other queue has one too, by its own name).
func TestConsumerLoadRetries(t *testing.T) {
	t.Parallel()
	f := newConsumerFixture(t)
	n := *consumerLoad
	ok := newConsumerEffects()
	var failed sync.Map  // id -> failure time (time.Time), for the ids whose first attempt failed
	var retried sync.Map // id -> Event (Retried)
	type arrival struct {
		at, lastFailure time.Time
		due             time.Time
	}
	var arrivals sync.Map // id -> arrival of attempt 2
	var early atomic.Int32
	evs := newConsumerEvents()
	backoff := consumer.Backoff{MaxAttempts: 5, Initial: 200 * time.Millisecond, Max: time.Second, Jitter: 0.3}
	c := newConsumer(t, f.cfg, f.work, func(ctx context.Context, d amqp.Delivery) error {
		in, _ := consumer.InfoFrom(ctx)
		if d.RoutingKey != "o."+d.MessageId {
			t.Errorf("message %s: routing key %q, want the original o.%s (attempt %d)", d.MessageId, d.RoutingKey, d.MessageId, in.Attempt)
		}
		if tgt, _ := d.Headers[route.TargetHeader].(string); tgt != f.target() {
			t.Errorf("message %s: target header %q, want %q", d.MessageId, tgt, f.target())
		}
		if in.Attempt == 1 && rand.IntN(5) == 0 {
			failed.Store(d.MessageId, time.Now())
			return errors.New("random failure")
		}
		if in.Attempt > 1 {
			ms, _, _ := route.HeaderInt(d.Headers[consumer.HeaderLastFailure])
			arrivals.Store(d.MessageId, arrival{at: time.Now(), lastFailure: time.UnixMilli(ms), due: in.Due})
			if !in.HasDue || time.Now().Before(in.Due) {
				early.Add(1)
			}
		}
		ok.add(d.MessageId)
		return nil
	}, consumer.Options{Concurrency: 16, Backoff: backoff, NoRetryBinding: true, Observer: func(e consumer.Event) {
		evs.observe(e)
		if e.Kind == consumer.Retried {
			retried.Store(e.Info.ID, e)
		}
	}})
	stop := runConsumer(t, c)
	others := consumeQueue(t, f.env, f.other)

	start := time.Now()
	f.publishLoad(t, n, "m", 50*time.Millisecond, nil)
	t.Logf("published %d messages in %v", n, time.Since(start))

	otherSeen := map[string]int{}
	var otherRetries int
	waitFor(t, 3*time.Minute, fmt.Sprintf("%d messages handled", n), func() bool {
		for {
			select {
			case a := <-others:
				otherSeen[a.d.MessageId]++
				if _, has := a.d.Headers[consumer.HeaderAttempt]; has {
					otherRetries++
				}
				continue
			default:
			}
			break
		}
		return ok.distinct() == n && len(otherSeen) == n
	})
	t.Logf("handled %d messages (%d retried) in %v", n, evs.n(consumer.Retried), time.Since(start))
	// Give stray copies (a retry routed to the other queue, a second success) time to show.
	time.Sleep(2 * time.Second)
	stop()
	for {
		select {
		case a := <-others:
			otherSeen[a.d.MessageId]++
			otherRetries++ // every original had arrived: anything more is a copy
			continue
		default:
		}
		break
	}

	if twice := ok.twice(); len(twice) > 0 {
		t.Errorf("%d messages handled successfully more than once: %v", len(twice), twice[:min(10, len(twice))])
	}
	if otherRetries > 0 {
		t.Errorf("the other queue bound to the same target got %d retry copies, want 0", otherRetries)
	}
	for id, k := range otherSeen {
		if k != 1 {
			t.Errorf("the other queue got %s %d times", id, k)
		}
	}
	nFailed := 0
	failed.Range(func(k, v any) bool {
		nFailed++
		id := k.(string)
		a, ok := arrivals.Load(id)
		if !ok {
			t.Errorf("%s failed its first attempt but no retry was handled", id)
			return true
		}
		ev, ok := retried.Load(id)
		if !ok {
			t.Errorf("%s: no Retried event", id)
			return true
		}
		arr, delay := a.(arrival), ev.(consumer.Event).Delay
		// The header is in whole ms: allow the truncated part.
		if arr.at.Before(arr.lastFailure.Add(delay)) || arr.at.Before(arr.due) {
			t.Errorf("%s: retry arrived %v after its failure, before its back-off %v (due %v)", id, arr.at.Sub(arr.lastFailure), delay, arr.due)
		}
		if delay < time.Duration(float64(backoff.Initial)*(1-backoff.Jitter)) {
			t.Errorf("%s: back-off %v below the policy's least %v", id, delay, time.Duration(float64(backoff.Initial)*(1-backoff.Jitter)))
		}
		return true
	})
	if early.Load() > 0 {
		t.Errorf("%d retries handled before their due time", early.Load())
	}
	if nFailed != evs.n(consumer.Retried) {
		t.Errorf("%d first attempts failed, %d Retried consumerEvents", nFailed, evs.n(consumer.Retried))
	}
	if evs.n(consumer.Handled) != n || evs.n(consumer.Parked) != 0 || evs.n(consumer.Unsettled) != 0 {
		t.Errorf("consumerEvents: handled %d (want %d), parked %d, unsettled %d (want 0)", evs.n(consumer.Handled), n,
			evs.n(consumer.Parked), evs.n(consumer.Unsettled))
	}
	t.Logf("%d first attempts failed and were retried; skipped %d, deferred %d", nFailed, evs.n(consumer.Skipped), evs.n(consumer.Deferred))
}

// TestConsumerParkAndReplay: a handler that always fails parks the message after MaxAttempts,
// with the reason; a Permanent error parks at once; `rabbitdelay status` (admin.Status) counts
// the parked messages; Replay moves both (and only they) back to
// the queue, where they are handled.
func TestConsumerParkAndReplay(t *testing.T) {
	t.Parallel()
	f := newConsumerFixture(t)
	var healthy atomic.Bool
	ok := newConsumerEffects()
	evs := newConsumerEvents()
	c := newConsumer(t, f.cfg, f.work, func(ctx context.Context, d amqp.Delivery) error {
		if healthy.Load() {
			ok.add(d.MessageId)
			return nil
		}
		if d.MessageId == "bad-input" {
			return fmt.Errorf("decode: %w", consumer.Permanent(errors.New("not JSON")))
		}
		return errors.New("the payment service is down")
	}, consumer.Options{
		Backoff:  consumer.Backoff{MaxAttempts: 3, Initial: 50 * time.Millisecond, Max: 100 * time.Millisecond},
		Observer: evs.observe,
	})
	stop := runConsumer(t, c)
	// A due message no target took, parked by the topology: Replay must leave it.
	ch := f.env.Channel(t)
	if err := ch.Publish("", f.spec.Names().Parking(), false, false, amqp.Publishing{MessageId: "foreign", Body: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	f.publish(t, "poison", 10*time.Millisecond)
	f.publish(t, "bad-input", 10*time.Millisecond)
	waitFor(t, time.Minute, "two messages parked", func() bool { return evs.n(consumer.Parked) == 2 })
	stop()
	if evs.n(consumer.Retried) != 2 {
		t.Errorf("%d retries, want 2 (attempts 1 and 2 of poison)", evs.n(consumer.Retried))
	}
	// `rabbitdelay status` counts them: its parking queue line (admin.Status's Parking()).
	plan, err := admin.NewPlan(f.spec)
	if err != nil {
		t.Fatal(err)
	}
	sctx, scancel := context.WithTimeout(context.Background(), time.Minute)
	defer scancel()
	sconn, m := f.env.Dial(t), topoNeedManagement(t, f.env)
	waitFor(t, 30*time.Second, "rabbitdelay status counting the 3 parked messages", func() bool {
		rep, _ := admin.Status(sctx, sconn, plan, admin.StatusOptions{Management: m})
		return rep != nil && rep.Parking().Messages == 3
	})
	parked := getAll(t, f.env, f.spec.Names().Parking())
	byID := map[string]amqp.Delivery{}
	for _, d := range parked {
		byID[d.MessageId] = d
	}
	if len(parked) != 3 || byID["foreign"].MessageId == "" {
		t.Fatalf("parking queue holds %d messages (%v), want poison, bad-input and foreign", len(parked), byID)
	}
	for id, want := range map[string]struct {
		reason  string
		attempt int64
	}{"poison": {consumer.ParkAttempts, 3}, "bad-input": {consumer.ParkPermanent, 1}} {
		d := byID[id]
		h := d.Headers
		attempt, _, _ := route.HeaderInt(h[consumer.HeaderAttempt])
		first, _, _ := route.HeaderInt(h[consumer.HeaderFirstFailure])
		last, _, _ := route.HeaderInt(h[consumer.HeaderLastFailure])
		errText, _ := h[consumer.HeaderError].(string)
		if h[consumer.HeaderParkReason] != want.reason || attempt != want.attempt || h[consumer.HeaderQueue] != f.work ||
			h[consumer.HeaderRoutingKey] != "o."+id || h[consumer.HeaderTarget] != f.target() || errText == "" ||
			first < start.UnixMilli()-1 || last < first || string(d.Body) != "body "+id || d.ContentType != "text/plain" {
			t.Errorf("parked %s: reason %v attempt %d queue %v key %v target %v error %q first %d last %d body %q, want reason %s attempt %d",
				id, h[consumer.HeaderParkReason], attempt, h[consumer.HeaderQueue], h[consumer.HeaderRoutingKey], h[consumer.HeaderTarget],
				errText, first, last, d.Body, want.reason, want.attempt)
		}
		t.Logf("parked %s: %s after %d attempt(s): %q", id, h[consumer.HeaderParkReason], attempt, errText)
	}
	// Put them back in the parking queue as they were, then replay.
	for _, d := range parked {
		msg := amqp.Publishing{Headers: d.Headers, MessageId: d.MessageId, Body: d.Body, ContentType: d.ContentType}
		if err := ch.Publish("", f.spec.Names().Parking(), false, false, msg); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, 10*time.Second, "3 messages back in the parking queue", func() bool { return queueLen(t, ch, f.spec.Names().Parking()) == 3 })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	moved, err := consumer.Replay(ctx, f.cfg, f.work, 0)
	if err != nil || moved != 2 {
		t.Fatalf("Replay = %d, %v; want 2", moved, err)
	}
	if n := queueLen(t, ch, f.spec.Names().Parking()); n != 1 {
		t.Errorf("parking queue holds %d after Replay, want 1 (the foreign message)", n)
	}
	healthy.Store(true)
	evs2 := newConsumerEvents()
	c2 := newConsumer(t, f.cfg, f.work, func(ctx context.Context, d amqp.Delivery) error {
		in, _ := consumer.InfoFrom(ctx)
		if in.Attempt != 1 || d.RoutingKey != "o."+d.MessageId {
			t.Errorf("replayed %s: attempt %d, routing key %q; want 1 and the original", d.MessageId, in.Attempt, d.RoutingKey)
		}
		ok.add(d.MessageId)
		return nil
	}, consumer.Options{Observer: evs2.observe})
	runConsumer(t, c2)
	waitFor(t, time.Minute, "replayed messages handled", func() bool { return ok.count("poison") == 1 && ok.count("bad-input") == 1 })
}

// TestConsumerDeliveryLimit: a handler that fails forever, with more attempts (25) than a
// quorum queue's delivery limit (20): every attempt is handled, the message is parked by the
// Consumer (reason attempts) and never dead-lettered or dropped by the queue, because retries
// ack and re-publish instead of requeueing (no attempt shows an x-delivery-count). Two ready
// queues: "topology-limit", with the x-delivery-limit 20 that `rabbitdelay apply` sets by default
// (a tripped limit would dead-letter it to the parking queue with x-death reason
// delivery_limit), and "broker-default", declared without x-delivery-limit
// (delayspec.NoReadyDeliveryLimit), where RabbitMQ 4.x applies its own default of 20 and a
// tripped limit would drop the message (3.10.8 has no default limit: there it only shows that
// nothing requeues).
func TestConsumerDeliveryLimit(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name  string
		limit int
	}{{"topology-limit", 0}, {"broker-default", delayspec.NoReadyDeliveryLimit}} {
		t.Run(c.name, func(t *testing.T) {
			f := newConsumerFixture(t, func(s *delayspec.Spec) { s.ReadyDeliveryLimit = c.limit })
			var attempts atomic.Int32
			var maxCount atomic.Int64
			evs := newConsumerEvents()
			cons := newConsumer(t, f.cfg, f.work, func(ctx context.Context, d amqp.Delivery) error {
				attempts.Add(1)
				if n, ok, _ := route.HeaderInt(d.Headers["x-delivery-count"]); ok && n > maxCount.Load() {
					maxCount.Store(n)
				}
				return errors.New("always")
			}, consumer.Options{
				Backoff:  consumer.Backoff{MaxAttempts: 25, Initial: 5 * time.Millisecond, Max: 5 * time.Millisecond, NoJitter: true},
				Observer: evs.observe,
			})
			stop := runConsumer(t, cons)
			f.publish(t, "forever", 0)
			waitFor(t, 2*time.Minute, "the message parked by the Consumer (a tripped delivery limit would drop or dead-letter it)",
				func() bool { return evs.n(consumer.Parked) == 1 })
			stop()
			if attempts.Load() != 25 {
				t.Errorf("handler ran %d times, want 25", attempts.Load())
			}
			if maxCount.Load() != 0 {
				t.Errorf("an attempt arrived with x-delivery-count %d: the message was requeued", maxCount.Load())
			}
			parked := getAll(t, f.env, f.spec.Names().Parking())
			if len(parked) != 1 || parked[0].Headers[consumer.HeaderParkReason] != consumer.ParkAttempts {
				t.Fatalf("parking queue: %d messages %v, want one parked by the Consumer (reason attempts)", len(parked), parked)
			}
			if xd, _ := parked[0].Headers["x-death"].([]any); len(xd) > 0 {
				for _, e := range xd {
					if tbl, _ := e.(amqp.Table); tbl["reason"] == "delivery_limit" {
						t.Errorf("dead-lettered by the delivery limit: %v", tbl)
					}
				}
			}
			t.Logf("25 attempts, parked with reason attempts; highest x-delivery-count seen %d", maxCount.Load())
		})
	}
}
