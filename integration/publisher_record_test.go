//go:build integration

package integration

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/delaykit/rabbitdelay/amqpdelay"
	"github.com/delaykit/rabbitdelay/integration/brokertest"
	"github.com/delaykit/rabbitdelay/internal/delayspec"
)

// TestPublisherRefusesAReappliedTopology: a Publisher keeps the topology it read from the spec
// record at start. When `rabbitdelay apply` records another specification under its prefix and
// the Publisher's connection drops, it does not go on with the topology it started with: every
// reconnect fails naming the change, so nothing is published; a new Publisher reads the new
// record and publishes by it.
func TestPublisherRefusesAReappliedTopology(t *testing.T) {
	t.Parallel()
	env := brokertest.NewEnv(t)
	if env.Broker.ManagementURL == "" {
		if brokertest.InCI() {
			t.Fatal("needs the management API to close the Publisher's connection (AMQP_MANAGEMENT_URL)")
		}
		t.Skip("needs the management API to close the Publisher's connection (AMQP_MANAGEMENT_URL)")
	}
	target := env.Name("orders")
	spec := testSpec(env, delayspec.Target{Name: target, Type: "topic"})
	spec.Buckets = delayspec.Delays{5 * time.Second}
	declareTopology(t, env, spec)
	events := make(chan amqpdelay.ReconnectEvent, 256)
	name := env.Name("publisher")
	p := newPublisher(t, env, spec, amqpdelay.WithConnectionName(name), amqpdelay.WithReconnectHandler(func(e amqpdelay.ReconnectEvent) {
		select {
		case events <- e:
		default:
		}
	}))
	if r, err := p.Publish(pubCtx(t), target, "k", textMsg("before"), 2*time.Second); err != nil || r.Path != amqpdelay.PathLadder {
		t.Fatalf("2 s before the new apply: %v, path %v; want the ladder", err, r.Path)
	}

	other := spec
	other.Buckets = delayspec.Delays{2 * time.Second, 5 * time.Second}
	declareTopology(t, env, other)
	closeConnection(t, env, name)
	deadline := time.After(2 * time.Minute)
	for refused := false; !refused; {
		select {
		case e := <-events:
			if e.Kind == amqpdelay.Reconnected {
				t.Fatal("the Publisher reconnected with the topology it started with, though apply recorded another since")
			}
			refused = e.Kind == amqpdelay.ReconnectFailed && e.Err != nil && strings.Contains(e.Err.Error(), "applied again with another topology")
		case <-deadline:
			t.Fatal("no reconnect attempt naming the new apply within 2 minutes")
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if _, err := p.Publish(ctx, target, "k", textMsg("after"), 2*time.Second); err == nil {
		t.Fatal("a publish succeeded on the Publisher whose topology was applied again")
	}

	q := newPublisher(t, env, delayspec.Spec{Prefix: spec.Prefix})
	if r, err := q.Publish(pubCtx(t), target, "k", textMsg("new"), 2*time.Second); err != nil || r.Path != amqpdelay.PathBucket {
		t.Errorf("a new Publisher, 2 s: %v, path %v; want the bucket the new apply added", err, r.Path)
	}
}
