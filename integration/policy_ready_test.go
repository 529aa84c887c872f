//go:build integration

package integration

import (
	"errors"
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/delaykit/rabbitdelay/amqpdelay"
	"github.com/delaykit/rabbitdelay/integration/brokertest"
	"github.com/delaykit/rabbitdelay/internal/admin"
	"github.com/delaykit/rabbitdelay/internal/delayspec"
)

// TestPolicyReadyAndParkingKeys sets every key that can drop, delete, stall or misroute due
// messages on a ready queue and on the parking queue, as a policy and as an operator policy
// (where the broker accepts the key there: on 3.10 only message-ttl, expires, max-length,
// max-length-bytes and delivery-limit), one at a time in one vhost, and checks what
// PolicyProblems reports: the policy, the key, what breaks, and whether it fails (apply
// returns ErrPolicy; a Publisher with Config.Management refuses to start, checked for one key) or is
// a warning (a quorum ready queue with a delivery limit parks what the key takes out). The
// topology sets no policy on ready queues, so any priority applies there; the parking queue
// is covered by the topology's delay-queues policy, which a lower-priority one does not pass.
func TestPolicyReadyAndParkingKeys(t *testing.T) {
	t.Parallel()
	env := brokertest.NewEnv(t)
	m := topoNeedManagement(t, env)
	major := polMajor(t, env)
	spec := polSpec(delayspec.Quorum)
	p, _, err := polApply(t, env, m, spec)
	if err != nil {
		t.Fatalf("apply on a fresh vhost: %v", err)
	}
	ready, parking := "orders.ready", p.Names.Parking()
	opKeys := map[string]bool{"message-ttl": true, "expires": true, "max-length": true, "max-length-bytes": true, "delivery-limit": true}
	cases := []struct {
		object  string
		def     map[string]any
		key     string
		breaks  admin.Breakage
		warning bool
	}{
		{ready, map[string]any{"expires": 600000}, "expires", admin.BreaksDeletes, false},
		{ready, map[string]any{"message-ttl": 60000}, "message-ttl", admin.BreaksDrops, true},
		{ready, map[string]any{"max-length": 10, "overflow": "reject-publish"}, "max-length", admin.BreaksStalls, false},
		{ready, map[string]any{"max-length-bytes": 100000}, "max-length-bytes", admin.BreaksDrops, true},
		{ready, map[string]any{"delivery-limit": 2}, "delivery-limit", admin.BreaksDrops, true},
		{ready, map[string]any{"dead-letter-routing-key": "elsewhere"}, "dead-letter-routing-key", admin.BreaksRouting, true},
		{parking, map[string]any{"message-ttl": 60000}, "message-ttl", admin.BreaksDrops, false},
		{parking, map[string]any{"expires": 600000}, "expires", admin.BreaksDeletes, false},
		{parking, map[string]any{"max-length": 10}, "max-length", admin.BreaksDrops, false},
		{parking, map[string]any{"max-length-bytes": 100000}, "max-length-bytes", admin.BreaksDrops, false},
	}
	pattern := func(q string) string { return "^" + regexp.QuoteMeta(q) + "$" }
	find := func(probs []admin.PolicyProblem, object, key, policy string, operator bool) *admin.PolicyProblem {
		for _, pp := range probs {
			if pp.Object == object && pp.Key == key && pp.Policy == policy && pp.Operator == operator {
				return &pp
			}
		}
		return nil
	}
	publisherChecked := false
	for _, tc := range cases {
		name := fmt.Sprintf("%s %s", tc.object, tc.key)
		if tc.object == parking {
			// Below the topology's priority: shadowed on the parking queue.
			if err := polSet(env, "policies", "low", pattern(parking), "queues", 10, tc.def); err != nil {
				t.Fatal(err)
			}
			polWaitProblems(t, m, p, name+": low-priority policy", func(probs []admin.PolicyProblem) bool { return len(polFind(probs, tc.key)) == 0 })
			polClear(t, env, "policies", "low")
		}
		for _, operator := range []bool{false, true} {
			kind, prio, pol := "policies", delayspec.DefaultPolicyPriority+1, "high"
			if operator {
				if !opKeys[tc.key] || len(tc.def) > 1 && major < 4 {
					continue // refused as an operator policy on this version (TestPolicyKeysShadowedOrReported)
				}
				kind, prio, pol = "operator-policies", 0, "op"
			} else if tc.object == ready {
				prio = 10 // nothing shadows a ready queue's policies
			}
			if err := polSet(env, kind, pol, pattern(tc.object), "queues", prio, tc.def); err != nil {
				t.Fatalf("%s: set %s: %v", name, kind, err)
			}
			probs := polWaitProblems(t, m, p, name+" as "+kind, func(probs []admin.PolicyProblem) bool {
				return find(probs, tc.object, tc.key, pol, operator) != nil
			})
			pp := find(probs, tc.object, tc.key, pol, operator)
			if pp.Breaks != tc.breaks || pp.Warning != tc.warning || !strings.Contains(pp.Error(), tc.key) || !strings.Contains(pp.Error(), tc.object) {
				t.Errorf("%s as %s: %+v\n%s; want breaks %q, warning %v", name, kind, *pp, pp, tc.breaks, tc.warning)
			}
			t.Logf("%s as %s: %s", name, kind, pp)
			_, rep, err := polApply(t, env, m, spec)
			if failing := !tc.warning; failing != errors.Is(err, admin.ErrPolicy) || len(rep.PolicyProblems) == 0 {
				t.Errorf("%s as %s: apply: %v, want ErrPolicy: %v", name, kind, err, failing)
			}
			if !tc.warning && !publisherChecked {
				publisherChecked = true
				cfg := amqpdelay.Config{URL: env.URL, Prefix: spec.Prefix, Management: management(t, env)}
				pub, err := amqpdelay.NewPublisher(pubCtx(t), cfg)
				if err == nil {
					_ = pub.Close()
				}
				if !errors.Is(err, amqpdelay.ErrTopologyUnsafe) || !strings.Contains(err.Error(), tc.key) {
					t.Errorf("%s as %s: NewPublisher with Config.Management: %v, want ErrTopologyUnsafe naming %s", name, kind, err, tc.key)
				}
			}
			polClear(t, env, kind, pol)
		}
	}
}
