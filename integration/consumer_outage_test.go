//go:build integration

package integration

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/redis/go-redis/v9"

	"github.com/delaykit/rabbitdelay/amqpdelay"
	"github.com/delaykit/rabbitdelay/consumer"
	"github.com/delaykit/rabbitdelay/internal/delayspec"
	"github.com/delaykit/rabbitdelay/revoke"
)

// TestRevocationStreamDeletedWhileReading: the revocation stream is deleted under a running
// reader. A Revoked call then waits for its context without asking for fences in a loop (before,
// every failed fence woke the waiters at once: millions of requests, a core busy), and its error
// names the stream and that it does not exist. Once `rabbitdelay apply` declares the stream again,
// Revoked answers.
func TestRevocationStreamDeletedWhileReading(t *testing.T) {
	t.Parallel()
	f := newRevokeFixture(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	revs, err := revoke.New(ctx, f.cfg, revoke.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer revs.Close()
	stream := f.spec.Names().Revoked()
	if _, err := f.env.Channel(t).QueueDelete(stream, false, false, false); err != nil {
		t.Fatal(err)
	}
	// A call answers from what was read until the reader finds the stream gone.
	waitFor(t, time.Minute, "Revoked fails", func() bool {
		c, cc := context.WithTimeout(ctx, time.Second)
		defer cc()
		_, err := revs.Revoked(c, amqp.Delivery{MessageId: "x"})
		return err != nil
	})
	before := revs.Stats().FencesFailed
	wctx, wcancel := context.WithTimeout(ctx, 5*time.Second)
	_, err = revs.Revoked(wctx, amqp.Delivery{MessageId: "x"})
	wcancel()
	failed := revs.Stats().FencesFailed - before
	t.Logf("Revoked: %v; fences that failed meanwhile: %d", err, failed)
	if !errors.Is(err, amqpdelay.ErrTopologyMissing) || !strings.Contains(err.Error(), stream) {
		t.Errorf("Revoked with the stream deleted: %v, want an error wrapping ErrTopologyMissing that names %q", err, stream)
	}
	if failed > 100 {
		t.Errorf("%d fences failed in 5 s of waiting: the waiters ask in a loop", failed)
	}
	declareTopology(t, f.env, f.spec) // declares the stream again
	waitFor(t, time.Minute, "Revoked answers once the stream is declared again", func() bool {
		c, cc := context.WithTimeout(ctx, 2*time.Second)
		defer cc()
		gone, err := revs.Revoked(c, amqp.Delivery{MessageId: "x"})
		return err == nil && !gone
	})
}

// TestConsumerDefersWhileRevocationStreamMissing: with the revocation stream deleted under a
// running Consumer, a healthy message cannot be checked. It is deferred (a copy through the
// delay topology, Event Deferred naming the stream), never given back to the queue (each
// give-back counts toward the quorum queue's delivery limit, which parked such messages as
// poison, x-death reason delivery_limit) and never handled unchecked. Once the stream is declared
// again, it is handled, once.
func TestConsumerDefersWhileRevocationStreamMissing(t *testing.T) {
	t.Parallel()
	f := newConsumerFixture(t)
	ev := newConsumerEvents()
	fx := newConsumerEffects()
	c := newConsumer(t, f.cfg, f.work, func(ctx context.Context, d amqp.Delivery) error { fx.add(d.MessageId); return nil }, consumer.Options{
		SettleTimeout: 500 * time.Millisecond,
		BusyDelay:     200 * time.Millisecond,
		Observer:      ev.observe,
	})
	stop := runConsumer(t, c)
	defer stop()
	stream := f.spec.Names().Revoked()
	f.publish(t, "before", 10*time.Millisecond)
	waitFor(t, time.Minute, "the first message handled", func() bool { return fx.count("before") == 1 })
	if _, err := f.env.Channel(t).QueueDelete(stream, false, false, false); err != nil {
		t.Fatal(err)
	}
	// Due 3 s from now: its check needs a fence sent after its due time less the bound, which no
	// reader can write into the deleted stream, whatever it has read so far.
	f.publish(t, "healthy", 3*time.Second)
	waitFor(t, 2*time.Minute, "the message deferred 3 times", func() bool {
		if fx.count("healthy") > 0 || ev.n(consumer.Requeued) > 0 {
			t.Fatalf("handled %d times, given back %d times, while the stream was missing", fx.count("healthy"), ev.n(consumer.Requeued))
		}
		return ev.n(consumer.Deferred) >= 3
	})
	ev.mu.Lock()
	for _, e := range ev.all {
		if e.Kind == consumer.Deferred && (e.Err == nil || !strings.Contains(e.Err.Error(), stream) || !errors.Is(e.Err, amqpdelay.ErrTopologyMissing)) {
			t.Errorf("Deferred event without an error naming the missing stream %q: %v", stream, e.Err)
			break
		}
	}
	ev.mu.Unlock()
	if n := ev.n(consumer.Requeued); n > 0 {
		t.Errorf("%d deliveries given back to the queue while the stream was missing (each counts toward the delivery limit)", n)
	}
	if n := fx.count("healthy"); n > 0 {
		t.Errorf("handled %d times while its revocation could not be checked", n)
	}
	declareTopology(t, f.env, f.spec)
	waitFor(t, 2*time.Minute, "handled once the stream is back", func() bool { return fx.count("healthy") == 1 })
	stop()
	if n := queueLen(t, f.env.Channel(t), f.spec.Names().Parking()); n != 0 {
		t.Errorf("the parking queue holds %d messages", n)
	}
	if n := fx.count("healthy"); n != 1 {
		t.Errorf("handled %d times, want 1", n)
	}
}

// cutProxy is a TCP proxy to addr that can cut every connection and refuse new ones for a while.
type cutProxy struct {
	ln    net.Listener
	cut   atomic.Bool
	mu    sync.Mutex
	conns []net.Conn
}

func newCutProxy(t testing.TB, addr string) *cutProxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &cutProxy{ln: ln}
	t.Cleanup(func() { _ = ln.Close(); p.setCut(true) })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("tcp", addr)
			if p.cut.Load() || err != nil {
				_ = c.Close()
				if s != nil {
					_ = s.Close()
				}
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, c, s)
			p.mu.Unlock()
			go func() { _, _ = io.Copy(s, c); _ = s.Close() }()
			go func() { _, _ = io.Copy(c, s); _ = c.Close() }()
		}
	}()
	return p
}

