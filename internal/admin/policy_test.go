package admin

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/delaykit/rabbitdelay/internal/delayspec"
)

func jsName(s string) json.RawMessage { b, _ := json.Marshal(s); return b }

// TestPolicyProblemsOf: the rules of Management.PolicyProblems on a made-up management view:
// what breaks is reported with its policy and effect, what the queue's argument or TTL
// outweighs is not, operator values merge with the stricter winning, and targets without the
// alternate exchange are reported.
func TestPolicyProblemsOf(t *testing.T) {
	p := mustPlan(t, delayspec.Spec{Prefix: "rd", Targets: delayspec.Targets{{Name: "orders"}, {Name: "billing"}, {Name: "own"}, {Name: "lost"}}, Buckets: delayspec.Delays{3 * time.Second}})
	bucket := p.Names.BucketQueue(3000)
	pols := map[string]managedPolicy{
		"high":            {Name: "high", Definition: map[string]any{"message-ttl": json.Number("1000"), "dead-letter-exchange": "x", "dead-letter-routing-key": "k"}},
		"long-ttl":        {Name: "long-ttl", Definition: map[string]any{"message-ttl": json.Number("5000"), "overflow": "drop-head"}},
		"rd.targets":      {Name: "rd.targets", Definition: map[string]any{"alternate-exchange": "rd.due-unroutable"}},
		"no-ae":           {Name: "no-ae", Definition: map[string]any{"federation-upstream-set": "all"}},
		"rd.delay-queues": {Name: "rd.delay-queues", Definition: map[string]any{"overflow": "reject-publish"}},
	}
	ops := map[string]managedPolicy{
		"op": {Name: "op", Definition: map[string]any{"expires": json.Number("60000"), "message-ttl": json.Number("4000")}},
	}
	queues := []managedObject{
		{Name: bucket, Type: "quorum", Policy: jsName("high")},
		{Name: p.Names.LadderQueue(0, 1), Type: "quorum", Policy: jsName("long-ttl")},
		{Name: p.Names.Parking(), Type: "quorum", Policy: jsName("rd.delay-queues"), OperatorPolicy: jsName("op")},
		{Name: "unrelated", Type: "quorum", Policy: jsName("high")},
	}
	exchanges := []managedObject{
		{Name: "orders", Policy: jsName("rd.targets")},
		{Name: "billing", Policy: jsName("no-ae")},
		{Name: "own", Policy: jsName("rd.targets"), Arguments: map[string]any{"alternate-exchange": "mine"}},
		{Name: "lost", Policy: jsName("rd.targets"), Arguments: map[string]any{"alternate-exchange": "nowhere"}},
		{Name: p.Names.BucketExchange(), Policy: jsName("high")},
		{Name: "mine"}, {Name: p.Names.DueUnroutable()},
	}
	got := map[string]PolicyProblem{}
	for _, pp := range policyProblemsOf(p, pols, ops, queues, exchanges, 3) {
		got[pp.Object+" "+pp.Key] = pp
	}
	want := map[string]struct {
		policy  string
		breaks  Breakage
		warning bool
	}{
		bucket + " message-ttl":                 {"high", BreaksEarly, false},
		bucket + " dead-letter-routing-key":     {"high", BreaksRouting, false},
		p.Names.LadderQueue(0, 1) + " overflow": {"long-ttl", BreaksDrops, false},
		p.Names.Parking() + " expires":          {"op", BreaksDeletes, false},
		p.Names.Parking() + " message-ttl":      {"op", BreaksDrops, false},
		"billing alternate-exchange":            {"no-ae", BreaksStalls, false},
		"own alternate-exchange":                {"", BreaksStalls, true},
		"lost alternate-exchange":               {"", BreaksStalls, false}, // "nowhere" does not exist
	}
	for k, w := range want {
		pp, ok := got[k]
		if !ok {
			t.Errorf("%s: not reported", k)
			continue
		}
		if pp.Policy != w.policy || pp.Breaks != w.breaks || pp.Warning != w.warning {
			t.Errorf("%s: %+v, want policy %q breaks %q warning %v", k, pp, w.policy, w.breaks, w.warning)
		}
		if !strings.Contains(pp.Error(), pp.Object) || !strings.Contains(pp.Error(), string(pp.Breaks)) {
			t.Errorf("%s: message %q lacks the object or the effect", k, pp.Error())
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			t.Errorf("unexpected problem %s: %s", k, got[k])
		}
	}
	// A message-ttl above the queue's own TTL (5,000 ms against 1 ms) is harmless: the lower one wins.
	if _, ok := got[p.Names.LadderQueue(0, 1)+" message-ttl"]; ok {
		t.Error("message-ttl 5000 on a 1 ms ladder queue reported as early")
	}
}

