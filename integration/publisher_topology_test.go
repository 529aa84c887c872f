//go:build integration

package integration

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/delaykit/rabbitdelay/amqpdelay"
	"github.com/delaykit/rabbitdelay/integration/brokertest"
	"github.com/delaykit/rabbitdelay/internal/admin"
	"github.com/delaykit/rabbitdelay/internal/delayspec"
)

// newPublisherErr starts a Publisher and returns NewPublisher's error (closing a Publisher
// that started). cfg is as for newPublisherURL.
func newPublisherErr(t *testing.T, env *brokertest.Env, spec delayspec.Spec, cfg ...amqpdelay.Config) error {
	t.Helper()
	c := publisherConfig(t, env.URL, spec, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	p, err := amqpdelay.NewPublisher(ctx, c)
	if err == nil {
		_ = p.Close()
	}
	return err
}

// TestPublisherTargetNotBound: a target that exists but that `rabbitdelay apply` never bound to
// the dispatch exchange is not one of the Publisher's targets: the spec record lists the bound
// ones, and a delayed publish to another exchange fails with ErrUnknownTarget, nothing sent.
func TestPublisherTargetNotBound(t *testing.T) {
	t.Parallel()
	env := brokertest.NewEnv(t)
	orders := delayspec.Target{Name: env.Name("orders"), Type: "topic"}
	declareTopology(t, env, testSpec(env, orders))
	p := newPublisher(t, env, testSpec(env, orders))
	if _, err := p.Publish(pubCtx(t), "amq.topic", "k", textMsg("x"), time.Second); !errors.Is(err, amqpdelay.ErrUnknownTarget) ||
		!strings.Contains(err.Error(), "amq.topic") {
		t.Fatalf("a delayed publish to an exchange apply did not bind: err = %v, want ErrUnknownTarget naming amq.topic", err)
	}
	if _, err := p.Publish(pubCtx(t), orders.Name, "k", textMsg("x"), time.Second); err != nil {
		t.Fatalf("a delayed publish to the applied target: %v", err)
	}
}

// TestPublisherManagedChecks: with Config.Management, NewPublisher refuses a topology whose
// dispatch binding to a target was deleted by hand after apply (the marker is still there),
// and one where a policy in effect breaks a guarantee (a message-ttl policy above the
// topology's own priority; an expires operator policy); it starts once they are gone.
func TestPublisherManagedChecks(t *testing.T) {
	t.Parallel()
	env := brokertest.NewEnv(t)
	if env.Broker.ManagementURL == "" {
		if brokertest.InCI() {
			t.Fatal("needs the management API, and CI's broker has one")
		}
		t.Skip("needs the management API (AMQP_MANAGEMENT_URL)")
	}
	m, err := admin.NewManagement(env.Broker.ManagementURL, env.VHost)
	if err != nil {
		t.Fatal(err)
	}
	orders := delayspec.Target{Name: env.Name("orders"), Type: "topic"}
	spec := testSpec(env, orders)
	plan, err := admin.NewPlan(spec)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if _, err := admin.Apply(ctx, env.Dial(t), plan, admin.ApplyOptions{Management: m}); err != nil {
		t.Fatalf("apply: %v", err)
	}
	withMgmt := amqpdelay.Config{Management: management(t, env)}
	if err := newPublisherErr(t, env, spec, withMgmt); err != nil {
		t.Fatalf("NewPublisher on a healthy topology: %v", err)
	}

	// A policy above the topology's own priority that makes delays early.
	if err := polSet(env, "policies", "ttl", "^"+regexpQuote(env.Prefix)+`\.`, "queues", delayspec.DefaultPolicyPriority+1, map[string]any{"message-ttl": 1000}); err != nil {
		t.Fatal(err)
	}
	waitErr := func(what string, want error, text string) {
		t.Helper()
		// RabbitMQ applies a policy to matching queues in the background.
		deadline := time.Now().Add(time.Minute)
		for {
			err := newPublisherErr(t, env, spec, withMgmt)
			if errors.Is(err, want) && strings.Contains(err.Error(), text) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: err = %v, want %v naming %q", what, err, want, text)
			}
			time.Sleep(500 * time.Millisecond)
		}
	}
	waitErr("message-ttl policy", amqpdelay.ErrTopologyUnsafe, "message-ttl")
	polClear(t, env, "policies", "ttl")

	if err := polSet(env, "operator-policies", "exp", "^"+regexpQuote(env.Prefix)+`\.`, "queues", 0, map[string]any{"expires": 3600000}); err != nil {
		t.Fatal(err)
	}
	waitErr("expires operator policy", amqpdelay.ErrTopologyUnsafe, "expires")
	polClear(t, env, "operator-policies", "exp")

	// The binding deleted by hand: the marker exchange is still there, so only the management
	// API can tell.
	ch := env.Channel(t)
	var dispatchBinding *admin.Binding
	for _, b := range plan.Bindings {
		if b.Role == admin.RoleDispatch && b.Destination == orders.Name {
			dispatchBinding = &b
		}
	}
	if dispatchBinding == nil {
		t.Fatal("the plan has no dispatch binding for the target")
	}
	if err := ch.ExchangeUnbind(dispatchBinding.Destination, dispatchBinding.RoutingKey, dispatchBinding.Source, false, dispatchBinding.Args); err != nil {
		t.Fatal(err)
	}
	waitErr("binding deleted", amqpdelay.ErrTopologyMissing, "not bound")
	if err := newPublisherErr(t, env, spec); err != nil {
		t.Errorf("without the management API the marker is all NewPublisher sees: err = %v, want nil", err)
	}
	// The management API's URL is admin.NewManagement's to check; the Publisher checks that
	// the management check reads its own vhost.
	if _, err := admin.NewManagement("http://guest:s3cret@[::1", env.VHost); !errors.Is(err, admin.ErrManagement) || strings.Contains(err.Error(), "s3cret") {
		t.Errorf("bad management URL: err = %v, want ErrManagement without the password", err)
	}
	other, err := admin.NewManagement(env.Broker.ManagementURL, env.VHost+"-other")
	if err != nil {
		t.Fatal(err)
	}
	if err := newPublisherErr(t, env, spec, amqpdelay.Config{Management: other}); !errors.Is(err, amqpdelay.ErrInvalidConfig) || !strings.Contains(err.Error(), "vhost") {
		t.Errorf("management check of another vhost: err = %v, want ErrInvalidConfig naming the vhost", err)
	}
}

// regexpQuote quotes s for a RabbitMQ policy pattern (PCRE).
func regexpQuote(s string) string {
	var b strings.Builder
	for _, r := range s {
		if strings.ContainsRune(`\.+*?()|[]{}^$-`, r) {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}