// setCut cuts (closes every connection, refuses new ones) or restores the proxy.
func (p *cutProxy) setCut(on bool) {
	p.cut.Store(on)
	if on {
		p.mu.Lock()
		for _, c := range p.conns {
			_ = c.Close()
		}
		p.conns = nil
		p.mu.Unlock()
	}
}

// proxiedRedisStore returns a RedisStore on REDIS_URL through a cutProxy, with keys unique to
// the test (skipped, or failed in CI, without REDIS_URL).
func proxiedRedisStore(t *testing.T) (*cutProxy, *consumer.RedisStore) {
	t.Helper()
	redisStore(t)
	opt, err := redis.ParseURL(strings.TrimSpace(os.Getenv("REDIS_URL")))
	if err != nil {
		t.Fatal(err)
	}
	px := newCutProxy(t, opt.Addr)
	popt := *opt
	popt.Addr = px.ln.Addr().String()
	rdb := redis.NewClient(&popt)
	t.Cleanup(func() { _ = rdb.Close() })
	return px, consumer.NewRedisStore(rdb, "rdtest:"+t.Name()+":"+time.Now().Format("150405.000000")+":")
}

// TestConsumerDoneMarkRidesOutRedisOutage: Redis is unreachable for 3 s at the moment a handler
// returns nil. The Consumer keeps the delivery and tries the done mark again until Redis answers
// (within the settle timeout); before, it gave up after about 300 ms and acked, and a copy of the
// same id arriving once the lease expired ran the handler again.
func TestConsumerDoneMarkRidesOutRedisOutage(t *testing.T) {
	t.Parallel()
	px, store := proxiedRedisStore(t)

	f := newConsumerFixture(t)
	fx := newConsumerEffects()
	ev := newConsumerEvents()
	entered, proceed := make(chan struct{}), make(chan struct{})
	var first atomic.Bool
	c := newConsumer(t, f.cfg, f.work, func(ctx context.Context, d amqp.Delivery) error {
		if first.CompareAndSwap(false, true) {
			close(entered)
			<-proceed
		}
		fx.add(d.MessageId)
		return nil
	}, consumer.Options{
		Store:     store,
		Lease:     time.Second,
		Keep:      time.Hour,
		Observer:  ev.observe,
		BusyDelay: 200 * time.Millisecond,
	})
	runConsumer(t, c)
	f.publish(t, "once", 10*time.Millisecond)
	<-entered
	px.setCut(true)
	close(proceed) // the handler succeeds while Redis cannot be reached
	time.Sleep(3 * time.Second)
	px.setCut(false)
	waitFor(t, time.Minute, "handled", func() bool { return ev.n(consumer.Handled) == 1 })
	ev.mu.Lock()
	for _, e := range ev.all {
		if e.Kind == consumer.Handled && e.Err != nil {
			t.Errorf("Handled with a store error: %v", e.Err)
		}
	}
	ev.mu.Unlock()
	time.Sleep(1500 * time.Millisecond) // past the 1 s lease
	f.publish(t, "once", 10*time.Millisecond)
	waitFor(t, time.Minute, "the second copy settled", func() bool { return ev.n(consumer.Skipped)+ev.n(consumer.Handled) == 2 })
	if n := fx.count("once"); n != 1 {
		t.Errorf("id handled %d times, want 1: the done mark was lost to a 3 s Redis outage", n)
	}
}

