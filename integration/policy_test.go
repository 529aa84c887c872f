//go:build integration

package integration

import (
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/delaykit/rabbitdelay/integration/brokertest"
	"github.com/delaykit/rabbitdelay/internal/admin"
	"github.com/delaykit/rabbitdelay/internal/delayspec"
	"github.com/delaykit/rabbitdelay/internal/route"
	"github.com/delaykit/rabbitdelay/ttlbuckets"
)

// polSpec is the small topology the policy tests declare: a declared topic target "orders",
// a 3 s bucket, a radix-4 ladder up to a minute (a few dozen queues), a ready queue taking
// key "bound".
func polSpec(qt delayspec.QueueType) delayspec.Spec {
	return delayspec.Spec{Prefix: "rd", Targets: delayspec.Targets{{Name: "orders", Type: "topic"}}, Buckets: delayspec.Delays{3 * time.Second},
		Ladder: ttlbuckets.Ladder{Radix: 4, Max: time.Minute}, QueueType: qt, Plugin: delayspec.PluginOff,
		ReadyQueues: delayspec.ReadyQueues{{Queue: "orders.ready", Exchange: "orders", BindingKey: "bound"}}}
}

// polApply plans and applies spec in env's vhost with the management API.
func polApply(t testing.TB, env *brokertest.Env, m *admin.Management, spec delayspec.Spec) (*admin.Plan, *admin.Report, error) {
	t.Helper()
	p, err := admin.NewPlan(spec)
	if err != nil {
		t.Fatal(err)
	}
	rep, err := admin.Apply(topoTestCtx(t, 2*time.Minute), env.Dial(t), p, admin.ApplyOptions{Management: m})
	return p, rep, err
}

// polSet sets a policy (kind "policies") or an operator policy (kind "operator-policies") in
// env's vhost, as rabbitmqctl set_policy / set_operator_policy do, and returns the broker's
// refusal, if any.
func polSet(env *brokertest.Env, kind, name, pattern, applyTo string, priority int, def map[string]any) error {
	return env.Broker.Management("PUT", "api/"+kind+"/"+url.PathEscape(env.VHost)+"/"+url.PathEscape(name),
		map[string]any{"pattern": pattern, "apply-to": applyTo, "priority": priority, "definition": def}, nil)
}

func polClear(t *testing.T, env *brokertest.Env, kind, name string) {
	t.Helper()
	if err := env.Broker.Management("DELETE", "api/"+kind+"/"+url.PathEscape(env.VHost)+"/"+url.PathEscape(name), nil, nil); err != nil {
		t.Fatal(err)
	}
}

// polMajor is the broker's major version (brokerMajor: the connection's server properties).
func polMajor(t *testing.T, env *brokertest.Env) int {
	t.Helper()
	return brokerMajor(t, env)
}

