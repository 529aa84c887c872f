//go:build integration

package integration

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/url"
	"os"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/redis/go-redis/v9"

	"github.com/delaykit/rabbitdelay/amqpdelay"
	"github.com/delaykit/rabbitdelay/consumer"
	"github.com/delaykit/rabbitdelay/integration/brokertest"
	"github.com/delaykit/rabbitdelay/internal/delayspec"
)

// consumerFixture is a topology with target exchange "orders" (topic) and two ready queues bound
// to it with the same key: work (consumed by consumer.Consumer) and other (a plain consumer).
type consumerFixture struct {
	env   *brokertest.Env
	spec  delayspec.Spec
	cfg   amqpdelay.Config
	work  string
	other string
	pub   *amqpdelay.Publisher
}

// newConsumerFixture declares the fixture's topology; opts may change the specification first
// (its ready queues are set by then).
func newConsumerFixture(t testing.TB, opts ...func(*delayspec.Spec)) *consumerFixture {
	t.Helper()
	env := brokertest.NewEnv(t)
	if env.VHost == "/" {
		if brokertest.InCI() {
			t.Fatal("the consumer tests need the management API (a vhost of their own) and CI=true: a missing AMQP_MANAGEMENT_URL is a failure here; `make test` sets it (scripts/broker)")
		}
		t.Skip("the consumer tests need the management API (a vhost of their own): set AMQP_MANAGEMENT_URL, or run `make test`")
	}
	f := &consumerFixture{env: env, work: env.Name("work"), other: env.Name("other")}
	f.spec = testSpec(env, delayspec.Target{Name: env.Name("orders"), Type: "topic"})
	f.spec.ReadyQueues = delayspec.ReadyQueues{
		{Queue: f.work, Exchange: env.Name("orders"), BindingKey: "o.#"},
		{Queue: f.other, Exchange: env.Name("orders"), BindingKey: "o.#"},
	}
	for _, o := range opts {
		o(&f.spec)
	}
	declareTopology(t, env, f.spec)
	f.cfg = amqpdelay.Config{URL: env.URL, Prefix: f.spec.Prefix}
	f.pub = newPublisher(t, env, f.spec)
	return f
}

func (f *consumerFixture) target() string { return f.env.Name("orders") }

// publish sends a message with id due after delay, and fails the test on error.
func (f *consumerFixture) publish(t testing.TB, id string, delay time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	msg := amqp.Publishing{MessageId: id, ContentType: "text/plain", Body: []byte("body " + id)}
	if _, err := f.pub.Publish(ctx, f.target(), "o."+id, msg, delay); err != nil {
		t.Fatalf("publish %s: %v", id, err)
	}
}

// publishLoad publishes n messages, ids prefix followed by the number in 5 digits, each due 1 ms
// to maxDelay after publishing, from 8 goroutines; before handing out message i it calls at(i)
// (nil: nothing) on the caller's goroutine. A failed publish fails the test.
func (f *consumerFixture) publishLoad(t testing.TB, n int, prefix string, maxDelay time.Duration, at func(i int)) {
	t.Helper()
	var wg sync.WaitGroup
	ids := make(chan int)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range ids {
				id := fmt.Sprintf("%s%05d", prefix, i)
				ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
				msg := amqp.Publishing{MessageId: id, ContentType: "text/plain", Body: []byte("body " + id)}
				delay := time.Millisecond + rand.N(maxDelay)
				if _, err := f.pub.Publish(ctx, f.target(), "o."+id, msg, delay); err != nil {
					t.Errorf("publish %s: %v", id, err)
				}
				cancel()
			}
		}()
	}
	for i := range n {
		if at != nil {
			at(i)
		}
		ids <- i
	}
	close(ids)
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
}

// run starts c.Run in the background; the returned stop cancels it and waits for Run to return
// (failing the test on an error). Stop is also called at cleanup.
func runConsumer(t testing.TB, c *consumer.Consumer) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("Run(%s): %v", c.Queue(), err)
				}
			case <-time.After(2 * time.Minute):
				t.Errorf("Run(%s) did not return within 2 min of its context ending", c.Queue())
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