// TestPolicyLengthLimitOnDelayQueue: a length limit on a delay queue stalls, drops or sends
// messages on early, by the overflow in effect: a quorum queue's policy overflow wins over its
// x-overflow reject-publish (reject-publish-dlx counting as drop-head), a classic delay queue
// has no x-overflow and drops the head unless a policy says otherwise.
func TestPolicyLengthLimitOnDelayQueue(t *testing.T) {
	for _, tc := range []struct {
		typ      delayspec.QueueType
		def      map[string]any
		key      string
		breaks   Breakage
		overflow Breakage // the overflow key's own problem; "" for none
	}{
		{delayspec.Quorum, map[string]any{"max-length": json.Number("0")}, "max-length", BreaksStalls, ""},
		{delayspec.Quorum, map[string]any{"max-length-bytes": json.Number("10")}, "max-length-bytes", BreaksStalls, ""},
		{delayspec.Quorum, map[string]any{"max-length": json.Number("0"), "overflow": "reject-publish"}, "max-length", BreaksStalls, ""},
		{delayspec.Quorum, map[string]any{"max-length": json.Number("0"), "overflow": "drop-head"}, "max-length", BreaksEarly, BreaksDrops},
		{delayspec.Quorum, map[string]any{"max-length-bytes": json.Number("1"), "overflow": "drop-head"}, "max-length-bytes", BreaksEarly, BreaksDrops},
		{delayspec.Quorum, map[string]any{"max-length": json.Number("5"), "overflow": "reject-publish-dlx"}, "max-length", BreaksEarly, BreaksDrops},
		{delayspec.Classic, map[string]any{"max-length": json.Number("0")}, "max-length", BreaksEarly, ""},
		{delayspec.Classic, map[string]any{"max-length-bytes": json.Number("1"), "overflow": "drop-head"}, "max-length-bytes", BreaksEarly, ""},
		{delayspec.Classic, map[string]any{"max-length": json.Number("0"), "overflow": "reject-publish-dlx"}, "max-length", BreaksEarly, ""},
		{delayspec.Classic, map[string]any{"max-length": json.Number("0"), "overflow": "reject-publish"}, "max-length", BreaksDrops, ""},
	} {
		name := fmt.Sprintf("%s %v", tc.typ, tc.def)
		p := mustPlan(t, delayspec.Spec{Prefix: "rd", Targets: delayspec.Targets{{Name: "orders"}}, QueueType: tc.typ})
		q := p.Names.LadderQueue(0, 1)
		pols := map[string]managedPolicy{"limit": {Name: "limit", Definition: tc.def}}
		queues := []managedObject{{Name: q, Type: string(tc.typ), Policy: jsName("limit")}}
		got := map[string]PolicyProblem{}
		for _, pp := range policyProblemsOf(p, pols, nil, queues, nil, 3) {
			got[pp.Key] = pp
		}
		if pp := got[tc.key]; pp.Breaks != tc.breaks {
			t.Errorf("%s: %s breaks %q (%s), want %q", name, tc.key, pp.Breaks, pp.Why, tc.breaks)
		}
		if pp := got["overflow"]; pp.Breaks != tc.overflow {
			t.Errorf("%s: overflow breaks %q, want %q", name, pp.Breaks, tc.overflow)
		}
	}
}

