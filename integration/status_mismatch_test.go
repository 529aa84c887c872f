//go:build integration

package integration

import (
	"errors"
	"net/url"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/delaykit/rabbitdelay/integration/brokertest"
	"github.com/delaykit/rabbitdelay/internal/admin"
	"github.com/delaykit/rabbitdelay/internal/delayspec"
)

// TestStatusMismatchedObjects: an exchange or queue of the topology deleted and declared again
// with another type, flag or argument (and bound again as planned, so nothing is missing) passes
// the passive declares, but status with the management API reports the property that differs
// and fails with ErrUnhealthy; once the object is deleted and apply has run again, status passes.
// Cases: a ladder entry exchange declared again as direct, another as internal, a delay queue with
// another x-message-ttl, the parking queue as classic instead of quorum, and the parking queue
// exclusive to another connection (which a passive declare answers with 405 RESOURCE_LOCKED).
func TestStatusMismatchedObjects(t *testing.T) {
	t.Parallel()
	env := brokertest.NewEnv(t)
	m := topoNeedManagement(t, env)
	ctx := topoTestCtx(t, 3*time.Minute)
	p, _, err := polApply(t, env, m, polSpec(delayspec.Quorum))
	if err != nil {
		t.Fatal(err)
	}
	conn := env.Dial(t)
	if rep, err := admin.Status(ctx, conn, p, admin.StatusOptions{Management: m}); err != nil || len(rep.Mismatched) != 0 {
		t.Fatalf("status after apply: %v, mismatched %v", err, rep.Mismatched)
	}
	var delay, entries []string // a ladder queue; two entry exchanges (of other ladder queues)
	for _, q := range p.DelayQueues() {
		if q.Role != admin.RoleLadder {
			continue
		}
		if delay == nil {
			delay = []string{q.Name}
		} else if len(entries) < 2 {
			entries = append(entries, p.Names.LadderEntryExchange(q.Name))
		}
	}
	if len(entries) < 2 {
		t.Fatalf("the plan has too few ladder queues: %d entry exchanges", len(entries))
	}
	dq, _ := p.Queue(delay[0])
	parking := p.Names.Parking()
	other := env.Dial(t) // holds the exclusive queue
	otherCh, err := other.Channel()
	if err != nil {
		t.Fatal(err)
	}

	tests := []struct {
		name     string
		kind     admin.Kind
		object   string
		property string
		existing string
		redo     func(ch *amqp.Channel) error // declares the object again, otherwise than planned
	}{
		{"entry exchange as direct", admin.KindExchange, entries[0], "type", "direct", func(ch *amqp.Channel) error {
			return ch.ExchangeDeclare(entries[0], amqp.ExchangeDirect, true, false, false, false, nil)
		}},
		{"exchange internal", admin.KindExchange, entries[1], "internal", "true", func(ch *amqp.Channel) error {
			return ch.ExchangeDeclare(entries[1], amqp.ExchangeFanout, true, false, true, false, nil)
		}},
		{"delay queue with another TTL", admin.KindQueue, dq.Name, "x-message-ttl", "4321", func(ch *amqp.Channel) error {
			args := amqp.Table{}
			for k, v := range dq.Args {
				args[k] = v
			}
			args["x-message-ttl"] = int64(4321)
			_, err := ch.QueueDeclare(dq.Name, true, false, false, false, args)
			return err
		}},
		{"parking queue classic", admin.KindQueue, parking, "type", "classic", func(ch *amqp.Channel) error {
			_, err := ch.QueueDeclare(parking, true, false, false, false, amqp.Table{"x-queue-type": "classic"})
			return err
		}},
		{"parking queue exclusive", admin.KindQueue, parking, "exclusive", "true", func(*amqp.Channel) error {
			_, err := otherCh.QueueDeclare(parking, false, false, true, false, nil)
			return err
		}},
	}
	for _, tt := range tests {
		ch := env.Channel(t)
		remove := func() {
			t.Helper()
			var err error
			if tt.kind == admin.KindExchange {
				err = ch.ExchangeDelete(tt.object, false, false)
			} else {
				_, err = ch.QueueDelete(tt.object, false, false, false)
			}
			if err != nil {
				t.Fatalf("%s: delete %s %s: %v", tt.name, tt.kind, tt.object, err)
			}
		}
		remove()
		if err := tt.redo(ch); err != nil {
			t.Fatalf("%s: declare again: %v", tt.name, err)
		}
		// Bind it again as planned, so that only the property differs.
		bindCh := ch
		if tt.property == "exclusive" {
			bindCh = otherCh
		}
		for _, b := range p.Bindings {
			var err error
			switch {
			case b.DestinationType == admin.DestQueue && (b.Destination == tt.object || b.Source == tt.object):
				err = bindCh.QueueBind(b.Destination, b.RoutingKey, b.Source, false, b.Args)
			case b.DestinationType == admin.DestExchange && (b.Destination == tt.object || b.Source == tt.object):
				err = bindCh.ExchangeBind(b.Destination, b.RoutingKey, b.Source, false, b.Args)
			}
			if err != nil {
				t.Fatalf("%s: bind %s again: %v", tt.name, b, err)
			}
		}

		rep, err := admin.Status(ctx, conn, p, admin.StatusOptions{Management: m})
		var found *admin.Mismatch
		for i, mm := range rep.Mismatched {
			if mm.Kind == tt.kind && mm.Name == tt.object && mm.Property == tt.property {
				found = &rep.Mismatched[i]
			}
		}
		if !errors.Is(err, admin.ErrUnhealthy) || errors.Is(err, admin.ErrIncomplete) || found == nil || found.Existing != tt.existing ||
			!strings.Contains(err.Error(), tt.object) || !strings.Contains(err.Error(), "rabbitdelay apply") {
			t.Fatalf("%s: status = %v, mismatched %v; want ErrUnhealthy (and nothing missing) naming %s %s, %s = %s",
				tt.name, err, rep.Mismatched, tt.kind, tt.object, tt.property, tt.existing)
		}
		t.Logf("%s: %v", tt.name, rep.Mismatched)
		if tt.kind == admin.KindQueue && !strings.Contains(err.Error(), "deletes the messages it holds") {
			t.Errorf("%s: the error does not say that deleting the queue deletes its messages: %v", tt.name, err)
		}
		if tt.property == "exclusive" {
			// AMQP alone sees it too: a passive declare of another connection's exclusive
			// queue is refused with 405 RESOURCE_LOCKED.
			rep, err := admin.Status(ctx, conn, p, admin.StatusOptions{})
			want := []admin.Mismatch{{Kind: admin.KindQueue, Name: parking, Property: "exclusive", Existing: "true", Wanted: "false"}}
			if !errors.Is(err, admin.ErrUnhealthy) || len(rep.Mismatched) != 1 || rep.Mismatched[0] != want[0] {
				t.Fatalf("%s: status without the management API = %v, mismatched %v; want ErrUnhealthy and %v", tt.name, err, rep.Mismatched, want)
			}
		}
		if tt.property != "exclusive" { // apply's own check: a 406 on declaring it again
			if _, err := mismatchApply(t, env, m, p); !errors.Is(err, admin.ErrConflict) {
				t.Errorf("%s: apply over the mismatched object = %v, want ErrConflict", tt.name, err)
			}
		}

		// The fix: delete it, apply again.
		if tt.property == "exclusive" {
			if err := other.Close(); err != nil { // an exclusive queue goes with its connection
				t.Fatal(err)
			}
		} else {
			remove()
		}
		if _, err := mismatchApply(t, env, m, p); err != nil {
			t.Fatalf("%s: apply after deleting: %v", tt.name, err)
		}
		if rep, err := admin.Status(ctx, conn, p, admin.StatusOptions{Management: m}); err != nil || len(rep.Mismatched) != 0 {
			t.Fatalf("%s: status after deleting and applying: %v, mismatched %v", tt.name, err, rep.Mismatched)
		}
		_ = ch.Close()
	}
}

