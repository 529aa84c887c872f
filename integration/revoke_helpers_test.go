//go:build integration

package integration

import (
	"context"
	"math/rand/v2"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/delaykit/rabbitdelay/amqpdelay"
	"github.com/delaykit/rabbitdelay/consumer"
	"github.com/delaykit/rabbitdelay/integration/brokertest"
	"github.com/delaykit/rabbitdelay/internal/delayspec"
)

// revokeScale returns the size a revocation test uses: def, or REVOKE_TEST_N (the sizes:
// REVOKE_TEST_N=10000) scaled by num/def.
func revokeScale(def int) int {
	if n, err := strconv.Atoi(os.Getenv("REVOKE_TEST_N")); err == nil && n > 0 {
		return def * n / 1000
	}
	return def
}

// revokeFixture is a topology with a target exchange, two buckets (so both the bucket and the
// ladder path carry messages) and one ready queue, a Publisher, and a record of what handlers saw.
type revokeFixture struct {
	env    *brokertest.Env
	spec   delayspec.Spec
	cfg    amqpdelay.Config
	pub    *amqpdelay.Publisher
	target string
	queue  string
	seen   *handled
}

var revokeBuckets = delayspec.Delays{5 * time.Second, 12 * time.Second}

func newRevokeFixture(t testing.TB) *revokeFixture {
	t.Helper()
	env := brokertest.NewEnv(t)
	f := &revokeFixture{env: env, target: env.Name("orders"), queue: env.Name("work"), seen: newHandled()}
	f.spec = testSpec(env, delayspec.Target{Name: f.target, Type: "topic"})
	f.spec.Buckets = revokeBuckets
	f.spec.ReadyQueues = delayspec.ReadyQueues{{Queue: f.queue, Exchange: f.target, BindingKey: "#"}}
	declareTopology(t, env, f.spec)
	f.cfg = amqpdelay.Config{URL: env.URL, Prefix: f.spec.Prefix}
	f.pub = newPublisher(t, env, f.spec)
	return f
}

// handledCopy is one handler call.
type handledCopy struct {
	at, due time.Time
	copy    string
}

// handled records every handler call by message id.
type handled struct {
	mu   sync.Mutex
	byID map[string][]handledCopy
}

func newHandled() *handled { return &handled{byID: map[string][]handledCopy{}} }

func (h *handled) handler(_ context.Context, d amqp.Delivery) error {
	now := time.Now()
	due, _ := amqpdelay.Due(d)
	tag, _ := d.Headers[amqpdelay.CopyHeader].(string)
	h.mu.Lock()
	h.byID[d.MessageId] = append(h.byID[d.MessageId], handledCopy{at: now, due: due, copy: tag})
	h.mu.Unlock()
	return nil
}

func (h *handled) get(id string) []handledCopy {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]handledCopy(nil), h.byID[id]...)
}

func (h *handled) total() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, c := range h.byID {
		n += len(c)
	}
	return n
}

// consume runs a Consumer of the fixture's queue (revocations on, the default) with store and a
// concurrency of 32, recording into f.seen; stop ends it.
func (f *revokeFixture) consume(t testing.TB, store consumer.Store) (stop func(), events *consumerEvents) {
	t.Helper()
	events = newConsumerEvents()
	opts := consumer.Options{Concurrency: 32, Store: store, Observer: events.observe}
	return runConsumer(t, newConsumer(t, f.cfg, f.queue, f.seen.handler, opts)), events
}

// publishMany publishes n messages with ids prefix-i, due after delay(i), from 16 goroutines;
// it returns their receipts by index.
func (f *revokeFixture) publishMany(t testing.TB, prefix string, n int, delay func(i int) time.Duration) []amqpdelay.Receipt {
	t.Helper()
	out := make([]amqpdelay.Receipt, n)
	each(t, n, func(ctx context.Context, i int) (err error) {
		out[i], err = f.pub.Publish(ctx, f.target, "o."+prefix, amqp.Publishing{MessageId: prefix + "-" + strconv.Itoa(i), Body: []byte("x")}, delay(i))
		return err
	})
	return out
}

// each runs do(ctx, i) for i in 0..n-1 from 16 goroutines (30 min for all), and fails the test
// with the first error.
func each(t testing.TB, n int, do func(ctx context.Context, i int) error) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for w := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
			defer cancel()
			for i := w; i < n; i += 16 {
				if err := do(ctx, i); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		t.Fatal(err)
	}
}

// randomSubset returns k distinct indexes of 0..n-1.
func randomSubset(n, k int) map[int]bool {
	out := map[int]bool{}
	for _, i := range rand.Perm(n)[:k] {
		out[i] = true
	}
	return out
}
