//go:build integration

package integration

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/delaykit/rabbitdelay/amqpdelay"
	"github.com/delaykit/rabbitdelay/integration/brokertest"
	"github.com/delaykit/rabbitdelay/internal/delayspec"
	"github.com/delaykit/rabbitdelay/internal/revlog"
	"github.com/delaykit/rabbitdelay/revoke"
)

// TestPublishIntoForeignTopologyRefused: two topologies, prefixes A and B, in one vhost. A's
// Publisher refuses direct publishes into B's objects as it refuses them into its own: B's entry
// exchanges (a fanout straight into a delay queue, where 1,100 headerless messages stalled B's
// delays), its level, last-hop, bucket, dispatch and retry exchanges, and, through the default
// exchange, B's revocation stream (a forged revocation dropped B's message "victim" that nobody
// revoked). An exchange whose name only looks like another prefix's object, with no topology of
// that prefix in the vhost, still takes publishes. Afterwards B's own delayed message arrives
// and B's reader finds "victim" not revoked.
func TestPublishIntoForeignTopologyRefused(t *testing.T) {
	t.Parallel()
	env, envB, _, specB, pa := twoPrefixes(t, true)
	targetB := specB.Targets[0].Name
	qb := envB.Name("ready")
	declareReadyQueue(t, envB, qb, targetB, "#")
	got := consumeQueue(t, envB, qb)
	pb := newPublisher(t, envB, specB)
	ctx := pubCtx(t)
	nb := specB.Names()
	revocation := amqp.Publishing{Type: revlog.TypeRevocation, Body: revlog.Encode(nil, []revlog.Entry{{ID: "victim"}}),
		Headers: amqp.Table{revlog.AtHeader: time.Now().UnixMilli()}}
	for _, c := range []struct {
		name, exchange, key string
		msg                 amqp.Publishing
	}{
		{"entry exchange", nb.LadderEntryExchange(nb.LadderQueue(0, 1)), "k", textMsg("junk")},
		{"last-hop queue's entry exchange", nb.LadderEntryExchange(nb.LadderLastHopQueueShard(1, 2, 0)), "k", textMsg("junk")},
		{"level exchange", nb.LadderExchange(1), "k", textMsg("junk")},
		{"last-hop exchange", nb.LadderLastHopExchangeShard(1, 0), "k", textMsg("junk")},
		{"bucket exchange", nb.BucketExchange(), "k", textMsg("junk")},
		{"dispatch exchange", nb.Dispatch(), "k", amqp.Publishing{Body: []byte("junk"), Headers: amqp.Table{"rabbitdelay-target": targetB}}},
		{"retry exchange", nb.Retry(), qb, textMsg("junk")},
		{"revocation stream", "", nb.Revoked(), revocation},
		{"revocation stream by CC", "", "no-such-queue", amqp.Publishing{Type: revocation.Type, Body: revocation.Body,
			Headers: amqp.Table{revlog.AtHeader: time.Now().UnixMilli(), "CC": []any{nb.Revoked()}}}},
	} {
		_, err := pa.Publish(ctx, c.exchange, c.key, c.msg, 0)
		if !errors.Is(err, amqpdelay.ErrInvalidInput) {
			t.Errorf("%s: A's direct publish into B's %q (key %q): %v, want ErrInvalidInput", c.name, c.exchange, c.key, err)
		}
	}
	// A name of another prefix's shape, with no topology of that prefix: an exchange of the user's.
	lookalike := env.Name("shop") + ".dispatch"
	ch := env.Channel(t)
	if err := ch.ExchangeDeclare(lookalike, "fanout", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if err := ch.QueueBind(qb, "", lookalike, false, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := pa.Publish(ctx, lookalike, "k", textMsg("to a look-alike"), 0); err != nil {
		t.Errorf("direct publish to %q (no topology of prefix %q): %v", lookalike, env.Name("shop"), err)
	}
	if a := nextDelivery(t, got, 30*time.Second); string(a.d.Body) != "to a look-alike" {
		t.Errorf("got %q, want the look-alike exchange's message", a.d.Body)
	}

	revs, err := revoke.New(ctx, amqpdelay.Config{URL: envB.URL, Prefix: specB.Prefix}, revoke.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer revs.Close()
	if _, err := pb.Publish(ctx, targetB, "k", amqp.Publishing{MessageId: "victim", Body: []byte("B's own")}, 17*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	a := nextDelivery(t, got, 30*time.Second)
	if a.d.MessageId != "victim" {
		t.Fatalf("got %q (id %q), want B's own delayed message", a.d.Body, a.d.MessageId)
	}
	if gone, err := revs.Revoked(ctx, a.d); err != nil || gone {
		t.Errorf("B's reader: Revoked(victim) = %v, %v, want false: nobody revoked it", gone, err)
	}
}

// TestPublishDirectReplyToRefused: RabbitMQ's default exchange decodes a routing key (or CC key)
// starting with amq.rabbitmq.reply-to. as a direct reply-to address and closes the whole
// connection (541 INTERNAL_ERROR) when it is not one, which failed the other publishes in flight.
// Each such key is refused with ErrInvalidInput, nothing sent, beside a canary of direct and
// delayed publishes on the same Publisher that loses nothing; the key amq.rabbitmq.reply-to
// alone (no address) is routed as any other name (returned: no such queue).
func TestPublishDirectReplyToRefused(t *testing.T) {
	t.Parallel()
	f := newDirectFixture(t)
	var seq atomic.Int64
	c := startCanary(4, func() error {
		_, err := f.p.Publish(f.ctx, f.target, "k", textMsg("canary"), time.Duration(seq.Add(1)%2)*50*time.Millisecond)
		return err
	})
	for _, o := range []struct {
		key string
		h   amqp.Table
	}{
		{"amq.rabbitmq.reply-to.AAAA.x", nil},
		{"amq.rabbitmq.reply-to.g2gA.x", nil},
		{"amq.rabbitmq.reply-to.g1h2AA5yZXBseUA2ODk3NjQ4NwAAC8gAAAAAX0l1Lw==.ABCDEFGH", nil},
		{"amq.rabbitmq.reply-to.garbage", nil},
		{"no-such-queue", amqp.Table{"CC": []any{"amq.rabbitmq.reply-to.AAAA.x"}}},
		{"no-such-queue", amqp.Table{"BCC": []any{"amq.rabbitmq.reply-to.g2gA.x"}}},
	} {
		ctx, cancel := context.WithTimeout(f.ctx, 15*time.Second)
		_, err := f.p.Publish(ctx, "", o.key, amqp.Publishing{Body: []byte("odd"), Headers: o.h}, 0)
		cancel()
		if !errors.Is(err, amqpdelay.ErrInvalidInput) {
			t.Errorf("key %q, headers %v: %v, want ErrInvalidInput", o.key, o.h, err)
		}
	}
	if _, err := f.p.Publish(f.ctx, "", "amq.rabbitmq.reply-to", textMsg("odd"), 0); !errors.Is(err, amqpdelay.ErrUnroutable) {
		t.Errorf("key amq.rabbitmq.reply-to: %v, want ErrUnroutable", err)
	}
	time.Sleep(200 * time.Millisecond) // let the canary publish beside the refusals' aftermath
	c.check(t, fmt.Sprintf("direct reply-to keys"))
}

// twoPrefixes declares the topologies of prefixes A (env's) and A-b (with a 3 s bucket; only
// when declareB) in one vhost, and returns their specs and A's Publisher.
func twoPrefixes(t *testing.T, declareB bool) (env, envB *brokertest.Env, specA, specB delayspec.Spec, pa *amqpdelay.Publisher) {
	t.Helper()
	env = brokertest.NewEnv(t)
	specA = testSpec(env, delayspec.Target{Name: env.Name("a-orders"), Type: "topic"})
	declareTopology(t, env, specA)
	b := *env
	b.Prefix = env.Prefix + "-b"
	envB = &b
	specB = testSpec(envB, delayspec.Target{Name: envB.Name("b-orders"), Type: "topic"})
	specB.Buckets = delayspec.Delays{3 * time.Second}
	if declareB {
		declareTopology(t, envB, specB)
	}
	return env, envB, specA, specB, newPublisher(t, env, specA)
}

// TestPublishForeignTopologyDeclaredLater: A's Publisher learns that prefix B has no topology
// (a direct publish to a name of B's shape), then B's topology is declared. A's Publisher refuses
// direct publishes into it within a while (the answer is kept for 10 s), not only after its next
// reconnection.
func TestPublishForeignTopologyDeclaredLater(t *testing.T) {
	t.Parallel()
	_, envB, _, specB, pa := twoPrefixes(t, false)
	ctx := pubCtx(t)
	nb := specB.Names()
	if _, err := pa.Publish(ctx, "", nb.Revoked(), textMsg("before B"), 0); !errors.Is(err, amqpdelay.ErrUnroutable) {
		t.Fatalf("direct publish to %q before B exists: %v, want ErrUnroutable", nb.Revoked(), err)
	}
	declareTopology(t, envB, specB)
	waitFor(t, time.Minute, "A refuses a direct publish into B's dispatch exchange", func() bool {
		_, err := pa.Publish(ctx, nb.Dispatch(), "k", textMsg("junk"), 0)
		return errors.Is(err, amqpdelay.ErrInvalidInput)
	})
}

// TestPublishUserQueuesNamedLikeExchanges: queues and exchanges are named apart, so a queue of
// the user's named like one of a topology's exchanges (the retry, dispatch and bucket exchanges
// of another prefix's topology or of the Publisher's own) takes direct publishes through the
// default exchange.
func TestPublishUserQueuesNamedLikeExchanges(t *testing.T) {
	t.Parallel()
	env, _, specA, specB, pa := twoPrefixes(t, true)
	ctx := pubCtx(t)
	na, nb := specA.Names(), specB.Names()
	ch := env.Channel(t)
	for _, q := range []string{nb.Retry(), nb.Dispatch(), nb.BucketExchange(), na.Retry(), na.Dispatch()} {
		if _, err := ch.QueueDeclare(q, true, false, false, false, nil); err != nil {
			t.Fatal(err)
		}
		if _, err := pa.Publish(ctx, "", q, textMsg("to a queue of the user's"), 0); err != nil {
			t.Errorf("direct publish to the user's queue %q: %v", q, err)
		} else if n := queueLen(t, ch, q); n != 1 {
			t.Errorf("queue %q holds %d messages, want 1", q, n)
		}
	}
}