// mismatchApply applies p in env's vhost with the management API.
func mismatchApply(t *testing.T, env *brokertest.Env, m *admin.Management, p *admin.Plan) (*admin.Report, error) {
	t.Helper()
	return admin.Apply(topoTestCtx(t, 2*time.Minute), env.Dial(t), p, admin.ApplyOptions{Management: m})
}

// TestApplyClassicInQuorumDefaultVhost: a classic topology applied to a vhost whose default
// queue type is quorum (RabbitMQ 4.x; 3.10 has no such default) gets classic queues, not quorum
// queues without the delay queues' dead-letter settings, and Status finds nothing to report.
func TestApplyClassicInQuorumDefaultVhost(t *testing.T) {
	t.Parallel()
	env := brokertest.NewEnv(t)
	m := topoNeedManagement(t, env)
	if err := env.Broker.Management("PUT", "api/vhosts/"+url.PathEscape(env.VHost),
		map[string]any{"default_queue_type": "quorum"}, nil); err != nil {
		t.Fatalf("set the vhost's default queue type: %v", err)
	}
	p, _, err := polApply(t, env, m, polSpec(delayspec.Classic))
	if err != nil {
		t.Fatalf("apply: %v", err)
	}
	for _, name := range []string{p.Names.Parking(), p.Names.BucketQueue(3000), p.Names.LadderQueue(0, 1), "orders.ready"} {
		var q struct{ Type string }
		topoMgmtJSON(t, env, "api/queues/"+url.PathEscape(env.VHost)+"/"+url.PathEscape(name), &q)
		if q.Type != "classic" {
			t.Errorf("queue %s is %s, want classic", name, q.Type)
		}
	}
	ctx := topoTestCtx(t, time.Minute)
	if rep, err := admin.Status(ctx, env.Dial(t), p, admin.StatusOptions{Management: m}); err != nil {
		t.Errorf("status: %v (mismatched %v)", err, rep.Mismatched)
	}
}