// TestUnplannedBindings: bindings on the plan's exchanges and queues that the plan lacks are
// listed; bindings of target exchanges to other queues are not; consumers' retry bindings are
// listed apart.
func TestUnplannedBindings(t *testing.T) {
	p := mustPlan(t, delayspec.Spec{Prefix: "rd", Targets: delayspec.Targets{{Name: "orders", Type: "topic"}},
		ReadyQueues: delayspec.ReadyQueues{{Queue: "orders.ready", Exchange: "orders", BindingKey: "order.*"}}})
	all := append([]Binding{}, p.Bindings...)
	all = append(all,
		Binding{Source: "orders", Destination: "orders.ready", DestinationType: DestQueue, RoutingKey: "order.#"},
		Binding{Source: "orders", Destination: "audit", DestinationType: DestQueue, RoutingKey: "#"},
		Binding{Source: p.Names.Dispatch(), Destination: "extra", DestinationType: DestQueue},
		// A consumer's retry binding for a queue outside the specification: expected.
		Binding{Source: p.Names.Retry(), Destination: "jobs", DestinationType: DestQueue, RoutingKey: "jobs", Args: map[string]any{}},
		// Another key, arguments, an exchange: they would send a queue's retries elsewhere.
		Binding{Source: p.Names.Retry(), Destination: "audit", DestinationType: DestQueue, RoutingKey: "jobs"},
		Binding{Source: p.Names.Retry(), Destination: "jobs2", DestinationType: DestQueue, RoutingKey: "jobs2", Args: map[string]any{"x": 1}},
		Binding{Source: p.Names.Retry(), Destination: "jobs3", DestinationType: DestExchange, RoutingKey: "jobs3"},
	)
	got, retry := unplannedBindings(p, all)
	var dests []string
	for _, b := range got {
		dests = append(dests, b.Destination+" "+b.RoutingKey)
	}
	want := []string{"orders.ready order.#", "extra ", "audit jobs", "jobs2 jobs2", "jobs3 jobs3"}
	if !slices.Equal(dests, want) {
		t.Errorf("unplanned %q, want %q", dests, want)
	}
	if len(retry) != 1 || retry[0].Destination != "jobs" {
		t.Errorf("consumer retry bindings %v, want the one to jobs", retry)
	}
}

