//go:build integration

package integration

import (
	"fmt"
	"slices"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/delaykit/rabbitdelay/integration/brokertest"
)

// TestClusterBasics: a quorum queue of a 3-node cluster takes publishes (with confirms) and
// deliveries through every node; when the node leading it dies (kill -9), the two others still
// form a quorum: the queue keeps every message published before and takes new ones through
// each survivor. The node, started again, rejoins the cluster and the queue, and serves
// publishes and deliveries again. Runs under `make cluster-test`; skips elsewhere.
//
// No timing is asserted; every wait has a generous deadline (nodes on a busy 2-core machine).
func TestClusterBasics(t *testing.T) {
	c := getCluster(t)
	n := len(c.URLs)
	env := brokertest.NewEnv(t) // a vhost of its own (vhosts are cluster-wide), through node 1
	queue := env.Name("q")
	const step = 3 * time.Minute

	// Declared through node 2: a new quorum queue's leader is placed on the declaring client's
	// node, so the node killed below (the leader's) is most likely not node 1.
	func() {
		conn, err := clusterDial(c.nodeURL(2, env.VHost))
		if err != nil {
			t.Fatalf("dial node 2: %v", err)
		}
		defer conn.Close()
		ch, err := conn.Channel()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := ch.QueueDeclare(queue, true, false, false, false, amqp.Table{"x-queue-type": "quorum"}); err != nil {
			t.Fatalf("declare quorum queue %s: %v", queue, err)
		}
	}()
	q := c.waitQueueMembers(t, env.VHost, queue, step, fmt.Sprintf("a leader and %d online members", n), func(q clusterQueueInfo) bool {
		return q.Leader != "" && len(q.Members) == n && len(q.Online) == n
	})
	t.Logf("queue %s: leader %s, members %v", queue, q.Leader, q.Members)

	// Through each node: publish, and receive through the next node.
	roundTrip := func(round string, nodes []int) {
		t.Helper()
		for k, i := range nodes {
			next := nodes[(k+1)%len(nodes)]
			body := fmt.Sprintf("%s: published through node %d", round, i)
			clusterPublishUntilConfirmed(t, c.nodeURL(i, env.VHost), queue, step, body)
			got := clusterGetAll(t, c.nodeURL(next, env.VHost), queue, step, []string{body})
			if got[body] != 1 || len(got) != 1 {
				t.Errorf("%s: through node %d, got %v; want exactly %q", round, next, got, body)
			}
		}
	}
	all := []int{}
	for i := 1; i <= n; i++ {
		all = append(all, i)
	}
	roundTrip("before", all)

	// Messages waiting in the queue when its leader dies.
	var waiting []string
	for i := 1; i <= n; i++ {
		var bodies []string
		for j := range 20 {
			bodies = append(bodies, fmt.Sprintf("waiting %d through node %d", j, i))
		}
		clusterPublishUntilConfirmed(t, c.nodeURL(i, env.VHost), queue, step, bodies...)
		waiting = append(waiting, bodies...)
	}

	victim := c.nodeOf(q.Leader)
	if victim == 0 {
		t.Fatalf("the leader %q is none of the nodes of AMQP_URLS", q.Leader)
	}
	c.kill(t, victim)
	down := true
	t.Cleanup(func() {
		if down { // the test failed midway: leave the cluster whole for the next test
			if out, err := c.script("start-node", fmt.Sprint(victim)); err != nil {
				t.Logf("start-node %d after the test: %v\n%s", victim, err, out)
			}
		}
	})
	var survivors []int
	for i := 1; i <= n; i++ {
		if i != victim {
			survivors = append(survivors, i)
		}
	}

	// The two others are a quorum of three: publishes are confirmed through each of them.
	var during []string
	retries := 0
	for _, i := range survivors {
		var bodies []string
		for j := range 20 {
			bodies = append(bodies, fmt.Sprintf("published through node %d while node %d is dead: %d", i, victim, j))
		}
		retries += clusterPublishUntilConfirmed(t, c.nodeURL(i, env.VHost), queue, step, bodies...)
		during = append(during, bodies...)
	}
	t.Logf("node %d dead: %d messages confirmed through nodes %v (%d attempts failed and were retried)", victim, len(during), survivors, retries)

	// Nothing lost: what waited before the kill and what was published since, through a survivor.
	got := clusterGetAll(t, c.nodeURL(survivors[0], env.VHost), queue, step, slices.Concat(waiting, during))
	dups := 0
	for b, k := range got {
		if k > 1 {
			dups += k - 1
		}
		if !slices.Contains(waiting, b) && !slices.Contains(during, b) {
			t.Errorf("unexpected message %q", b)
		}
	}
	t.Logf("all %d messages arrived through node %d (%d duplicates)", len(waiting)+len(during), survivors[0], dups)
	roundTrip("node "+fmt.Sprint(victim)+" dead", survivors)

	// The node comes back: it is in the cluster again, and a member of the queue again.
	c.startNode(t, victim)
	down = false
	deadline := time.Now().Add(step)
	for {
		running, err := c.runningNodes()
		if err == nil && len(running) == n {
			t.Logf("running nodes: %v", running)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the management API does not report %d running nodes within %v after start-node %d: %v, %v", n, step, victim, running, err)
		}
		time.Sleep(time.Second)
	}
	q = c.waitQueueMembers(t, env.VHost, queue, step, fmt.Sprintf("node %d online again", victim), func(q clusterQueueInfo) bool {
		return q.Leader != "" && len(q.Online) == n && slices.ContainsFunc(q.Online, func(m string) bool { return c.nodeOf(m) == victim })
	})
	t.Logf("queue %s after the restart: leader %s, online %v", queue, q.Leader, q.Online)
	roundTrip("after", all)
}
