//go:build integration

package integration

import (
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/delaykit/rabbitdelay/integration/brokertest"
	"github.com/delaykit/rabbitdelay/internal/delayspec"
	"github.com/delaykit/rabbitdelay/internal/route"
)

// polUnroutableRun is the input of the stall report: a 3 s bucket, 1,100 messages for target
// "orders" with routing keys no queue is bound for, then one with the bound key. With the
// targets policy (orders' alternate exchange is <prefix>.due-unroutable) the 1,100 end in the
// parking queue with their target header and the bound one arrives when due; the bucket
// queue keeps nothing in its dead-letter state.
func polUnroutableRun(t *testing.T, env *brokertest.Env, qt delayspec.QueueType) {
	t.Helper()
	const unbound = 1100
	m := topoNeedManagement(t, env)
	p, rep, err := polApply(t, env, m, polSpec(qt))
	if err != nil {
		t.Fatalf("apply: %v", err)
	}
	if len(rep.PolicyProblems) != 0 {
		t.Fatalf("policy problems on a fresh vhost: %v", rep.PolicyProblems)
	}
	got := polConsume(t, env, "orders.ready")
	polPublishBucket(t, env, p, 3000, "orders", unbound, func(i int) string { return fmt.Sprintf("unbound.%d", i) })
	sent := polPublishBucket(t, env, p, 3000, "orders", 1, func(int) string { return "bound" })
	due := sent.Add(3 * time.Second)
	select {
	case a := <-got:
		late := a.at.Sub(due)
		t.Logf("%s: the bound message arrived %v after due (%d unbound ones due before it)", qt, late.Round(time.Millisecond), unbound)
		if string(a.d.Body) != "bound" {
			t.Errorf("delivered %q", a.d.Body)
		}
		if late > maxLateness {
			t.Errorf("the bound message arrived %v after due (more than %v): held up by the unroutable ones", late, maxLateness)
		}
	case <-time.After(60 * time.Second):
		t.Fatalf("%s: the bound message had not arrived 57 s after due: the unroutable ones stall the bucket", qt)
	}
	// Every unroutable one is parked, with its target header.
	ctx := topoTestCtx(t, time.Minute)
	for {
		q, err := env.Channel(t).QueueDeclarePassive(p.Names.Parking(), true, false, false, false, nil)
		if err != nil {
			t.Fatal(err)
		}
		if q.Messages == unbound {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("parking holds %d messages, want %d", q.Messages, unbound)
		case <-time.After(200 * time.Millisecond):
		}
	}
	parked := polConsume(t, env, p.Names.Parking())
	for i := range 3 {
		a := <-parked
		if a.d.Headers[route.TargetHeader] != "orders" || !strings.HasPrefix(a.d.RoutingKey, "unbound.") {
			t.Errorf("parked message %d: routing key %q, headers %v", i, a.d.RoutingKey, a.d.Headers)
		}
	}
	// And nothing is held in the bucket queue's dead-letter state (statistics lag: poll).
	for qt == delayspec.Quorum {
		var q struct {
			MessagesDLX *int64 `json:"messages_dlx"`
		}
		topoMgmtJSON(t, env, "api/queues/"+url.PathEscape(env.VHost)+"/"+url.PathEscape(p.Names.BucketQueue(3000)), &q)
		if q.MessagesDLX != nil && *q.MessagesDLX == 0 {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("messages_dlx of the bucket queue: %v, want 0", q.MessagesDLX)
		case <-time.After(time.Second):
		}
	}
}

// TestPolicyDueUnroutableParkedQuorum: the stall report's input on quorum delay queues, with
// the broker's dead_letter_worker_consumer_prefetch as configured (1,024 on scripts/broker's
// nodes): nothing stalls.
func TestPolicyDueUnroutableParkedQuorum(t *testing.T) {
	t.Parallel()
	polUnroutableRun(t, brokertest.NewEnv(t), delayspec.Quorum)
}

// TestPolicyDueUnroutableParkedClassic: the same on classic delay queues (which dropped the
// unroutable ones before).
func TestPolicyDueUnroutableParkedClassic(t *testing.T) {
	t.Parallel()
	polUnroutableRun(t, brokertest.NewEnv(t), delayspec.Classic)
}

// TestPolicyDueUnroutableParkedPrefetch32 runs the quorum case with RabbitMQ's default
// dead_letter_worker_consumer_prefetch of 32, set on the running node before the queues are
// declared (each queue's dead-letter worker reads it when it starts), and restored after.
// It needs scripts/broker's private node (BROKER_STATE) and is not parallel: the setting is
// the node's.
func TestPolicyDueUnroutableParkedPrefetch32(t *testing.T) {
	env := brokertest.NewEnv(t)
	topoNeedManagement(t, env)
	needPrivateNode(t, "change dead_letter_worker_consumer_prefetch")
	before, ok := brokerCtl(t, "eval", "application:get_env(rabbit, dead_letter_worker_consumer_prefetch).")
	if !ok {
		t.Fatalf("scripts/broker ctl eval failed on the private node: %s", before)
	}
	restore := "application:unset_env(rabbit, dead_letter_worker_consumer_prefetch)."
	if v := strings.TrimSpace(before); strings.HasPrefix(v, "{ok,") {
		restore = fmt.Sprintf("application:set_env(rabbit, dead_letter_worker_consumer_prefetch, %s).", strings.TrimSuffix(strings.TrimPrefix(v, "{ok,"), "}"))
	}
	if _, ok := brokerCtl(t, "eval", "application:set_env(rabbit, dead_letter_worker_consumer_prefetch, 32)."); !ok {
		t.Fatal("cannot set dead_letter_worker_consumer_prefetch")
	}
	t.Cleanup(func() { brokerCtl(t, "eval", restore) })
	t.Logf("dead_letter_worker_consumer_prefetch was %s, now 32", strings.TrimSpace(before))
	polUnroutableRun(t, env, delayspec.Quorum)
}

