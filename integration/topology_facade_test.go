//go:build integration

package integration

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/delaykit/rabbitdelay/amqpdelay"
	"github.com/delaykit/rabbitdelay/integration/brokertest"
	"github.com/delaykit/rabbitdelay/internal/delayspec"
	"github.com/delaykit/rabbitdelay/topology"
)

// TestTopologyApplyCheck: topology.Apply declares what `rabbitdelay apply` declares, after which
// topology.Check reports nil and a Publisher delivers a delayed message; with a ladder queue
// deleted, Check fails naming it; a second Apply declares it again and Check is clean. Bad
// input (no management URL, an invalid spec) fails before anything is declared.
func TestTopologyApplyCheck(t *testing.T) {
	t.Parallel()
	env := brokertest.NewEnv(t)
	topoNeedManagement(t, env)
	target := env.Name("t")
	spec := testSpec(env, delayspec.Target{Name: target, Type: "topic"})
	conn := env.Dial(t)
	ctx := topoTestCtx(t, 3*time.Minute)
	mgmt := env.Broker.ManagementURL

	if err := topology.Apply(ctx, conn, spec, ""); err == nil || !strings.Contains(err.Error(), "managementURL") {
		t.Fatalf("Apply without a management URL: %v, want an error naming managementURL", err)
	}
	bad := spec
	bad.Ladder.Radix = 3
	if err := topology.Apply(ctx, conn, bad, mgmt); !errors.Is(err, delayspec.ErrInvalidSpec) {
		t.Fatalf("Apply of radix 3: %v, want ErrInvalidSpec", err)
	}
	if err := topology.Check(ctx, conn, spec, mgmt); err == nil {
		t.Fatal("Check before Apply: nil, want the missing objects")
	}

	if err := topology.Apply(ctx, conn, spec, mgmt); err != nil {
		t.Fatalf("Apply: %v", err)
	}
	if err := topology.Check(ctx, conn, spec, mgmt); err != nil {
		t.Fatalf("Check after Apply: %v", err)
	}
	ready := env.Name("ready")
	declareReadyQueue(t, env, ready, target, "#")
	got := consumeQueue(t, env, ready)
	mc, err := topology.NewManagement(mgmt, env.VHost)
	if err != nil {
		t.Fatal(err)
	}
	pub := newPublisher(t, env, spec, amqpdelay.Config{Management: mc}) // its checks pass on the applied topology
	if mc, err := topology.NewManagement("http://u:secret@[::1", env.VHost); err == nil || mc != nil || strings.Contains(err.Error(), "secret") {
		t.Errorf("NewManagement of a bad URL: %v, %v; want nil and an error without the password", mc, err)
	}
	if _, err := pub.Publish(pubCtx(t), target, "k", textMsg("via topology.Apply"), 300*time.Millisecond); err != nil {
		t.Fatalf("publish: %v", err)
	}
	select {
	case a := <-got:
		if string(a.d.Body) != "via topology.Apply" {
			t.Fatalf("got %q", a.d.Body)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the delayed message did not arrive within 30 s")
	}

	queue := delayspec.Names{Prefix: spec.Prefix}.LadderQueue(0, 1)
	if _, err := env.Channel(t).QueueDelete(queue, false, false, false); err != nil {
		t.Fatalf("delete %s: %v", queue, err)
	}
	if err := topology.Check(ctx, conn, spec, mgmt); err == nil || !strings.Contains(err.Error(), queue) {
		t.Fatalf("Check with %s deleted: %v, want an error naming it", queue, err)
	}
	if err := topology.Apply(ctx, conn, spec, mgmt); err != nil {
		t.Fatalf("second Apply: %v", err)
	}
	if err := topology.Check(ctx, conn, spec, mgmt); err != nil {
		t.Fatalf("Check after the second Apply: %v", err)
	}
}
