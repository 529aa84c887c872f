//go:build integration

package integration

import (
	"context"
	"errors"
	"regexp"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

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
	p := newPublisher(t, env, spec, amqpdelay.Config{ConnectionName: name, OnReconnect: func(e amqpdelay.ReconnectEvent) {
		select {
		case events <- e:
		default:
		}
	}})
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

// TestPublisherUnreadableRecord: a spec record the Publisher cannot use gives an error that
// names the stream and the fix, and no Publisher: a record that is not a spec (something else
// published to the stream) says to run apply (ErrTopologyMissing); a user who may not read the
// stream is told to grant read permission on it.
func TestPublisherUnreadableRecord(t *testing.T) {
	t.Parallel()
	env := brokertest.NewEnv(t)
	needUsers(t, env)
	target := env.Name("orders")
	spec := testSpec(env, delayspec.Target{Name: target, Type: "topic"})
	declareTopology(t, env, spec)
	stream := spec.Names().SpecStream()

	noRead := brokerUserPerm(t, env, env.Name("noread"), ".*", "^"+regexp.QuoteMeta(target)+"$")
	_, err := amqpdelay.NewPublisher(pubCtx(t), amqpdelay.Config{URL: noRead, Prefix: spec.Prefix})
	if err == nil || !strings.Contains(err.Error(), stream) || !strings.Contains(err.Error(), "read permission") || strings.Contains(err.Error(), "pw@") {
		t.Errorf("a user who may not read the spec stream: %v; want an error naming %s and read permission", err, stream)
	}

	ch := env.Channel(t)
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	dc, err := ch.PublishWithDeferredConfirmWithContext(pubCtx(t), "", stream, true, false, amqp.Publishing{Body: []byte("not a spec")})
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := dc.WaitContext(pubCtx(t)); !ok || err != nil {
		t.Fatalf("the broker did not confirm the foreign record: %v %v", ok, err)
	}
	_, err = amqpdelay.NewPublisher(pubCtx(t), amqpdelay.Config{URL: env.URL, Prefix: spec.Prefix})
	if !errors.Is(err, amqpdelay.ErrTopologyMissing) || !strings.Contains(err.Error(), "not a spec record") || !strings.Contains(err.Error(), "rabbitdelay apply") {
		t.Errorf("a foreign last record: %v; want ErrTopologyMissing saying it is not a spec record and to run apply", err)
	}
	declareTopology(t, env, spec) // apply writes the record again
	newPublisher(t, env, spec)
}