// TestPolicyTargetsOthersUnroutableUnchanged: the targets policy parks only what came through
// the dispatch exchange for that target: another application's publish to the target that no
// queue takes is still returned to a mandatory publisher and dropped otherwise, and a target's
// own alternate exchange (an argument) wins and is reported as a warning. An amq.* target
// (amq.topic) takes the policy too.
func TestPolicyTargetsOthersUnroutableUnchanged(t *testing.T) {
	t.Parallel()
	env := brokertest.NewEnv(t)
	m := topoNeedManagement(t, env)
	ch := env.Channel(t)
	for _, x := range []string{"own-ae", "own-ae.catch"} {
		if err := ch.ExchangeDeclare(x, amqp.ExchangeFanout, true, false, false, false, nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := ch.ExchangeDeclare("with-ae", amqp.ExchangeTopic, true, false, false, false, amqp.Table{"alternate-exchange": "own-ae"}); err != nil {
		t.Fatal(err)
	}
	spec := polSpec(delayspec.Quorum)
	spec.Targets = append(spec.Targets, delayspec.Target{Name: "amq.topic"}, delayspec.Target{Name: "with-ae"})
	p, rep, err := polApply(t, env, m, spec)
	if err != nil {
		t.Fatalf("apply (a target's own alternate exchange is a warning, not a failure): %v", err)
	}
	if w := polFind(rep.PolicyProblems, "alternate-exchange"); len(w) != 1 || w[0].Object != "with-ae" || !w[0].Warning || fmt.Sprint(w[0].Value) != "own-ae" {
		t.Errorf("problems %v, want one warning about with-ae's own alternate exchange", rep.PolicyProblems)
	}
	var x struct{ Policy string }
	topoMgmtJSON(t, env, "api/exchanges/"+url.PathEscape(env.VHost)+"/amq.topic", &x)
	if x.Policy != p.Names.TargetsPolicy() {
		t.Errorf("policy on amq.topic: %q, want %q", x.Policy, p.Names.TargetsPolicy())
	}

	// Another application publishes to the targets directly, with keys nothing takes.
	pub := env.Channel(t)
	if err := pub.Confirm(false); err != nil {
		t.Fatal(err)
	}
	returns := pub.NotifyReturn(make(chan amqp.Return, 10))
	ctx := topoTestCtx(t, time.Minute)
	for _, target := range []string{"orders", "amq.topic"} {
		for _, mandatory := range []bool{true, false} {
			dc, err := pub.PublishWithDeferredConfirmWithContext(ctx, target, "nobody", mandatory, false, amqp.Publishing{Body: []byte("other app")})
			if err != nil {
				t.Fatal(err)
			}
			if ok, err := dc.WaitContext(ctx); !ok || err != nil {
				t.Fatalf("confirm: %v %v", ok, err)
			}
			select {
			case r := <-returns:
				if !mandatory {
					t.Errorf("%s: a publish without mandatory was returned: %v", target, r.ReplyText)
				}
			case <-time.After(time.Second):
				if mandatory {
					t.Errorf("%s: a mandatory publish nothing takes was not returned (the alternate exchange took it)", target)
				}
			}
		}
	}
	// None of them was parked.
	time.Sleep(500 * time.Millisecond)
	if q, err := env.Channel(t).QueueDeclarePassive(p.Names.Parking(), true, false, false, false, nil); err != nil || q.Messages != 0 {
		t.Errorf("parking after other applications' unroutable publishes: %+v %v, want empty", q, err)
	}
	// Due messages for amq.topic and with-ae that nothing takes: the first parked, the second
	// in with-ae's own alternate exchange's hands.
	catch := env.Name("catch")
	if _, err := ch.QueueDeclare(catch, true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if err := ch.QueueBind(catch, "", "own-ae", false, nil); err != nil {
		t.Fatal(err)
	}
	polPublishBucket(t, env, p, 3000, "amq.topic", 1, func(int) string { return "nobody.amq" })
	polPublishBucket(t, env, p, 3000, "with-ae", 1, func(int) string { return "nobody.own" })
	for _, w := range []struct{ queue, key string }{{p.Names.Parking(), "nobody.amq"}, {catch, "nobody.own"}} {
		select {
		case a := <-polConsume(t, env, w.queue):
			if a.d.RoutingKey != w.key {
				t.Errorf("%s got %q, want %q", w.queue, a.d.RoutingKey, w.key)
			}
		case <-time.After(30 * time.Second):
			t.Errorf("nothing in %s 27 s after due", w.queue)
		}
	}
}
