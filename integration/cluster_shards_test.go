//go:build integration

package integration

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/delaykit/rabbitdelay/amqpdelay"
	"github.com/delaykit/rabbitdelay/internal/admin"
	"github.com/delaykit/rabbitdelay/ttlbuckets"
)

// TestClusterShardsSpreadBurst: on a 3-node cluster, three shards of the ladder added to a
// deployed ladder (shard 0, placed by the balanced policy) by an apply with a connection per
// node and the management API have the copies of every ladder queue led by three different
// nodes (status reports no shards sharing a leader). A burst of messages all due at the same instant,
// published through a Publisher with the same copies, arrives whole (0 lost, 0 early), and
// the last hop (the dead-lettering out of the queue named first in each delivery's x-death) is
// done by each node for within 20 % of a third of the messages: the node that leads the queue
// dead-letters its messages (quorum queues' at-least-once dead-lettering runs on the leader).
// That last hop is in the copies' last-hop queues, which must be led by three nodes too; the
// test fails if a delivery's last hop was not a last-hop queue.
// Runs under `make cluster-test` (skips without AMQP_URLS of 3+ nodes and BROKER_STATE).
//
// No timing is asserted; waits have generous deadlines (3 nodes on a busy 2-core machine).
func TestClusterShardsSpreadBurst(t *testing.T) {
	c := getCluster(t)
	env, m := clusterMgmtEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	spec := shardsSpec(env)
	// Six levels (radix 8 up to 262,143 ms), so that the burst's last hop, at level 4 (delays
	// of 4.1-32.8 s), is taken in the copies' last-hop queues, not in the top level's queues.
	spec.Ladder.Max = 262143 * time.Millisecond
	// Shortest-first, whose last hop is the highest digit's, as the delays above assume; the
	// default order's copies are tested in TestShardsSingleNode.
	spec.Ladder.Order = ttlbuckets.ShortestFirst
	p, err := admin.NewPlan(spec)
	if err != nil {
		t.Fatal(err)
	}

	// Apply through node 1, placing the ladder queues through a connection per node.
	var nodes []*amqp.Connection
	for i := range c.URLs {
		conn, err := clusterDial(c.nodeURL(i+1, env.VHost))
		if err != nil {
			t.Fatalf("dial node %d: %v", i+1, err)
		}
		defer conn.Close()
		nodes = append(nodes, conn)
	}
	// First the ladder alone (its leaders placed by the policy's balanced locator), as a
	// deployed topology would be; then the copies are added next to it.
	one := spec
	one.Shards = 1
	p1, err := admin.NewPlan(one)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := admin.Apply(ctx, nodes[0], p1, admin.ApplyOptions{Management: m}); err != nil {
		t.Fatalf("apply one ladder: %v", err)
	}
	if _, err := admin.Apply(ctx, nodes[0], p, admin.ApplyOptions{Management: m, Nodes: nodes}); err != nil {
		t.Fatalf("apply with copies: %v", err)
	}
	rep, err := admin.Status(ctx, nodes[0], p, admin.StatusOptions{Management: m})
	if err != nil || rep.Cluster == nil {
		t.Fatalf("status: %v", err)
	}
	if len(rep.Cluster.SharedLeaders) != 0 || rep.Cluster.Shards != 3 {
		t.Fatalf("status: %d copies, shared leaders %+v; want 3 copies, each queue's on three nodes", rep.Cluster.Shards, rep.Cluster.SharedLeaders)
	}
	t.Logf("after apply: %s", leadersLine(rep.Cluster))
	leaderOf := func() map[string]string {
		t.Helper()
		qs, err := m.Queues(ctx)
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]string{}
		for _, q := range p.DelayQueues() {
			out[q.Name] = qs[q.Name].Leader
		}
		return out
	}
	before := leaderOf()

	// The burst: n messages all due at one instant, 10 s ahead (the publishing takes a few
	// seconds on a busy machine; each message's delay is what is left until then).
	const n = 3000
	cfg := amqpdelay.Config{URL: strings.Join(c.vhostURLs(env.VHost), ","), Prefix: spec.Prefix}
	pub, err := amqpdelay.NewPublisher(ctx, cfg)
	if err != nil {
		t.Fatalf("publisher: %v", err)
	}
	defer pub.Close()
	arrivals := consumeQueueURL(t, c.nodeURL(1, env.VHost), env.Name("ready"))
	target := spec.Targets[0].Name
	due := time.Now().Add(10 * time.Second)
	pending := make([]*amqpdelay.Deferred, 0, n)
	for i := range n {
		d, err := pub.PublishAtDeferred(ctx, target, "burst", textMsg(fmt.Sprint("b", i)), due)
		if err != nil {
			t.Fatalf("publish %d: %v", i, err)
		}
		pending = append(pending, d)
	}
	sent := map[string]bool{}
	for i, d := range pending {
		r, err := d.Wait(ctx)
		if err != nil {
			t.Fatalf("publish %d: %v", i, err)
		}
		if r.Path != amqpdelay.PathLadder {
			t.Fatalf("publish %d took the %v path (published after its due time?)", i, r.Path)
		}
		sent[r.MessageID] = true
	}
	t.Logf("published %d messages due at %s; publishing ended %v before", n, due.Format(time.StampMilli), time.Until(due).Round(time.Millisecond))

	got := map[string]bool{}
	perQueue := map[string]int{}
	early, dup := 0, 0
	var last time.Time
	for len(got) < n {
		var a arrival
		select {
		case a = <-arrivals:
		case <-time.After(3 * time.Minute):
			t.Fatalf("%d of %d messages arrived; none for 3 minutes", len(got), n)
		}
		if got[a.d.MessageId] {
			dup++
			continue
		}
		got[a.d.MessageId] = true
		if d, ok := amqpdelay.Due(a.d); !ok || a.at.Before(d) {
			early++
		}
		perQueue[lastHopQueue(a.d)]++
		last = a.at
	}
	lost := 0
	for id := range sent {
		if !got[id] {
			lost++
		}
	}
	if lost != 0 || early != 0 {
		t.Errorf("%d lost, %d early of %d", lost, early, n)
	}
	after := leaderOf()
	perNode := map[string]int{}
	var queues []string
	for q, k := range perQueue {
		if !strings.HasSuffix(q, ".last") {
			t.Errorf("%d messages took their last hop in %s, not in a last-hop queue", k, q)
		}
		if before[q] == "" || before[q] != after[q] {
			t.Errorf("last-hop queue %q: leader %q before, %q after (not a ladder queue, or its leader moved)", q, before[q], after[q])
		}
		perNode[after[q]] += k
		queues = append(queues, fmt.Sprintf("%s=%d (%s)", q[len(env.Prefix):], k, after[q]))
	}
	sort.Strings(queues)
	t.Logf("burst of %d drained %v after its due time (%d redelivered); last hop per queue: %s", n, last.Sub(due).Round(time.Millisecond), dup, strings.Join(queues, ", "))
	even := float64(n) / float64(len(c.URLs))
	if len(perNode) != len(c.URLs) {
		t.Errorf("last hop done by %d nodes, want %d: %v", len(perNode), len(c.URLs), perNode)
	}
	for node, k := range perNode {
		share := float64(k) / even
		t.Logf("node %s dead-lettered %d messages of the last hop: %.2f x an even split", node, k, share)
		if share < 0.8 || share > 1.2 {
			t.Errorf("node %s did %d of the last hop, outside 20 %% of an even split (%.0f)", node, k, even)
		}
	}
	// Status passes once the dead-letterings in flight (messages_dlx counts in passing) are
	// confirmed, and nothing was parked.
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(2 * time.Second) {
		rep, err := admin.Status(ctx, nodes[0], p, admin.StatusOptions{Management: m})
		if err == nil {
			if pq := rep.Parking(); pq.Messages != 0 {
				t.Errorf("parking queue holds %d messages", pq.Messages)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Errorf("status after the burst: %v", err)
			break
		}
	}
}
