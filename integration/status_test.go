//go:build integration

package integration

import (
	"errors"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/delaykit/rabbitdelay/integration/brokertest"
	"github.com/delaykit/rabbitdelay/internal/admin"
	"github.com/delaykit/rabbitdelay/internal/delayspec"
)

// TestStatusUnplannedBindingFails: a ready queue's binding key changed from order.# to
// order.* leaves the old binding in place (apply unbinds nothing); status lists it, and a
// binding added by hand from the dispatch exchange, as unplanned and fails with ErrUnhealthy.
// Once they are removed, status passes.
func TestStatusUnplannedBindingFails(t *testing.T) {
	t.Parallel()
	env := brokertest.NewEnv(t)
	m := topoNeedManagement(t, env)
	ctx := topoTestCtx(t, time.Minute)
	spec := polSpec(delayspec.Quorum)
	spec.ReadyQueues = delayspec.ReadyQueues{{Queue: "orders.ready", Exchange: "orders", BindingKey: "order.#"}}
	if _, _, err := polApply(t, env, m, spec); err != nil {
		t.Fatal(err)
	}
	spec.ReadyQueues[0].BindingKey = "order.*"
	p, _, err := polApply(t, env, m, spec)
	if err != nil {
		t.Fatal(err)
	}
	ch := env.Channel(t)
	if _, err := ch.QueueDeclare("extra", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if err := ch.QueueBind("extra", "", p.Names.Dispatch(), false, nil); err != nil {
		t.Fatal(err)
	}
	conn := env.Dial(t)
	rep, err := admin.Status(ctx, conn, p, admin.StatusOptions{Management: m})
	var got []string
	for _, b := range rep.UnplannedBindings {
		got = append(got, b.String())
	}
	want := []string{"orders -> orders.ready key=order.#", p.Names.Dispatch() + " -> extra"}
	if !errors.Is(err, admin.ErrUnhealthy) || errors.Is(err, admin.ErrIncomplete) || len(got) != 2 ||
		!slicesHaveAll(got, want) || !strings.Contains(err.Error(), "not in the plan") {
		t.Fatalf("status with an old ready-queue binding and a hand-made one: %v, unplanned %q; want ErrUnhealthy listing %q", err, got, want)
	}
	// Unbind both (RabbitMQ's management API: rabbitmqctl has no unbind).
	vh := url.PathEscape(env.VHost)
	var bs []struct {
		Source, Destination string
		RoutingKey          string `json:"routing_key"`
		PropertiesKey       string `json:"properties_key"`
		DestinationType     string `json:"destination_type"`
	}
	topoMgmtJSON(t, env, "api/bindings/"+vh, &bs)
	for _, b := range bs {
		if (b.Source == "orders" && b.Destination == "orders.ready" && b.RoutingKey == "order.#") || b.Destination == "extra" && b.Source != "" {
			// properties_key comes URL-encoded already ("order.%23").
			path := "api/bindings/" + vh + "/e/" + url.PathEscape(b.Source) + "/q/" + url.PathEscape(b.Destination) + "/" + b.PropertiesKey
			if err := env.Broker.Management("DELETE", path, nil, nil); err != nil {
				t.Fatal(err)
			}
		}
	}
	if rep, err := admin.Status(ctx, conn, p, admin.StatusOptions{Management: m}); err != nil || len(rep.UnplannedBindings) != 0 {
		t.Errorf("status after unbinding: %v, unplanned %v", err, rep.UnplannedBindings)
	}
}

// TestStatusMissingPolicyFails: a topology policy deleted by hand (or never set, when apply ran
// without the management API) is reported missing (ErrIncomplete), and its absence on the
// targets as a policy problem (ErrPolicy: due messages a target routes nowhere would stall).
func TestStatusMissingPolicyFails(t *testing.T) {
	t.Parallel()
	env := brokertest.NewEnv(t)
	m := topoNeedManagement(t, env)
	p, _, err := polApply(t, env, m, polSpec(delayspec.Quorum))
	if err != nil {
		t.Fatal(err)
	}
	polClear(t, env, "policies", p.Names.TargetsPolicy())
	rep, err := admin.Status(topoTestCtx(t, time.Minute), env.Dial(t), p, admin.StatusOptions{Management: m})
	if !errors.Is(err, admin.ErrIncomplete) || !errors.Is(err, admin.ErrPolicy) || len(admin.Failing(rep.PolicyProblems)) != 1 ||
		rep.PolicyProblems[0].Object != "orders" || rep.PolicyProblems[0].Breaks != admin.BreaksStalls {
		t.Errorf("status without the targets policy: %v, problems %v", err, rep.PolicyProblems)
	}
}

func slicesHaveAll(got, want []string) bool {
	for _, w := range want {
		found := false
		for _, g := range got {
			found = found || g == w
		}
		if !found {
			return false
		}
	}
	return true
}
