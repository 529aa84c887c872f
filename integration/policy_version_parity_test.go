//go:build integration

package integration

import (
	"errors"
	"regexp"
	"slices"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/delaykit/rabbitdelay/integration/brokertest"
	"github.com/delaykit/rabbitdelay/internal/admin"
	"github.com/delaykit/rabbitdelay/internal/delayspec"
)

// The same fault gets the same answer on every version: each test here makes a policy do what
// it does on the broker under test (3.10 and 4.3 in make test), then checks that
// PolicyProblems reports it exactly where it happened.

// polParityFind returns the problem about key on object, or nil.
func polParityFind(probs []admin.PolicyProblem, object, key string) *admin.PolicyProblem {
	for i := range probs {
		if probs[i].Object == object && probs[i].Key == key {
			return &probs[i]
		}
	}
	return nil
}

// TestPolicyParityExpiresNamedAfterDelete: an expires policy deletes a delay queue with its
// messages on every version, but not at the same moment: RabbitMQ 4.3.6 counts the queue's
// idle time from its last use, before the policy existed, and deleted idle quorum queues
// within seconds of the policy being set; 3.10.8 counted from the moment the policy applied.
// On both versions status then fails naming the queue missing, and rabbitdelay apply, which
// declares it again, fails naming the operator policy that deletes it (read while the queue
// exists: apply declares a queue deleted meanwhile again and reads it at once).
func TestPolicyParityExpiresNamedAfterDelete(t *testing.T) {
	t.Parallel()
	env := brokertest.NewEnv(t)
	m := topoNeedManagement(t, env)
	p, _, err := polApply(t, env, m, polSpec(delayspec.Quorum))
	if err != nil {
		t.Fatalf("apply: %v", err)
	}
	bucket := p.Names.BucketQueue(3000)
	time.Sleep(2 * time.Second) // the queue is idle longer than the policy's expires
	if err := polSet(env, "operator-policies", "gc", "^"+regexp.QuoteMeta(bucket)+"$", "queues", 0, map[string]any{"expires": 1000}); err != nil {
		t.Fatal(err)
	}
	// Deleted on both versions (on 3.10 a second after the policy applied); bounded wait.
	waitFor(t, time.Minute, bucket+" deleted by the expires policy", func() bool {
		_, err := env.Channel(t).QueueDeclarePassive(bucket, true, false, false, false, nil)
		return err != nil
	})
	rep, err := admin.Status(topoTestCtx(t, time.Minute), env.Dial(t), p, admin.StatusOptions{Management: m})
	if !errors.Is(err, admin.ErrIncomplete) || rep == nil || !slices.Contains(rep.Missing, "queue "+bucket) {
		t.Errorf("RabbitMQ %d: status = %v; want it to fail naming %s missing", polMajor(t, env), err, bucket)
	}
	_, arep, err := polApply(t, env, m, polSpec(delayspec.Quorum))
	var pp *admin.PolicyProblem
	if arep != nil {
		pp = polParityFind(arep.PolicyProblems, bucket, "expires")
	}
	if !errors.Is(err, admin.ErrPolicy) || pp == nil {
		t.Fatalf("RabbitMQ %d: apply = %v, problems %v; want ErrPolicy naming expires on %s", polMajor(t, env), err, arep, bucket)
	}
	if pp.Policy != "gc" || !pp.Operator || pp.Breaks != admin.BreaksDeletes || pp.Warning {
		t.Errorf("RabbitMQ %d: %+v; want operator policy gc, deletes, an error", polMajor(t, env), *pp)
	}
	t.Logf("RabbitMQ %d: %s", polMajor(t, env), pp)
}

// TestPolicyParityParkingShadowedLimit: a policy above the topology's priority on the parking
// queue (here one setting only queue-leader-locator) replaces the delay-queue policy there,
// and with it delivery-limit -1. RabbitMQ 4.x then gives the quorum parking queue its default
// delivery limit of 20, so a parked message its reader rejects with requeue 21 times is
// dropped; 3.x has no default and keeps it. The drop is reported (a warning naming the policy)
// exactly where it happens: on 4.x, not on 3.x. Before, it was reported on neither.
func TestPolicyParityParkingShadowedLimit(t *testing.T) {
	t.Parallel()
	env := brokertest.NewEnv(t)
	m := topoNeedManagement(t, env)
	p, _, err := polApply(t, env, m, polSpec(delayspec.Quorum))
	if err != nil {
		t.Fatalf("apply: %v", err)
	}
	parking := p.Names.Parking()
	if err := polSet(env, "policies", "shadow", "^"+regexp.QuoteMeta(parking)+"$", "queues", delayspec.DefaultPolicyPriority+1,
		map[string]any{"queue-leader-locator": "client-local"}); err != nil {
		t.Fatal(err)
	}
	// RabbitMQ applies a policy change to a queue in the background: wait until the parking
	// queue runs under "shadow" (what the management API reports with its statistics).
	waitFor(t, 30*time.Second, parking+" under policy shadow", func() bool { return queuePolicy(t, env, parking) == "shadow" })
	ch := env.Channel(t)
	if err := ch.Publish("", parking, false, false, amqp.Publishing{MessageId: "parked", DeliveryMode: amqp.Persistent}); err != nil {
		t.Fatal(err)
	}
	vanished := false
	for i := 0; i < 25 && !vanished; i++ {
		deadline := time.Now().Add(5 * time.Second)
		for {
			d, ok, err := ch.Get(parking, false)
			if err != nil {
				t.Fatal(err)
			}
			if ok {
				if err := d.Reject(true); err != nil { // a failed return: counted on every version
					t.Fatal(err)
				}
				break
			}
			if time.Now().After(deadline) {
				vanished = true
				t.Logf("the parked message is gone after %d rejects", i)
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	probs, err := m.PolicyProblems(topoTestCtx(t, 20*time.Second), p)
	if err != nil {
		t.Fatal(err)
	}
	pp := polParityFind(probs, parking, "delivery-limit")
	major := polMajor(t, env)
	if vanished != (major >= 4) {
		t.Errorf("RabbitMQ %d: parked message dropped after 25 rejects: %v; want %v", major, vanished, major >= 4)
	}
	if reported := pp != nil; reported != vanished {
		t.Errorf("RabbitMQ %d: parked message dropped: %v, but the delivery limit reported: %v (%v)", major, vanished, reported, pp)
	} else if pp != nil {
		if pp.Policy != "shadow" || pp.Breaks != admin.BreaksDrops || !pp.Warning {
			t.Errorf("RabbitMQ %d: %+v; want a drops warning naming policy shadow", major, *pp)
		}
		t.Logf("RabbitMQ %d: %s", major, pp)
	}
}