// polWaitProblems polls PolicyProblems until cond holds (RabbitMQ applies a policy change to
// every matching queue in the background), failing after 20 s.
func polWaitProblems(t *testing.T, m *admin.Management, p *admin.Plan, what string, cond func([]admin.PolicyProblem) bool) []admin.PolicyProblem {
	t.Helper()
	ctx := topoTestCtx(t, 20*time.Second)
	for {
		probs, err := m.PolicyProblems(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		if cond(probs) {
			return probs
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%s: policy problems %v", what, probs)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// polFind returns the problems about key.
func polFind(probs []admin.PolicyProblem, key string) []admin.PolicyProblem {
	var out []admin.PolicyProblem
	for _, pp := range probs {
		if pp.Key == key {
			out = append(out, pp)
		}
	}
	return out
}

// TestPolicyKeysShadowedOrReported sets, for every queue policy key that can break a
// guarantee, a catch-all policy below the topology's priority (shadowed: no effect, nothing
// reported), one above it (reported, naming policy, key, value and what breaks; apply fails
// with ErrPolicy), and an operator policy (reported where RabbitMQ accepts the key as an
// operator policy: on 3.10 only message-ttl, expires, max-length, max-length-bytes and
// delivery-limit; 4.0 adds overflow). Keys whose queue argument wins (dead-letter-exchange,
// dead-letter-strategy) are never reported. Quorum queues (the default).
func TestPolicyKeysShadowedOrReported(t *testing.T) {
	t.Parallel()
	cases := []struct {
		key    string
		value  any
		breaks admin.Breakage // "" when harmless even where it applies
		object string         // a queue it is reported on
		opOK   func(major int) bool
	}{
		{"message-ttl", 1000, admin.BreaksEarly, "rd.bucket.3000ms", func(int) bool { return true }},
		{"expires", 600000, admin.BreaksDeletes, "rd.bucket.3000ms", func(int) bool { return true }},
		{"max-length", 10, admin.BreaksStalls, "rd.bucket.3000ms", func(int) bool { return true }},
		{"max-length-bytes", 1000, admin.BreaksStalls, "rd.bucket.3000ms", func(int) bool { return true }},
		{"overflow", "drop-head", admin.BreaksDrops, "rd.bucket.3000ms", func(major int) bool { return major >= 4 }},
		{"dead-letter-routing-key", "elsewhere", admin.BreaksRouting, "rd.bucket.3000ms", func(int) bool { return false }},
		{"dead-letter-exchange", "elsewhere", "", "", func(int) bool { return false }},
		{"dead-letter-strategy", "at-most-once", "", "", func(int) bool { return false }},
		{"delivery-limit", 2, admin.BreaksDrops, "rd.parking", func(int) bool { return true }},
	}
	for _, tc := range cases {
		t.Run(tc.key, func(t *testing.T) {
			t.Parallel()
			env := brokertest.NewEnv(t)
			m := topoNeedManagement(t, env)
			major := polMajor(t, env)
			p, _, err := polApply(t, env, m, polSpec(delayspec.Quorum))
			if err != nil {
				t.Fatalf("apply on a fresh vhost: %v", err)
			}
			def := map[string]any{tc.key: tc.value}

			// Below the topology's priority: shadowed (on the topology's own queues; a ready
			// queue has no policy of the topology: TestPolicyReadyAndParkingKeys).
			if err := polSet(env, "policies", "low", `^rd\.`, "queues", 10, def); err != nil {
				t.Fatal(err)
			}
			time.Sleep(500 * time.Millisecond) // let a wrong result show if there is one
			polWaitProblems(t, m, p, "low-priority policy", func(probs []admin.PolicyProblem) bool { return len(polFind(probs, tc.key)) == 0 })
			// The management API names the policy in effect with the queue statistics (every 5 s).
			for start := time.Now(); ; {
				var q struct{ Policy string }
				topoMgmtJSON(t, env, "api/queues/"+url.PathEscape(env.VHost)+"/"+url.PathEscape("rd.bucket.3000ms"), &q)
				if q.Policy == p.Names.DelayQueuesPolicy() {
					break
				}
				if time.Since(start) > 2*time.Minute { // bounds a hang
					t.Fatalf("policy in effect on rd.bucket.3000ms: %q, want %q (the low-priority policy shadowed)", q.Policy, p.Names.DelayQueuesPolicy())
				}
				time.Sleep(500 * time.Millisecond)
			}
			polClear(t, env, "policies", "low")

			// Above it: reported, and apply fails.
			if err := polSet(env, "policies", "high", ".*", "queues", delayspec.DefaultPolicyPriority+1, def); err != nil {
				t.Fatal(err)
			}
			if tc.breaks == "" {
				time.Sleep(500 * time.Millisecond)
				polWaitProblems(t, m, p, "high-priority policy with a key whose argument wins", func(probs []admin.PolicyProblem) bool {
					return len(polFind(probs, tc.key)) == 0
				})
			} else {
				probs := polWaitProblems(t, m, p, "high-priority policy", func(probs []admin.PolicyProblem) bool {
					for _, pp := range polFind(probs, tc.key) {
						if pp.Object == tc.object {
							return true
						}
					}
					return false
				})
				for _, pp := range polFind(probs, tc.key) {
					if pp.Object != tc.object {
						continue
					}
					if pp.Policy != "high" || pp.Operator || pp.Breaks != tc.breaks || fmt.Sprint(pp.Value) != fmt.Sprint(tc.value) ||
						!strings.Contains(pp.Error(), `policy "high" sets `+tc.key) || !strings.Contains(pp.Error(), tc.object) {
						t.Errorf("problem %+v\n%s", pp, pp)
					}
				}
				_, rep, err := polApply(t, env, m, polSpec(delayspec.Quorum))
				if tc.key != "delivery-limit" && (!errors.Is(err, admin.ErrPolicy) || len(rep.PolicyProblems) == 0) {
					t.Errorf("apply under a high-priority %s policy: %v, want ErrPolicy", tc.key, err)
				}
				if tc.key == "delivery-limit" && err != nil {
					t.Errorf("apply with a delivery-limit on the parking queue (a warning): %v", err)
				}
			}
			polClear(t, env, "policies", "high")

			// Operator policy: merged with ours, reported.
			err = polSet(env, "operator-policies", "op", ".*", "queues", 0, def)
			if !tc.opOK(major) {
				if err == nil || !strings.Contains(err.Error(), "not recognised") {
					t.Errorf("RabbitMQ %d accepted %s in an operator policy: %v", major, tc.key, err)
				}
				return
			}
			if err != nil {
				t.Fatalf("operator policy with %s on RabbitMQ %d: %v", tc.key, major, err)
			}
			probs := polWaitProblems(t, m, p, "operator policy", func(probs []admin.PolicyProblem) bool {
				for _, pp := range polFind(probs, tc.key) {
					if pp.Object == tc.object && pp.Operator && pp.Policy == "op" {
						return true
					}
				}
				return false
			})
			t.Logf("RabbitMQ %d, operator policy %s=%v: %s", major, tc.key, tc.value, polFind(probs, tc.key)[0])
			polClear(t, env, "operator-policies", "op")
		})
	}
}

// polArrival is a delivery and when it arrived.
type polArrival struct {
	d  amqp.Delivery
	at time.Time
}

// polConsume consumes queue (auto-ack) and stamps each delivery's arrival.
func polConsume(t testing.TB, env *brokertest.Env, queue string) <-chan polArrival {
	t.Helper()
	ch := env.Channel(t)
	ds, err := ch.Consume(queue, "", true, false, false, false, nil)
	if err != nil {
		t.Fatalf("consume %s: %v", queue, err)
	}
	out := make(chan polArrival, 4096)
	go func() {
		for d := range ds {
			out <- polArrival{d: d, at: time.Now()}
		}
		close(out)
	}()
	return out
}

// polPublishBucket publishes n messages for target through the bucket exchange of p (bucket
// of ms milliseconds) with routing key key(i), persistent, and waits for every confirm.
// It returns when the last was published.
func polPublishBucket(t testing.TB, env *brokertest.Env, p *admin.Plan, ms int64, target string, n int, key func(i int) string) time.Time {
	t.Helper()
	ch := env.Channel(t)
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	ctx := topoTestCtx(t, 2*time.Minute)
	var dcs []*amqp.DeferredConfirmation
	var last time.Time
	for i := range n {
		dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, p.Names.BucketExchange(), key(i), true, false, amqp.Publishing{
			DeliveryMode: amqp.Persistent, MessageId: fmt.Sprint(i), Body: []byte(key(i)),
			Headers: amqp.Table{route.BucketHeader: ms, route.TargetHeader: target}})
		if err != nil {
			t.Fatal(err)
		}
		last = time.Now()
		dcs = append(dcs, dc)
	}
	for _, dc := range dcs {
		if ok, err := dc.WaitContext(ctx); !ok || err != nil {
			t.Fatalf("publisher confirm: %v %v", ok, err)
		}
	}
	return last
}

// TestPolicyShadowedKeepsDelaysAndQueues shows on real messages what TestPolicyKeys... checks
// in the management API: under a catch-all policy {message-ttl: 1000, expires: 3000} of a
// lower priority, a 3 s bucket still takes 3 s and its queue outlives 3 s unused; under the
// same values as an operator policy (which no policy can shadow) RabbitMQ delivers early and
// deletes the queue, and both are reported.
func TestPolicyShadowedKeepsDelaysAndQueues(t *testing.T) {
	t.Parallel()
	env := brokertest.NewEnv(t)
	m := topoNeedManagement(t, env)
	p, _, err := polApply(t, env, m, polSpec(delayspec.Quorum))
	if err != nil {
		t.Fatal(err)
	}
	bucketQ := p.Names.BucketQueue(3000)
	if err := polSet(env, "policies", "catch-all", ".*", "queues", 100, map[string]any{"message-ttl": 1000, "expires": 3000}); err != nil {
		t.Fatal(err)
	}
	got := polConsume(t, env, "orders.ready")
	sent := polPublishBucket(t, env, p, 3000, "orders", 1, func(int) string { return "bound" })
	select {
	case a := <-got:
		if a.at.Before(sent.Add(3 * time.Second)) {
			t.Errorf("under a shadowed message-ttl policy the 3 s bucket delivered after %v", a.at.Sub(sent))
		}
	case <-time.After(30 * time.Second):
		t.Fatal("no delivery 30 s after publishing into the 3 s bucket")
	}
	time.Sleep(3 * time.Second) // the queue is now unused for longer than expires
	if _, err := env.Channel(t).QueueDeclarePassive(bucketQ, true, false, false, false, nil); err != nil {
		t.Fatalf("%s after an unused time beyond a shadowed expires: %v", bucketQ, err)
	}

	// The same as an operator policy: merged, the lower value wins.
	polClear(t, env, "policies", "catch-all")
	if err := polSet(env, "operator-policies", "op-ttl", ".*", "queues", 0, map[string]any{"message-ttl": 1000}); err != nil {
		t.Fatal(err)
	}
	probs := polWaitProblems(t, m, p, "operator message-ttl", func(probs []admin.PolicyProblem) bool {
		for _, pp := range probs {
			if pp.Object == bucketQ && pp.Key == "message-ttl" && pp.Breaks == admin.BreaksEarly && pp.Operator {
				return true
			}
		}
		return false
	})
	t.Logf("reported: %s", polFind(probs, "message-ttl")[0])
	sent = polPublishBucket(t, env, p, 3000, "orders", 1, func(int) string { return "bound" })
	select {
	case a := <-got:
		if !a.at.Before(sent.Add(3 * time.Second)) {
			t.Errorf("operator message-ttl 1000: the 3 s bucket delivered after %v; RabbitMQ should take the lower TTL", a.at.Sub(sent))
		}
		t.Logf("operator message-ttl 1000: the 3 s bucket delivered after %v (early)", a.at.Sub(sent).Round(time.Millisecond))
	case <-time.After(30 * time.Second):
		t.Fatal("no delivery 30 s after publishing into the 3 s bucket")
	}
	polClear(t, env, "operator-policies", "op-ttl")
	if err := polSet(env, "operator-policies", "op-expires", ".*", "queues", 0, map[string]any{"expires": 2000}); err != nil {
		t.Fatal(err)
	}
	polWaitProblems(t, m, p, "operator expires", func(probs []admin.PolicyProblem) bool {
		for _, pp := range probs {
			if pp.Object == bucketQ && pp.Key == "expires" && pp.Breaks == admin.BreaksDeletes {
				return true
			}
		}
		return false
	})
	ctx := topoTestCtx(t, time.Minute)
	for {
		_, err := env.Channel(t).QueueDeclarePassive(bucketQ, true, false, false, false, nil)
		var ae *amqp.Error
		if errors.As(err, &ae) && ae.Code == amqp.NotFound {
			break // RabbitMQ deleted it, as reported
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%s still exists a minute after an operator policy expires 2000", bucketQ)
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// TestPolicyExchangeAlternateReported: a policy giving one of the topology's own exchanges an
// alternate exchange (which would take messages the publisher should get back) is reported as
// wrong routing; the dispatch exchange's own argument wins over any policy and is not.
func TestPolicyExchangeAlternateReported(t *testing.T) {
	t.Parallel()
	env := brokertest.NewEnv(t)
	m := topoNeedManagement(t, env)
	p, _, err := polApply(t, env, m, polSpec(delayspec.Quorum))
	if err != nil {
		t.Fatal(err)
	}
	if err := polSet(env, "policies", "ae", `^rd\.(buckets|dispatch)$`, "exchanges", 5, map[string]any{"alternate-exchange": "elsewhere"}); err != nil {
		t.Fatal(err)
	}
	probs := polWaitProblems(t, m, p, "alternate-exchange policy", func(probs []admin.PolicyProblem) bool {
		return len(polFind(probs, "alternate-exchange")) > 0
	})
	got := polFind(probs, "alternate-exchange")
	if len(got) != 1 || got[0].Object != p.Names.BucketExchange() || got[0].Breaks != admin.BreaksRouting || got[0].Policy != "ae" {
		t.Errorf("alternate-exchange problems %v, want one on %s (wrong routing)", got, p.Names.BucketExchange())
	}
}

// privateNode reports whether the broker under test is a private node that scripts/broker
// started (BROKER_STATE names its state, whose kind is "local"): only such a node can be
// reconfigured or restarted by a test.
func privateNode() bool {
	state := os.Getenv("BROKER_STATE")
	if state == "" {
		return false
	}
	kind, err := os.ReadFile(filepath.Join(state, "kind"))
	return err == nil && strings.TrimSpace(string(kind)) == "local"
}

// needPrivateNode skips tb, with why it needs node control, when the broker under test is not a
// private node of scripts/broker (AMQP_URL, Docker); under CI=true that is a failure instead:
// `make test` always starts one.
func needPrivateNode(tb testing.TB, why string) {
	tb.Helper()
	if privateNode() {
		return
	}
	msg := fmt.Sprintf("needs a private node of scripts/broker (BROKER_STATE with kind local) to %s; the broker under test is not one (AMQP_URL or Docker); run it under `make test`, or `scripts/broker run -- go test ...` without AMQP_URL", why)
	if brokertest.InCI() {
		tb.Fatal(msg)
	}
	tb.Skip(msg)
}

// brokerCtl runs `scripts/broker ctl ARGS` on the private node the tests use, when
// BROKER_STATE names it (scripts/broker env exports it); ok is false otherwise.
func brokerCtl(t testing.TB, args ...string) (out string, ok bool) {
	t.Helper()
	if !privateNode() {
		return "", false
	}
	cmd := exec.Command("../scripts/broker", append([]string{"ctl"}, args...)...)
	b, err := cmd.CombinedOutput()
	if err != nil {
		t.Logf("scripts/broker ctl %v: %v\n%s", args, err, b)
		return string(b), false
	}
	return string(b), true
}

// TestPolicyLengthLimitDropsHeadEarly: a length limit on a delay queue whose overflow in effect
// drops the head (a quorum queue under a policy's drop-head or reject-publish-dlx, which quorum
// queues take as drop-head; a classic queue, which has no x-overflow, by default) dead-letters
// what it drops into the next hop: a 3 s bucket's messages reach their target at once, and
// PolicyProblems reports max-length as early.
func TestPolicyLengthLimitDropsHeadEarly(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		qt   delayspec.QueueType
		def  map[string]any
	}{
		{"quorum drop-head", delayspec.Quorum, map[string]any{"max-length": 0, "overflow": "drop-head"}},
		{"quorum reject-publish-dlx", delayspec.Quorum, map[string]any{"max-length": 0, "overflow": "reject-publish-dlx"}},
		{"classic default overflow", delayspec.Classic, map[string]any{"max-length": 0}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			env := brokertest.NewEnv(t)
			m := topoNeedManagement(t, env)
			p, _, err := polApply(t, env, m, polSpec(tc.qt))
			if err != nil {
				t.Fatalf("apply on a fresh vhost: %v", err)
			}
			if err := polSet(env, "policies", "limit", `^rd\.bucket\.`, "queues", delayspec.DefaultPolicyPriority+1, tc.def); err != nil {
				t.Fatal(err)
			}
			bucket := p.Names.BucketQueue(3000)
			probs := polWaitProblems(t, m, p, "length limit", func(probs []admin.PolicyProblem) bool {
				for _, pp := range polFind(probs, "max-length") {
					if pp.Object == bucket {
						return true
					}
				}
				return false
			})
			for _, pp := range polFind(probs, "max-length") {
				if pp.Object == bucket && (pp.Breaks != admin.BreaksEarly || !strings.Contains(pp.Error(), "early")) {
					t.Errorf("max-length on %s: %+v\n%s", bucket, pp, pp)
				}
			}
			// RabbitMQ applies a policy to a queue in the background: publish once the
			// management API shows it in effect.
			for start := time.Now(); ; {
				var q struct{ Policy string }
				topoMgmtJSON(t, env, "api/queues/"+url.PathEscape(env.VHost)+"/"+url.PathEscape(bucket), &q)
				if q.Policy == "limit" {
					break
				}
				if time.Since(start) > 2*time.Minute {
					t.Fatalf("policy in effect on %s: %q, want limit", bucket, q.Policy)
				}
				time.Sleep(200 * time.Millisecond)
			}
			got := polConsume(t, env, "orders.ready")
			const n = 3
			sent := time.Now()
			polPublishBucket(t, env, p, 3000, "orders", n, func(int) string { return "bound" })
			for i := range n {
				select {
				case a := <-got:
					if early := 3*time.Second - a.at.Sub(sent); early <= time.Second {
						t.Errorf("message %d arrived %v after publishing, not early: the policy did not drop it", i, a.at.Sub(sent))
					}
				case <-time.After(30 * time.Second):
					t.Fatalf("message %d: nothing arrived", i)
				}
			}
		})
	}
}

// TestPolicyPatternLongPrefix: the delay-queue policy's pattern listed every delay queue by
// name, and RabbitMQ refused it (400, "regular expression is too large") from about 32 KB: the
// default ladder under a 150-byte prefix, 5 copies of it, 3 of a radix-32 ladder. Built from the
// naming rule, it is short: apply sets it, status passes, and it is the policy in effect on the
// delay queues (no policy problem).
func TestPolicyPatternLongPrefix(t *testing.T) {
	t.Parallel()
	env := brokertest.NewEnv(t)
	m := topoNeedManagement(t, env)
	spec := polSpec(delayspec.Quorum)
	spec.Prefix = env.Prefix + "." + strings.Repeat("p", 150-len(env.Prefix))
	spec.Ladder = ttlbuckets.Ladder{} // the default: 330 delay queues, about 57 KB of names
	p, _, err := polApply(t, env, m, spec)
	if err != nil {
		t.Fatalf("apply with a 151-byte prefix: %v", err)
	}
	ctx := topoTestCtx(t, 2*time.Minute)
	if _, err := admin.Status(ctx, env.Dial(t), p, admin.StatusOptions{Management: m}); err != nil {
		t.Errorf("status after apply: %v", err)
	}
	polWaitProblems(t, m, p, "no policy problem", func(probs []admin.PolicyProblem) bool { return len(admin.Failing(probs)) == 0 })
}

// TestPolicyDeliveryLimit4x: RabbitMQ 4.x gives a quorum queue without a delivery limit one
// of 20, and a message returned more often is dead-lettered or dropped. The parking queue (no
// dead-letter exchange) dropped a parked message that a reader had given back 20 times; on 4.x
// the delay-queue policy now sets delivery-limit -1 (3.x refuses -1 and has no default), so it
// is kept through 25 returns on both versions. A quorum ready queue declared without a limit
// (AMQPDELAY_READY_DELIVERY_LIMIT=-1) and without a dead-letter exchange drops on 4.x: apply
// and status report it there (BreaksDrops), not on 3.x.
func TestPolicyDeliveryLimit4x(t *testing.T) {
	t.Parallel()
	t.Run("parking queue", func(t *testing.T) {
		t.Parallel()
		env := brokertest.NewEnv(t)
		m := topoNeedManagement(t, env)
		p, _, err := polApply(t, env, m, polSpec(delayspec.Quorum))
		if err != nil {
			t.Fatalf("apply: %v", err)
		}
		ch := env.Channel(t)
		parking := p.Names.Parking()
		if err := ch.Publish("", parking, false, false, amqp.Publishing{MessageId: "parked", DeliveryMode: amqp.Persistent}); err != nil {
			t.Fatal(err)
		}
		for i := range 25 {
			var d amqp.Delivery
			deadline := time.Now().Add(10 * time.Second)
			for {
				got, ok, err := ch.Get(parking, false)
				if err != nil {
					t.Fatal(err)
				}
				if ok {
					d = got
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("the parked message is gone after %d returns (RabbitMQ %d)", i, polMajor(t, env))
				}
				time.Sleep(20 * time.Millisecond)
			}
			// A failed return: basic.reject counts toward a delivery limit on every version
			// (from RabbitMQ 4.3 on, basic.nack with requeue does not, and would test nothing).
			if err := d.Reject(true); err != nil {
				t.Fatal(err)
			}
		}
		waitFor(t, 10*time.Second, "the parked message back in the parking queue", func() bool { return queueLen(t, env.Channel(t), parking) == 1 })
	})
	t.Run("ready queue without a limit", func(t *testing.T) {
		t.Parallel()
		env := brokertest.NewEnv(t)
		m := topoNeedManagement(t, env)
		spec := polSpec(delayspec.Quorum)
		spec.ReadyDeliveryLimit = delayspec.NoReadyDeliveryLimit
		p, rep, err := polApply(t, env, m, spec)
		var flagged bool
		for _, pp := range rep.PolicyProblems {
			if pp.Object == "orders.ready" && pp.Key == "delivery-limit" && pp.Breaks == admin.BreaksDrops && !pp.Warning {
				flagged = true
			}
		}
		if four := polMajor(t, env) >= 4; four != (flagged && errors.Is(err, admin.ErrPolicy)) || (!four && err != nil) {
			t.Errorf("RabbitMQ %d, ready queue without a delivery limit: apply = %v, flagged %v; want ErrPolicy and the problem on 4.x only",
				polMajor(t, env), err, flagged)
		}
		_, serr := admin.Status(topoTestCtx(t, time.Minute), env.Dial(t), p, admin.StatusOptions{Management: m})
		if polMajor(t, env) >= 4 != errors.Is(serr, admin.ErrPolicy) {
			t.Errorf("RabbitMQ %d: status = %v", polMajor(t, env), serr)
		}
	})
}

// TestPolicyPCREPatternSeenAtOnce: a policy whose pattern only PCRE takes (a lookahead, a
// possessive quantifier; Go's regexp refuses both) applies as the broker decides, and its
// message-ttl is reported on the first call after it is set: the policy in effect is read from
// the queue records, not from the statistics (up to 5 s late).
func TestPolicyPCREPatternSeenAtOnce(t *testing.T) {
	t.Parallel()
	env := brokertest.NewEnv(t)
	m := topoNeedManagement(t, env)
	spec := polSpec(delayspec.Quorum)
	spec.Prefix = env.Prefix
	p, _, err := polApply(t, env, m, spec)
	if err != nil {
		t.Fatal(err)
	}
	pattern := `^(?!zzz)` + regexp.QuoteMeta(env.Prefix) + `\.(bucket|ladder)`
	if err := polSet(env, "policies", "pcre", pattern, "queues", 2_000_000, map[string]any{"message-ttl": 500}); err != nil {
		t.Fatal(err)
	}
	probs, err := m.PolicyProblems(topoTestCtx(t, 30*time.Second), p)
	if err != nil {
		t.Fatal(err)
	}
	bucket := p.Names.BucketQueue(3000)
	var early bool
	for _, pp := range polFind(probs, "message-ttl") {
		if pp.Policy == "pcre" && pp.Object == bucket && pp.Breaks == admin.BreaksEarly && !pp.Warning {
			early = true
		}
	}
	if !early {
		t.Errorf("first PolicyProblems after setting policy pcre (%s): no early message-ttl problem on %s: %v", pattern, bucket, probs)
	}
	polClear(t, env, "policies", "pcre")

	possessive := `^` + regexp.QuoteMeta(env.Prefix) + `\.bucket.*+$`
	if err := polSet(env, "policies", "possessive", possessive, "queues", 2_000_000, map[string]any{"message-ttl": 500}); err != nil {
		t.Fatal(err)
	}
	probs, err = m.PolicyProblems(topoTestCtx(t, 30*time.Second), p)
	if err != nil {
		t.Fatal(err)
	}
	early = false
	for _, pp := range polFind(probs, "message-ttl") {
		if pp.Policy == "possessive" && pp.Object == bucket && pp.Breaks == admin.BreaksEarly && !pp.Warning {
			early = true
		}
	}
	if !early {
		t.Errorf("first PolicyProblems after setting policy possessive (%s): no early message-ttl problem on %s: %v", possessive, bucket, probs)
	}
	polClear(t, env, "policies", "possessive")
}