// TestReadyQueueProblems: on a ready queue, what takes due messages out of it is a warning
// where the queue parks them (quorum, delivery limit), a failure where they would be lost
// (ReadyDeliveryLimit -1) unless the policy dead-letters them to an exchange that exists; expires and a
// refusing length limit always fail; the application's other keys are not reported.
func TestReadyQueueProblems(t *testing.T) {
	spec := delayspec.Spec{Prefix: "rd", Targets: delayspec.Targets{{Name: "orders"}}, ReadyQueues: delayspec.ReadyQueues{{Queue: "ready", Exchange: "orders", BindingKey: "#"}}}
	parks := mustPlan(t, spec)
	spec.ReadyDeliveryLimit = delayspec.NoReadyDeliveryLimit
	loses := mustPlan(t, spec)
	pols := map[string]managedPolicy{
		"ttl":    {Name: "ttl", Definition: map[string]any{"message-ttl": json.Number("1000"), "queue-leader-locator": "balanced"}},
		"ttl-dl": {Name: "ttl-dl", Definition: map[string]any{"message-ttl": json.Number("1000"), "dead-letter-exchange": "mine"}},
		"full":   {Name: "full", Definition: map[string]any{"max-length": json.Number("10"), "overflow": "reject-publish"}},
		"head":   {Name: "head", Definition: map[string]any{"max-length-bytes": json.Number("10")}},
		"exp":    {Name: "exp", Definition: map[string]any{"expires": json.Number("1000"), "dead-letter-routing-key": "x"}},
	}
	ops := map[string]managedPolicy{"op": {Name: "op", Definition: map[string]any{"delivery-limit": json.Number("2")}}}
	type want struct {
		breaks  Breakage
		warning bool
	}
	for _, tc := range []struct {
		name       string
		plan       *Plan
		policy, op string
		want       map[string]want
		exchanges  []managedObject
	}{
		{"ttl, parks", parks, "ttl", "", map[string]want{"message-ttl": {BreaksDrops, true}}, nil},
		{"ttl, no dead-letter exchange", loses, "ttl", "", map[string]want{"message-ttl": {BreaksDrops, false}}, nil},
		{"ttl, the policy's dead-letter exchange", loses, "ttl-dl", "", map[string]want{"message-ttl": {BreaksRouting, true}}, []managedObject{{Name: "mine"}}},
		// RabbitMQ drops what it dead-letters to an exchange that does not exist: as lost as
		// with no dead-letter exchange (seen on 3.10.8 and 4.3.6).
		{"ttl, the policy's dead-letter exchange missing", loses, "ttl-dl", "", map[string]want{"message-ttl": {BreaksDrops, false}}, nil},
		{"reject-publish", parks, "full", "", map[string]want{"max-length": {BreaksStalls, false}}, nil},
		{"drop-head, parks", parks, "head", "", map[string]want{"max-length-bytes": {BreaksDrops, true}}, nil},
		{"drop-head, lost", loses, "head", "", map[string]want{"max-length-bytes": {BreaksDrops, false}}, nil},
		{"expires, routing key", parks, "exp", "", map[string]want{"expires": {BreaksDeletes, false}, "dead-letter-routing-key": {BreaksRouting, true}}, nil},
		{"expires, own dead-lettering", loses, "exp", "", map[string]want{"expires": {BreaksDeletes, false}}, nil},
		{"operator delivery-limit, parks", parks, "", "op", map[string]want{"delivery-limit": {BreaksDrops, true}}, nil},
		{"operator delivery-limit, lost", loses, "", "op", map[string]want{"delivery-limit": {BreaksDrops, false}}, nil},
	} {
		queues := []managedObject{{Name: "ready", Type: "quorum", Policy: jsName(tc.policy), OperatorPolicy: jsName(tc.op)}}
		got := map[string]PolicyProblem{}
		for _, pp := range policyProblemsOf(tc.plan, pols, ops, queues, tc.exchanges, 3) {
			if pp.Object == "ready" {
				got[pp.Key] = pp
			}
		}
		if len(got) != len(tc.want) {
			t.Errorf("%s: problems %v, want keys %v", tc.name, got, tc.want)
		}
		for k, w := range tc.want {
			pp := got[k]
			if pp.Breaks != w.breaks || pp.Warning != w.warning || pp.Operator != (tc.op != "") {
				t.Errorf("%s: %s: %+v, want breaks %q warning %v", tc.name, k, pp, w.breaks, w.warning)
			}
			if !pp.Warning && strings.Count(pp.Error(), "fix: ") != 1 {
				t.Errorf("%s: %s: want one fix in %q", tc.name, k, pp.Error())
			}
		}
	}
}