// TestConsumerRetriesThroughRedisOutage: Redis goes away while a handler runs, and the handler
// fails. Releasing the lease fails, and is given a budget of its own (it expires by itself): the
// retry copy is still published, within a settle timeout of its own. Before, the release used
// up the settle timeout, and the delivery was given back (counting toward the delivery limit).
func TestConsumerRetriesThroughRedisOutage(t *testing.T) {
	t.Parallel()
	px, store := proxiedRedisStore(t)

	f := newConsumerFixture(t)
	ev := newConsumerEvents()
	var runs atomic.Int64
	c := newConsumer(t, f.cfg, f.work, func(ctx context.Context, d amqp.Delivery) error {
		if runs.Add(1) == 1 {
			px.setCut(true) // Redis goes away while the handler runs
		}
		return errors.New("fails")
	}, consumer.Options{
		Store:         store,
		Lease:         10 * time.Second,
		Keep:          time.Hour,
		Observer:      ev.observe,
		SettleTimeout: 3 * time.Second,
		BusyDelay:     200 * time.Millisecond,
	})
	runConsumer(t, c)
	f.publish(t, "r1", 10*time.Millisecond)
	waitFor(t, time.Minute, "the failure settled", func() bool { return ev.n(consumer.Retried)+ev.n(consumer.Requeued) >= 1 })
	px.setCut(false)
	if n := ev.n(consumer.Requeued); n > 0 {
		t.Errorf("the failed delivery was given back %d times instead of retried", n)
	}
}

