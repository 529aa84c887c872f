//go:build integration

package integration

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/delaykit/rabbitdelay/consumer"
	"github.com/delaykit/rabbitdelay/integration/brokertest"
)

// closeConnection closes, through the management API, the connection of env's vhost named name
// (its connection_name client property): the broker drops it as if its client had died.
// The management API lists a new connection within its statistics interval, so it polls.
func closeConnection(t testing.TB, env *brokertest.Env, name string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		var conns []struct {
			Name   string `json:"name"`
			Client struct {
				Name string `json:"connection_name"`
			} `json:"client_properties"`
		}
		if err := env.Broker.Management(http.MethodGet, "api/vhosts/"+url.PathEscape(env.VHost)+"/connections", nil, &conns); err != nil {
			t.Fatalf("list connections: %v", err)
		}
		for _, c := range conns {
			if c.Client.Name == name {
				if err := env.Broker.Management(http.MethodDelete, "api/connections/"+url.PathEscape(c.Name), nil, nil); err != nil {
					t.Fatalf("close connection %s: %v", name, err)
				}
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no connection named %s in vhost %s within 30 s", name, env.VHost)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// killMidHandler: consumer A's handler takes the message and blocks; A's connection is closed
// by the broker (A "dies"), so the broker delivers the message again, to B. B must not run it
// while A's lease holds (it defers the copy); A's handler then makes its effect and marks it
// done; the deferred copy is skipped. Also: one message id published twice. The effect of each
// happens once. store gives each consumer its store (one shared MemoryStore). The same with a
// RedisStore across consumer processes, and with processes killed: TestConsumerProcessesDuplicates.
func killMidHandler(t *testing.T, consumers int, store func() consumer.Store) {
	f := newConsumerFixture(t)
	fx := newConsumerEffects()
	entered := make(chan string, 16)
	release := make(chan struct{})
	var evs []*consumerEvents
	for i := range consumers {
		ev := newConsumerEvents()
		evs = append(evs, ev)
		name := fmt.Sprintf("consumer-%d", i)
		c := newConsumer(t, f.cfg, f.work, func(ctx context.Context, d amqp.Delivery) error {
			if d.MessageId == "slow" {
				entered <- name
				<-release
			}
			fx.add(d.MessageId)
			return nil
		}, consumer.Options{
			Store:          store(),
			ConnectionName: name,
			Concurrency:    4,
			Lease:          10 * time.Second,
			Keep:           time.Hour,
			BusyDelay:      300 * time.Millisecond,
			Observer:       ev.observe,
		})
		runConsumer(t, c)
	}
	total := func(k consumer.EventKind) int {
		n := 0
		for _, ev := range evs {
			n += ev.n(k)
		}
		return n
	}
	f.publish(t, "dup", 20*time.Millisecond)
	f.publish(t, "dup", 20*time.Millisecond)
	f.publish(t, "slow", 20*time.Millisecond)
	var first string
	select {
	case first = <-entered:
	case <-time.After(time.Minute):
		t.Fatal("the slow message never reached a handler")
	}
	closeConnection(t, f.env, first)
	waitFor(t, time.Minute, "the redelivered slow message deferred", func() bool { return total(consumer.Deferred) >= 1 })
	select {
	case who := <-entered:
		t.Fatalf("%s ran the slow message while %s's lease held", who, first)
	default:
	}
	close(release)
	waitFor(t, time.Minute, "both messages handled and the copies skipped", func() bool {
		return fx.count("slow") == 1 && fx.count("dup") == 1 && total(consumer.Skipped) >= 2
	})
	time.Sleep(time.Second) // a copy that would run twice has time to
	if fx.count("slow") != 1 || fx.count("dup") != 1 {
		t.Fatalf("effects: slow %d, dup %d; want 1 each", fx.count("slow"), fx.count("dup"))
	}
	t.Logf("deferred %d, skipped %d, unsettled %d (the dead consumer's ack)", total(consumer.Deferred), total(consumer.Skipped), total(consumer.Unsettled))
}

// TestConsumerDuplicatesMemory: one process, two Consumers sharing one MemoryStore.
func TestConsumerDuplicatesMemory(t *testing.T) {
	t.Parallel()
	m := &consumer.MemoryStore{}
	killMidHandler(t, 2, func() consumer.Store { return m })
}

// TestConsumerLeaseExpiry: an instance that died holding a message's lease (claimed here
// directly in Redis, with a 2 s lease, and never released): the consumers defer the message
// until the lease expires, then one of them handles it, once.
func TestConsumerLeaseExpiry(t *testing.T) {
	t.Parallel()
	rs := redisStore(t)
	f := newConsumerFixture(t)
	ctx := context.Background()
	if st, _, err := rs().Claim(ctx, f.work, "orphan", 2*time.Second); err != nil || st != consumer.Claimed {
		t.Fatalf("claim = %v, %v", st, err)
	}
	fx := newConsumerEffects()
	ev := newConsumerEvents()
	for range 3 {
		c := newConsumer(t, f.cfg, f.work, func(ctx context.Context, d amqp.Delivery) error {
			fx.add(d.MessageId)
			return nil
		}, consumer.Options{Store: rs(), BusyDelay: 200 * time.Millisecond, Observer: ev.observe})
		runConsumer(t, c)
	}
	start := time.Now()
	f.publish(t, "orphan", 0)
	waitFor(t, time.Minute, "the orphan handled", func() bool { return fx.count("orphan") == 1 })
	time.Sleep(time.Second)
	if fx.count("orphan") != 1 || ev.n(consumer.Deferred) == 0 {
		t.Fatalf("orphan handled %d times, deferred %d times; want 1 and at least 1", fx.count("orphan"), ev.n(consumer.Deferred))
	}
	t.Logf("handled %v after publishing (lease 2 s), deferred %d times", time.Since(start), ev.n(consumer.Deferred))
}