// TestRevokedProblems: on the revocation stream, a max-age below the stream's retention and any
// max-length-bytes (policy or operator policy, the lower value winning) are reported; a longer
// max-age and keys that drop no record are not. A policy with a key streams do not support
// never applies to the stream, and one with apply-to streams does (4.x).
func TestRevokedProblems(t *testing.T) {
	p := mustPlan(t, delayspec.Spec{Prefix: "rd", Targets: delayspec.Targets{{Name: "orders"}}, Buckets: delayspec.Delays{3 * time.Second}})
	stream := p.Names.Revoked()
	keep := revokedMaxAge(p.Spec) // 1218h for this spec (plugin auto: 2^32-1 ms + a day)
	for _, tc := range []struct {
		name     string
		user, op map[string]any
		want     map[string]bool // key -> operator
	}{
		{"short max-age", map[string]any{"max-age": "1D"}, nil, map[string]bool{"max-age": false}},
		{"max-age in seconds below", map[string]any{"max-age": "3600s"}, nil, map[string]bool{"max-age": false}},
		{"invalid max-age", map[string]any{"max-age": json.Number("5")}, nil, map[string]bool{"max-age": false}},
		{"own max-age", map[string]any{"max-age": keep}, nil, nil},
		{"longer max-age", map[string]any{"max-age": "1Y"}, nil, nil},
		{"max-length-bytes", map[string]any{"max-length-bytes": json.Number("1000000000")}, nil, map[string]bool{"max-length-bytes": false}},
		{"operator max-length-bytes", nil, map[string]any{"max-length-bytes": json.Number("1000")}, map[string]bool{"max-length-bytes": true}},
		{"both, operator lower", map[string]any{"max-length-bytes": json.Number("5000"), "max-age": "1Y"},
			map[string]any{"max-length-bytes": json.Number("1000")}, map[string]bool{"max-length-bytes": true}},
		{"harmless keys", map[string]any{"stream-max-segment-size-bytes": json.Number("1000"), "queue-leader-locator": "balanced",
			"initial-cluster-size": json.Number("1")}, nil, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pols := map[string]managedPolicy{"u": {Name: "u", Definition: tc.user}}
			ops := map[string]managedPolicy{"o": {Name: "o", Definition: tc.op}}
			q := managedObject{Name: stream, Type: "stream", Policy: jsName("u"), OperatorPolicy: jsName("o")}
			got := map[string]bool{}
			for _, pp := range policyProblemsOf(p, pols, ops, []managedObject{q}, nil, 3) {
				if pp.Object != stream || pp.Breaks != BreaksRevocations || pp.Warning {
					t.Errorf("unexpected %+v", pp)
				}
				got[pp.Key] = pp.Operator
				if !strings.Contains(pp.Error(), "fix:") {
					t.Errorf("%s: no fix in %q", pp.Key, pp.Error())
				}
			}
			if len(got) != len(tc.want) {
				t.Errorf("reported %v, want %v", got, tc.want)
			}
			for k, op := range tc.want {
				if g, ok := got[k]; !ok || g != op {
					t.Errorf("%s: reported %v (operator %v), want operator %v", k, ok, g, op)
				}
			}
		})
	}
}

// TestPolicyProblemsTargetsPolicyWithoutItsExchange: the topology's targets policy still in
// effect on a target while its alternate exchange (<prefix>.due-unroutable) is gone, as a
// teardown without the management API leaves it: due messages the target routes to no queue go
// nowhere, an error (not the silence of a policy in place).
func TestPolicyProblemsTargetsPolicyWithoutItsExchange(t *testing.T) {
	p := mustPlan(t, delayspec.Spec{Prefix: "rd", Targets: delayspec.Targets{{Name: "orders"}}})
	pols := map[string]managedPolicy{"rd.targets": {Name: "rd.targets", Definition: map[string]any{"alternate-exchange": "rd.due-unroutable"}}}
	for _, withAE := range []bool{true, false} {
		exchanges := []managedObject{{Name: "orders", Policy: jsName("rd.targets")}}
		if withAE {
			exchanges = append(exchanges, managedObject{Name: p.Names.DueUnroutable()})
		}
		probs := policyProblemsOf(p, pols, nil, nil, exchanges, 4)
		if withAE && len(probs) != 0 {
			t.Errorf("targets policy and its exchange in place: %v, want no problem", probs)
		}
		if !withAE && (len(probs) != 1 || probs[0].Warning || probs[0].Breaks != BreaksStalls || !strings.Contains(probs[0].Why, "does not exist")) {
			t.Errorf("targets policy without its exchange: %v, want one stall error saying it does not exist", probs)
		}
	}
}

// TestEffectiveDeliveryLimitNone: delivery-limit -1 (none, RabbitMQ 4.x) merged with an
// operator policy: any limit is stricter than none, whichever side holds it (4.0.5's
// effective_policy_definition shows an operator policy's 2 over the topology's -1).
func TestEffectiveDeliveryLimitNone(t *testing.T) {
	for _, tc := range []struct {
		user, op any
		want     string
		fromOp   bool
	}{
		{-1, json.Number("2"), "2", true},
		{json.Number("5"), -1, "5", false},
		{json.Number("5"), json.Number("2"), "2", true},
		{json.Number("2"), json.Number("5"), "2", false},
		{-1, -1, "-1", false},
	} {
		def, from := effective(map[string]any{"delivery-limit": tc.user}, map[string]any{"delivery-limit": tc.op})
		if fmt.Sprint(def["delivery-limit"]) != tc.want || from["delivery-limit"] != tc.fromOp {
			t.Errorf("user %v, operator %v: %v (from the operator: %v), want %s (%v)", tc.user, tc.op, def["delivery-limit"], from["delivery-limit"], tc.want, tc.fromOp)
		}
	}
}