// TestConsumerMetricsCountEveryHandlerRun: a handler failure whose delivery is neither retried
// nor parked (a delivery so crowded with headers that no copy of it can be published: rejected)
// still counts in rabbitdelay_consumer_handler_failures_total and handler_duration_seconds.
func TestConsumerMetricsCountEveryHandlerRun(t *testing.T) {
	t.Parallel()
	f := newConsumerFixture(t)
	reg := prometheus.NewRegistry()
	ev := newConsumerEvents()
	var calls atomic.Int64
	c := newConsumer(t, f.cfg, f.work, func(ctx context.Context, d amqp.Delivery) error {
		calls.Add(1)
		return errors.New("always fails")
	}, consumer.Options{Observer: ev.observe, Metrics: reg})
	rawToQueue(t, f.env.Channel(t), f.work, amqp.Publishing{MessageId: "crowded", Headers: manyHeaders(8125), Body: []byte("x")})
	stop := runConsumer(t, c)
	waitFor(t, time.Minute, "rejected", func() bool { return ev.n(consumer.Rejected) == 1 })
	stop()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var failures float64
	var runs uint64
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			switch mf.GetName() {
			case "rabbitdelay_consumer_handler_failures_total":
				failures += m.GetCounter().GetValue()
			case "rabbitdelay_consumer_handler_duration_seconds":
				runs += m.GetHistogram().GetSampleCount()
			}
		}
	}
	if float64(calls.Load()) != failures || uint64(calls.Load()) != runs {
		t.Errorf("handler failed %d times; handler_failures_total %v, handler_duration_seconds count %d", calls.Load(), failures, runs)
	}
}

// TestConsumerCopiesLeaveCCBehind: a delivery still carries the CC header of its first publish,
// and RabbitMQ routes a message with its CC keys too. The Consumer's retry copy (through the retry
// exchange, which binds every ready queue by its name) and its parked copy (through the default
// exchange) drop CC and BCC, so they reach their own queue alone: before, a retry reached the
// ready queue the CC header named.
func TestConsumerCopiesLeaveCCBehind(t *testing.T) {
	t.Parallel()
	var third string
	f := newConsumerFixture(t, func(s *delayspec.Spec) {
		third = strings.TrimSuffix(s.ReadyQueues[0].Queue, "work") + "third"
		s.ReadyQueues = append(s.ReadyQueues, delayspec.ReadyQueue{Queue: third, Exchange: s.Targets[0].Name, BindingKey: "t.#"})
	})
	var calls sync.Map
	c := newConsumer(t, f.cfg, f.work, func(ctx context.Context, d amqp.Delivery) error {
		n, _ := calls.LoadOrStore(d.MessageId, new(atomic.Int32))
		if n.(*atomic.Int32).Add(1) == 1 && d.MessageId == "retried" {
			return errors.New("fail once")
		}
		if d.MessageId == "parked" {
			return consumer.Permanent(errors.New("park it"))
		}
		return nil
	}, consumer.Options{Backoff: consumer.Backoff{MaxAttempts: 3, Initial: 50 * time.Millisecond, Max: 100 * time.Millisecond}})
	stop := runConsumer(t, c)
	ctx := pubCtx(t)
	for _, id := range []string{"retried", "parked"} {
		m := amqp.Publishing{MessageId: id, Body: []byte("for work only"), Headers: amqp.Table{"CC": []any{third}}}
		if _, err := f.pub.Publish(ctx, f.target(), "o.1", m, 10*time.Millisecond); err != nil {
			t.Fatal(err)
		}
	}
	parking := f.spec.Names().Parking()
	waitFor(t, time.Minute, "retried handled and parked parked", func() bool {
		n, ok := calls.Load("retried")
		return ok && n.(*atomic.Int32).Load() >= 2 && queueLen(t, f.env.Channel(t), parking) >= 1
	})
	stop()
	if n := queueLen(t, f.env.Channel(t), third); n != 0 {
		t.Errorf("queue %s (bound by t.#, never matched by the messages) holds %d copies of %s's retry or parked copy", third, n, f.work)
	}
	for _, d := range getAll(t, f.env, parking) {
		if _, cc := d.Headers["CC"]; cc {
			t.Errorf("parked copy of %s keeps its CC header: %v", d.MessageId, d.Headers["CC"])
		}
	}
}
