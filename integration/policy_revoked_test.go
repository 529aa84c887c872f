//go:build integration

package integration

import (
	"errors"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/delaykit/rabbitdelay/amqpdelay"
	"github.com/delaykit/rabbitdelay/integration/brokertest"
	"github.com/delaykit/rabbitdelay/internal/admin"
	"github.com/delaykit/rabbitdelay/internal/delayspec"
)

// streamPolicy returns the policy and operator policy the broker reports in effect on a queue,
// and the keys of its effective policy definition (the management API's view, refreshed with
// the queue statistics, every 5 s by default).
func streamPolicy(t *testing.T, env *brokertest.Env, queue string) (pol, op string, keys map[string]any) {
	t.Helper()
	var q struct {
		Policy    any            `json:"policy"`
		OpPolicy  any            `json:"operator_policy"`
		Effective map[string]any `json:"effective_policy_definition"`
	}
	if err := env.Broker.Management("GET", "api/queues/"+url.PathEscape(env.VHost)+"/"+url.PathEscape(queue), nil, &q); err != nil {
		t.Fatal(err)
	}
	pol, _ = q.Policy.(string)
	op, _ = q.OpPolicy.(string)
	return pol, op, q.Effective
}

// TestPolicyRevokedStreamKeys: on the revocation stream <prefix>.revoked, a policy with a
// max-age below the stream's retention or with max-length-bytes deletes revocations before
// their messages are due. Below the topology's priority such a policy is shadowed by the
// topology's <prefix>.revoked-retention policy (the broker reports that one in effect; nothing
// is reported); above it, or as an operator policy (max-length-bytes only: RabbitMQ refuses
// max-age in an operator policy on 3.10 and 4.0), the broker applies it to the stream and
// PolicyProblems reports it (revocations lost), apply returns ErrPolicy and NewPublisher
// with Config.Management refuses with ErrTopologyUnsafe. On 4.x the policies are also set with
// apply-to streams. A longer max-age is not reported.
func TestPolicyRevokedStreamKeys(t *testing.T) {
	t.Parallel()
	env := brokertest.NewEnv(t)
	m := topoNeedManagement(t, env)
	major := polMajor(t, env)
	spec := polSpec(delayspec.Quorum)
	p, _, err := polApply(t, env, m, spec)
	if err != nil {
		t.Fatalf("apply on a fresh vhost: %v", err)
	}
	stream := p.Names.Revoked()
	pattern := "^" + regexp.QuoteMeta(stream) + "$"
	// The broker itself says which policy is in effect on the stream (statistics, every 5 s).
	waitBroker := func(what, pol, op, key string) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for {
			gotPol, gotOp, eff := streamPolicy(t, env, stream)
			_, has := eff[key]
			if gotPol == pol && gotOp == op && (key == "" || has) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: the broker reports policy %q, operator policy %q, effective %v on %s; want %q, %q with %s",
					what, gotPol, gotOp, eff, stream, pol, op, key)
			}
			time.Sleep(500 * time.Millisecond)
		}
	}
	waitBroker("after apply", p.Names.RevokedPolicy(), "", "max-age")

	if err := polSet(env, "operator-policies", "op-age", pattern, "queues", 0, map[string]any{"max-age": "1h"}); err == nil {
		polClear(t, env, "operator-policies", "op-age")
		t.Errorf("the broker took max-age in an operator policy: PolicyProblems assumes it cannot")
	}
	applyTos := []string{"queues"}
	if major >= 4 {
		applyTos = append(applyTos, "streams")
	}
	cases := []struct {
		def map[string]any
		key string
		op  bool // also as an operator policy
	}{
		{map[string]any{"max-age": "1h"}, "max-age", false},
		{map[string]any{"max-length-bytes": 100_000_000}, "max-length-bytes", true},
	}
	for _, tc := range cases {
		// Below the topology's priority: shadowed.
		if err := polSet(env, "policies", "low", pattern, "queues", 10, tc.def); err != nil {
			t.Fatal(err)
		}
		waitBroker(tc.key+" low", p.Names.RevokedPolicy(), "", "max-age")
		if probs, err := m.PolicyProblems(topoTestCtx(t, 20*time.Second), p); err != nil || len(polFind(probs, tc.key)) > 0 {
			t.Errorf("%s below the topology's priority: %v, %v; want nothing reported", tc.key, probs, err)
		}
		polClear(t, env, "policies", "low")
		type setting struct{ kind, name, applyTo string }
		var settings []setting
		for _, a := range applyTos {
			settings = append(settings, setting{"policies", "high-" + a, a})
		}
		if tc.op {
			settings = append(settings, setting{"operator-policies", "op", "queues"})
		}
		for _, s := range settings {
			operator := s.kind == "operator-policies"
			prio := delayspec.DefaultPolicyPriority + 1
			if operator {
				prio = 0
			}
			what := tc.key + " as " + s.kind + " " + s.name
			if err := polSet(env, s.kind, s.name, pattern, s.applyTo, prio, tc.def); err != nil {
				t.Fatalf("%s: %v", what, err)
			}
			if operator {
				waitBroker(what, p.Names.RevokedPolicy(), s.name, tc.key)
			} else {
				waitBroker(what, s.name, "", tc.key)
			}
			probs := polWaitProblems(t, m, p, what, func(probs []admin.PolicyProblem) bool { return len(polFind(probs, tc.key)) > 0 })
			pp := polFind(probs, tc.key)[0]
			if pp.Object != stream || pp.Policy != s.name || pp.Operator != operator || pp.Breaks != admin.BreaksRevocations || pp.Warning {
				t.Errorf("%s: %+v\n%s", what, pp, pp)
			}
			t.Logf("%s: %s", what, pp)
			if _, rep, err := polApply(t, env, m, spec); !errors.Is(err, admin.ErrPolicy) || len(rep.PolicyProblems) == 0 {
				t.Errorf("%s: apply: %v, want ErrPolicy", what, err)
			}
			pub, err := amqpdelay.NewPublisher(pubCtx(t), amqpdelay.Config{URL: env.URL, Prefix: spec.Prefix, Management: management(t, env)})
			if err == nil {
				_ = pub.Close()
			}
			if !errors.Is(err, amqpdelay.ErrTopologyUnsafe) || !strings.Contains(err.Error(), tc.key) {
				t.Errorf("%s: NewPublisher with Config.Management: %v, want ErrTopologyUnsafe naming %s", what, err, tc.key)
			}
			polClear(t, env, s.kind, s.name)
		}
	}
	// A max-age at least the retention drops nothing early: not reported.
	if err := polSet(env, "policies", "longer", pattern, "queues", delayspec.DefaultPolicyPriority+1, map[string]any{"max-age": "10Y"}); err != nil {
		t.Fatal(err)
	}
	waitBroker("max-age 10Y", "longer", "", "max-age")
	if probs, err := m.PolicyProblems(topoTestCtx(t, 20*time.Second), p); err != nil || len(probs) > 0 {
		t.Errorf("max-age 10Y: %v, %v; want nothing reported", probs, err)
	}
	polClear(t, env, "policies", "longer")
}