// TestParkingDefaultDeliveryLimit: on RabbitMQ 4.x a quorum parking queue without
// delivery-limit in the policies in effect (the delay-queue policy shadowed, absent, or set
// for 3.x) gets the default limit of 20: a warning naming the policy in effect. Not on 3.x
// (no default), not with the delay-queue policy's -1, not for a classic parking queue.
func TestParkingDefaultDeliveryLimit(t *testing.T) {
	p := mustPlan(t, delayspec.Spec{Prefix: "rd", Targets: delayspec.Targets{{Name: "orders"}}, Buckets: delayspec.Delays{3 * time.Second}}).ForBroker(4)
	parking := p.Names.Parking()
	pols := map[string]managedPolicy{
		"rd.delay-queues": {Name: "rd.delay-queues", Definition: p.Policies[0].Definition},
		"shadow":          {Name: "shadow", Definition: map[string]any{"queue-leader-locator": "client-local"}},
		"limited":         {Name: "limited", Definition: map[string]any{"delivery-limit": json.Number("-1")}},
	}
	cases := []struct {
		policy, typ string
		major       int
		want        bool
	}{
		{"shadow", "quorum", 4, true},
		{"", "quorum", 4, true},
		{"rd.delay-queues", "quorum", 4, false},
		{"limited", "quorum", 4, false},
		{"shadow", "quorum", 3, false},
		{"shadow", "classic", 4, false},
	}
	for _, tc := range cases {
		queues := []managedObject{{Name: parking, Type: tc.typ, Policy: jsName(tc.policy)}}
		var got *PolicyProblem
		for _, pp := range policyProblemsOf(p, pols, nil, queues, nil, tc.major) {
			if pp.Object == parking && pp.Key == "delivery-limit" {
				got = &pp
			}
		}
		if (got != nil) != tc.want {
			t.Errorf("policy %q, %s, RabbitMQ %d: %v; want reported %v", tc.policy, tc.typ, tc.major, got, tc.want)
			continue
		}
		if got != nil && (!got.Warning || got.Breaks != BreaksDrops || got.Policy != tc.policy || !strings.Contains(got.Error(), "20")) {
			t.Errorf("policy %q: %+v", tc.policy, *got)
		}
	}
}

// TestOperatorPolicyOf: before RabbitMQ 4.3 a new queue's operator policy is worked out from
// the patterns: the highest priority (compared exactly above 2^53) among those of an apply-to
// that takes the queue's type, and a pattern Go's regexp cannot run is returned, not guessed.
func TestOperatorPolicyOf(t *testing.T) {
	ops := map[string]managedPolicy{
		"all":     {Name: "all", Pattern: `^rd\.`, ApplyTo: "queues", Priority: "99999999999999998"},
		"higher":  {Name: "higher", Pattern: `bucket`, ApplyTo: "quorum_queues", Priority: "99999999999999999"},
		"classic": {Name: "classic", Pattern: `.*`, ApplyTo: "classic_queues", Priority: "999999999999999999"},
		"pcre":    {Name: "pcre", Pattern: `^(?!x)rd`, ApplyTo: "queues", Priority: "1"},
	}
	for _, tc := range []struct{ name, typ, want string }{
		{"rd.bucket.3000ms", "quorum", "higher"},
		{"rd.parking", "quorum", "all"},
		{"rd.bucket.3000ms", "classic", "classic"},
		{"other", "stream", ""},
	} {
		got, bad := operatorPolicyOf(ops, managedObject{Name: tc.name, Type: tc.typ})
		if got != tc.want || !slices.Equal(bad, []string{"pcre"}) {
			t.Errorf("%s (%s): %q, unrunnable %v; want %q, [pcre]", tc.name, tc.typ, got, bad, tc.want)
		}
	}
}
