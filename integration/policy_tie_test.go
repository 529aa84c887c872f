//go:build integration

package integration

import (
	"context"
	"net/url"
	"testing"
	"time"

	"github.com/delaykit/rabbitdelay/integration/brokertest"
	"github.com/delaykit/rabbitdelay/internal/admin"
	"github.com/delaykit/rabbitdelay/internal/delayspec"
)

// queuePolicy is the policy the management API says is in effect on queue.
func queuePolicy(t *testing.T, env *brokertest.Env, queue string) string {
	t.Helper()
	var q struct {
		Policy any `json:"policy"`
	}
	if err := env.Broker.Management("GET", "api/queues/"+url.PathEscape(env.VHost)+"/"+url.PathEscape(queue), nil, &q); err != nil {
		t.Fatal(err)
	}
	s, _ := q.Policy.(string)
	return s
}

// TestPolicyTieAtTopologyPriority: a policy at exactly the topology's priority, named
// after the topology's own policy ("zzz-..." sorts after "rd.delay-queues"), sets message-ttl
// 1000 on the delay queues. RabbitMQ breaks the tie in no documented order (4.0.5 applied the
// name that sorts last); whichever policy it applies, PolicyProblems reads it from the broker,
// so delays that arrive early are always reported.
func TestPolicyTieAtTopologyPriority(t *testing.T) {
	t.Parallel()
	env := brokertest.NewEnv(t)
	m := topoNeedManagement(t, env)
	p, _, err := polApply(t, env, m, polSpec(delayspec.Quorum))
	if err != nil {
		t.Fatal(err)
	}
	bucketQ := p.Names.BucketQueue(3000)
	if err := polSet(env, "policies", "zzz-tie", `^rd\.`, "queues", p.Spec.PolicyPriority, map[string]any{"message-ttl": 1000}); err != nil {
		t.Fatal(err)
	}
	var inEffect string
	for i := 0; i < 30; i++ { // the management API refreshes the queue's policy name every 5 s
		time.Sleep(time.Second)
		if inEffect = queuePolicy(t, env, bucketQ); inEffect != "" && inEffect != p.Names.DelayQueuesPolicy() {
			break
		}
	}
	t.Logf("policy in effect on %s per the management API: %q", bucketQ, inEffect)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	probs, err := m.PolicyProblems(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("PolicyProblems: %d failing", len(admin.Failing(probs)))
	got := polConsume(t, env, "orders.ready")
	sent := polPublishBucket(t, env, p, 3000, "orders", 1, func(int) string { return "bound" })
	select {
	case a := <-got:
		early := a.at.Before(sent.Add(3 * time.Second))
		t.Logf("3 s bucket delivered after %v (early: %v)", a.at.Sub(sent).Round(time.Millisecond), early)
		if early && len(admin.Failing(probs)) == 0 {
			t.Errorf("delayed messages arrive early under policy %q at the topology's priority, and PolicyProblems reports nothing", inEffect)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("no delivery")
	}
}
