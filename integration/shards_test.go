//go:build integration

package integration

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/delaykit/rabbitdelay/amqpdelay"
	"github.com/delaykit/rabbitdelay/integration/brokertest"
	"github.com/delaykit/rabbitdelay/internal/admin"
	"github.com/delaykit/rabbitdelay/internal/delayspec"
	"github.com/delaykit/rabbitdelay/ttlbuckets"
)

// shardsSpec is a small ladder (radix 8, maximum 32,767 ms: 5 levels of 7 queues; the default
// order, top-split) in three copies, with a topic target and a ready queue bound to it.
func shardsSpec(env *brokertest.Env) delayspec.Spec {
	target := env.Name("orders")
	return delayspec.Spec{Prefix: env.Prefix, Targets: delayspec.Targets{{Name: target, Type: "topic"}}, Plugin: delayspec.PluginOff,
		ReadyQueues: delayspec.ReadyQueues{{Queue: env.Name("ready"), Exchange: target, BindingKey: "#"}},
		Ladder:      ttlbuckets.Ladder{Radix: 8, Max: 32767 * time.Millisecond}, Shards: 3}
}

// lastHopQueue returns the queue a delivery was last dead-lettered from: the first entry of
// its x-death header (RabbitMQ keeps the most recent dead-lettering first, 3.10 and 4.x).
func lastHopQueue(d amqp.Delivery) string {
	deaths, _ := d.Headers["x-death"].([]any)
	if len(deaths) == 0 {
		return ""
	}
	if t, ok := deaths[0].(amqp.Table); ok {
		q, _ := t["queue"].(string)
		return q
	}
	return ""
}

// TestShardsSingleNode: with three shards of the ladder, apply declares exactly the plan (each
// copy a chain of its own), status knows the copies and passes, a Publisher with the same
// Shards sends messages through all three copies (each message stays in its copy: every
// x-death entry names a queue of one copy) and every message arrives, none early; teardown
// deletes the copies with the rest. A publisher expecting more copies than declared refuses to
// start.
func TestShardsSingleNode(t *testing.T) {
	t.Parallel()
	env := brokertest.NewEnv(t)
	m := topoNeedManagement(t, env)
	ctx := topoTestCtx(t, 3*time.Minute)
	spec := shardsSpec(env)
	p, err := admin.NewPlan(spec)
	if err != nil {
		t.Fatal(err)
	}
	conn := env.Dial(t)
	// Nodes: one connection (a single node): every copy is placed there.
	if _, err := admin.Apply(ctx, conn, p, admin.ApplyOptions{Management: m, Nodes: []*amqp.Connection{conn}}); err != nil {
		t.Fatalf("apply: %v", err)
	}
	ex, qs, bs := topoBrokerView(t, env)
	wex, wqs, wbs := topoPlanView(p)
	topoDiff(t, "exchanges", ex, wex)
	topoDiff(t, "queues", qs, wqs)
	topoDiff(t, "bindings", bs, wbs)
	if n := len(p.DelayQueues()); n != 3*(35+28+28) {
		t.Fatalf("%d delay queues, want 273 (3 copies of 35 ladder queues, 28 last-hop and 28 first-hop queues: the default order is top-split)", n)
	}

	rep, err := admin.Status(ctx, conn, p, admin.StatusOptions{Management: m})
	if err != nil {
		t.Fatalf("status: %v", err)
	}
	copies := 0
	for _, q := range rep.Queues {
		if strings.HasSuffix(q.Name, ".s1") || strings.HasSuffix(q.Name, ".s2") {
			copies++
			if !q.Exists {
				t.Errorf("status: copy %s missing", q.Name)
			}
		}
	}
	if copies != 70 {
		t.Errorf("status lists %d queues of copies 1 and 2, want 70", copies)
	}

	// Publishers read the number of copies from the spec record.
	if rec, err := delayspec.ReadRecord(ctx, env.Dial(t), spec.Prefix); err != nil || rec.Shards != 3 {
		t.Errorf("the spec record has %d copies (%v), want 3", rec.Shards, err)
	}

	pub := newPublisher(t, env, spec)
	arrivals := consumeQueue(t, env, env.Name("ready"))
	const n = 60
	target := spec.Targets[0].Name
	sent := map[string]bool{}
	for i := range n {
		delay := time.Duration(500+37*i) * time.Millisecond
		r, err := pub.Publish(ctx, target, "k", textMsg(fmt.Sprint("m", i)), delay)
		if err != nil {
			t.Fatalf("publish %d: %v", i, err)
		}
		sent[r.MessageID] = true
	}
	perCopy := map[string]int{}
	got := map[string]bool{}
	for len(got) < n {
		a := nextDelivery(t, arrivals, 5*time.Second)
		checkOnTime(t, a)
		got[a.d.MessageId] = true
		deaths, _ := a.d.Headers["x-death"].([]any)
		copyOf := map[string]bool{}
		for _, x := range deaths {
			q, _ := x.(amqp.Table)["queue"].(string)
			// A last-hop or first-hop queue belongs to the copy its name ends with.
			q = strings.TrimSuffix(strings.TrimSuffix(q, ".last"), ".first")
			c := "s0"
			if i := strings.LastIndex(q, ".s"); i > len(env.Prefix) && strings.Count(q[len(env.Prefix):], ".") == 4 {
				c = q[i+1:]
			}
			copyOf[c] = true
		}
		if len(copyOf) != 1 {
			t.Errorf("message %s went through queues of several copies: %v", a.d.MessageId, deaths)
		}
		for c := range copyOf {
			perCopy[c]++
		}
	}
	for id := range sent {
		if !got[id] {
			t.Errorf("message %s lost", id)
		}
	}
	if len(perCopy) != 3 {
		t.Errorf("messages per copy: %v; want all three copies used", perCopy)
	}
	t.Logf("messages per copy: %v", perCopy)

	// Teardown deletes the copies with the rest.
	// (A delivered message stays counted in its last queue's dead-letter state until that
	// queue has the ready queue's confirm: a busy broker takes a moment.)
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(time.Second) {
		_, err := admin.Teardown(ctx, conn, p, admin.TeardownOptions{Management: m, ReadyQueues: true})
		if err == nil {
			break
		}
		if !errors.Is(err, admin.ErrNotEmpty) || time.Now().After(deadline) {
			t.Fatalf("teardown: %v", err)
		}
	}
	ex, qs, _ = topoBrokerView(t, env)
	for _, x := range append(ex, qs...) {
		if strings.HasPrefix(x, env.Prefix+".") && !strings.HasPrefix(x, spec.Targets[0].Name+" ") { // teardown keeps targets
			t.Errorf("left after teardown: %s", x)
		}
	}
}

// startPublisher starts a Publisher for spec on url and closes it at once, for its start error.
func startPublisher(ctx context.Context, url string, spec delayspec.Spec) error {
	p, err := amqpdelay.NewPublisher(ctx, amqpdelay.Config{URL: url, Prefix: spec.Prefix})
	if err != nil {
		return err
	}
	return p.Close()
}