func newConsumer(t testing.TB, cfg amqpdelay.Config, queue string, h consumer.Handler, opts consumer.Options) *consumer.Consumer {
	t.Helper()
	c, err := consumer.New(cfg, queue, h, opts)
	if err != nil {
		t.Fatalf("consumer.New: %v", err)
	}
	return c
}

// waitFor polls cond every 50 ms until it holds or within passes (then the test fails with what).
func waitFor(t testing.TB, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %v: %s", within, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// effects counts, per message id, how often a handler made its effect.
type consumerEffects struct {
	mu sync.Mutex
	n  map[string]int
}

func newConsumerEffects() *consumerEffects { return &consumerEffects{n: map[string]int{}} }

func (e *consumerEffects) add(id string) {
	e.mu.Lock()
	e.n[id]++
	e.mu.Unlock()
}

func (e *consumerEffects) count(id string) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.n[id]
}

func (e *consumerEffects) distinct() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.n)
}

// twice returns the ids whose effect happened more than once.
func (e *consumerEffects) twice() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []string
	for id, n := range e.n {
		if n > 1 {
			out = append(out, fmt.Sprintf("%s x%d", id, n))
		}
	}
	return out
}

// consumerEvents collects a Consumer's consumerEvents by kind.
type consumerEvents struct {
	mu   sync.Mutex
	kind map[consumer.EventKind]int
	all  []consumer.Event
}

func newConsumerEvents() *consumerEvents { return &consumerEvents{kind: map[consumer.EventKind]int{}} }

func (e *consumerEvents) observe(ev consumer.Event) {
	e.mu.Lock()
	e.kind[ev.Kind]++
	e.all = append(e.all, ev)
	e.mu.Unlock()
}

func (e *consumerEvents) n(k consumer.EventKind) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.kind[k]
}

// redisStore returns a RedisStore on REDIS_URL (scripts/redis) with keys unique to the test, on
// a client of its own (one per simulated instance). Outside CI the test is skipped without
// REDIS_URL; with CI=true that is a failure.
func redisStore(t testing.TB) func() *consumer.RedisStore {
	t.Helper()
	u := os.Getenv("REDIS_URL")
	if u == "" {
		if brokertest.InCI() {
			t.Fatal("REDIS_URL is not set and CI=true: a missing Redis is a failure here; `make test` starts one (scripts/redis run --)")
		}
		t.Skip("REDIS_URL is not set: run `make test`, or `scripts/redis run -- go test -tags integration ./integration -run Consumer`")
	}
	opt, err := redis.ParseURL(u)
	if err != nil {
		t.Fatalf("REDIS_URL: %v", err)
	}
	prefix := fmt.Sprintf("rdtest:%s:%d:", url.PathEscape(t.Name()), time.Now().UnixNano())
	return func() *consumer.RedisStore {
		c := redis.NewClient(opt)
		t.Cleanup(func() { _ = c.Close() })
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := c.Ping(ctx).Err(); err != nil {
			t.Fatalf("Redis at REDIS_URL does not answer: %v", err)
		}
		return consumer.NewRedisStore(c, prefix)
	}
}

// getAll takes every message of queue (basic.get, acked) and returns them.
func getAll(t testing.TB, env *brokertest.Env, queue string) []amqp.Delivery {
	t.Helper()
	ch := env.Channel(t)
	var out []amqp.Delivery
	for {
		d, ok, err := ch.Get(queue, true)
		if err != nil {
			t.Fatalf("get %s: %v", queue, err)
		}
		if !ok {
			return out
		}
		out = append(out, d)
	}
}

// queueLen is the ready count of queue (a passive declare).
func queueLen(t testing.TB, ch *amqp.Channel, queue string) int {
	t.Helper()
	q, err := ch.QueueDeclarePassive(queue, true, false, false, false, nil)
	if err != nil {
		t.Fatalf("passive declare %s: %v", queue, err)
	}
	return q.Messages
}
