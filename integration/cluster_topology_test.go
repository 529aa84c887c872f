//go:build integration

package integration

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/delaykit/rabbitdelay/amqpdelay"
	"github.com/delaykit/rabbitdelay/internal/admin"
	"github.com/delaykit/rabbitdelay/internal/delayspec"
)

// TestClusterTopology: on a 3-node cluster, rabbitdelay apply spreads the leaders of the default
// topology's 330 quorum delay queues over the nodes although it declares everything through one
// node's connection (the delay-queue policy's queue-leader-locator balanced: each node leads at
// least one, none more than 60 %), and status reports the leaders per node. A node killed
// (kill -9): status fails with ErrUnhealthy, flags the queues with a member offline and names
// the node, and the leaders move to the two others. The node started again: its members come
// back online, and `rabbitdelay rebalance` gives it leaders again. Delayed messages published
// through that ladder before the kill, due while the node is down, all arrive, none early.
// Runs under `make cluster-test` (skips without AMQP_URLS of 3+ nodes and BROKER_STATE).
//
// No timing is asserted; every wait has a generous deadline (3 nodes on a busy 2-core machine).
func TestClusterTopology(t *testing.T) {
	c := getCluster(t)
	bin := buildDeclare(t)
	env, m := clusterMgmtEnv(t)
	const step = 5 * time.Minute
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()

	target := env.Name("orders")
	spec := delayspec.Spec{Prefix: env.Prefix, Targets: delayspec.Targets{{Name: target, Type: "topic"}}, Plugin: delayspec.PluginOff,
		ReadyQueues: delayspec.ReadyQueues{{Queue: env.Name("ready"), Exchange: target, BindingKey: "#"}}}
	p, err := admin.NewPlan(spec)
	if err != nil {
		t.Fatal(err)
	}
	nDelay := len(p.DelayQueues())
	// The cluster report covers the plan's quorum queues: not its revocation stream.
	nQuorum := 0
	for _, q := range p.Queues {
		if q.Args["x-queue-type"] == string(delayspec.Quorum) {
			nQuorum++
		}
	}

	// Apply through node 2's connection only.
	conn2, err := clusterDial(c.nodeURL(2, env.VHost))
	if err != nil {
		t.Fatalf("dial node 2: %v", err)
	}
	if _, err := admin.Apply(ctx, conn2, p, admin.ApplyOptions{Management: m}); err != nil {
		t.Fatalf("apply through node 2: %v", err)
	}
	_ = conn2.Close()

	// waitCluster polls the management API until cond holds for the topology's cluster view.
	waitCluster := func(what string, cond func(*admin.ClusterStatus) bool) *admin.ClusterStatus {
		t.Helper()
		deadline := time.Now().Add(step)
		for {
			cs, err := m.Cluster(ctx, p)
			if err == nil && cond(cs) {
				return cs
			}
			if time.Now().After(deadline) {
				t.Fatalf("after %v: not %s: %+v (err %v)", step, what, cs, err)
			}
			time.Sleep(time.Second)
		}
	}
	led := func(cs *admin.ClusterStatus) (total int, by map[string]int) {
		by = map[string]int{}
		for _, n := range cs.Nodes {
			by[n.Name] = n.DelayQueues
			total += n.DelayQueues
		}
		return total, by
	}
	spread := func(cs *admin.ClusterStatus, when string) {
		t.Helper()
		total, by := led(cs)
		if len(cs.Nodes) != len(c.URLs) {
			t.Errorf("%s: %d nodes in the report, want %d: %+v", when, len(cs.Nodes), len(c.URLs), cs.Nodes)
		}
		for _, n := range cs.Nodes {
			if by[n.Name] < 1 || by[n.Name]*100 > total*60 {
				t.Errorf("%s: node %s leads %d of %d delay queues; want at least 1 and at most 60 %%: %+v", when, n.Name, by[n.Name], total, cs.Nodes)
			}
		}
	}
	allLed := func(cs *admin.ClusterStatus) bool {
		total, _ := led(cs)
		return total == nDelay && len(cs.Degraded) == 0
	}
	cs := waitCluster(fmt.Sprintf("all %d delay queues led, every member online", nDelay), allLed)
	t.Logf("after apply through node 2: %s", leadersLine(cs))
	spread(cs, "after apply")

	// Status reports the same per-node counts, and passes.
	conn1, err := clusterDial(c.nodeURL(1, env.VHost))
	if err != nil {
		t.Fatalf("dial node 1: %v", err)
	}
	defer conn1.Close()
	rep, err := admin.Status(ctx, conn1, p, admin.StatusOptions{Management: m})
	if err != nil || rep.Cluster == nil {
		t.Fatalf("status after apply: %v (cluster %+v)", err, rep.Cluster)
	}
	if total, _ := led(rep.Cluster); total != nDelay || len(rep.Cluster.Nodes) != len(c.URLs) {
		t.Errorf("status: %s; want %d delay queues led over %d nodes", leadersLine(rep.Cluster), nDelay, len(c.URLs))
	}

	// Delayed messages through the default (top-split) ladder, due while node 3 is down, back
	// and rebalanced: none is lost or early. They are read through node 1, which stays up.
	delayed := publishAcrossKill(ctx, t, c.vhostURLs(env.VHost), env.Prefix, target)
	arrivals := consumeQueueURL(t, c.nodeURL(1, env.VHost), env.Name("ready"))

	// Kill node 3 (node 1 serves the management API).
	const victim = 3
	var victimName string
	for _, n := range cs.Nodes {
		if c.nodeOf(n.Name) == victim {
			victimName = n.Name
		}
	}
	if victimName == "" {
		t.Fatalf("no node of the report is node %d: %+v", victim, cs.Nodes)
	}
	c.kill(t, victim)
	restarted := false
	defer func() {
		if !restarted {
			c.startNode(t, victim)
		}
	}()
	waitCluster(fmt.Sprintf("every queue led by a node other than %s, with %s offline", victimName, victimName), func(cs *admin.ClusterStatus) bool {
		total, by := led(cs)
		return total == nDelay && by[victimName] == 0 && cs.Offline()[victimName] == nQuorum
	})
	deadline := time.Now().Add(step)
	for {
		rep, err = admin.Status(ctx, conn1, p, admin.StatusOptions{Management: m})
		if err != nil && rep != nil && rep.Cluster != nil && len(rep.Cluster.Degraded) == nQuorum {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("status with node %d killed: %v, cluster %+v; want every queue degraded", victim, err, rep.Cluster)
		}
		time.Sleep(time.Second)
	}
	if !errors.Is(err, admin.ErrUnhealthy) || !strings.Contains(err.Error(), victimName+" (node down)") ||
		!strings.Contains(err.Error(), "members offline") {
		t.Errorf("status with node %d killed: %v; want ErrUnhealthy naming %s (node down) and members offline", victim, err, victimName)
	}
	for _, n := range rep.Cluster.Nodes {
		if n.Name == victimName && (n.Running == nil || *n.Running || n.DelayQueues != 0) {
			t.Errorf("status: the killed node %+v: want not running, leading nothing", n)
		}
	}
	t.Logf("node %d killed: %s; status: %v", victim, leadersLine(rep.Cluster), err)

	// Start it again: every member back online.
	c.startNode(t, victim)
	restarted = true
	cs = waitCluster("every member online again", allLed)
	_, before := led(cs)
	t.Logf("node %d back: %s (balanced %v)", victim, leadersLine(cs), cs.Balanced)

	// rabbitdelay rebalance (the CLI, through node 1).
	cmd := exec.CommandContext(ctx, bin, "rebalance", "--timeout", "5m")
	cmd.Env = append(os.Environ(), "AMQPDELAY_URL="+c.nodeURL(1, env.VHost), "AMQPDELAY_MANAGEMENT_URL="+env.Broker.ManagementURL,
		"AMQPDELAY_PREFIX="+env.Prefix, "AMQPDELAY_TARGETS="+target+":topic", "AMQPDELAY_PLUGIN=off",
		"AMQPDELAY_READY_QUEUES="+env.Name("ready")+"="+target+":#")
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("rabbitdelay rebalance: %v\nstdout:\n%s\nstderr:\n%s", err, out.String(), errb.String())
	}
	t.Logf("rabbitdelay rebalance:\n%s", out.String())
	if !strings.Contains(out.String(), "leaders before") || !strings.Contains(out.String(), "rabbitmq-queues rebalance quorum") {
		t.Errorf("rabbitdelay rebalance does not show the leaders and the restricted command:\n%s", out.String())
	}
	if !cs.Balanced && !strings.Contains(out.String(), "asked RabbitMQ to rebalance") {
		t.Errorf("unbalanced leaders (%v), but rabbitdelay rebalance asked nothing:\n%s", before, out.String())
	}
	cs = waitCluster(fmt.Sprintf("node %s leading again", victimName), func(cs *admin.ClusterStatus) bool {
		_, by := led(cs)
		return allLed(cs) && by[victimName] > 0
	})
	t.Logf("after rebalance: %s (balanced %v)", leadersLine(cs), cs.Balanced)
	spread(cs, "after rebalance")
	checkArrivedOnce(t, delayed, arrivals, 3*time.Minute)
}

// publishAcrossKill publishes 300 delayed messages through a Publisher with every node's URL,
// their delays spread over 5-50 s at a millisecond precision (several hops each in the default
// ladder), and returns their message IDs with their due times.
func publishAcrossKill(ctx context.Context, t *testing.T, urls []string, prefix, target string) map[string]time.Time {
	t.Helper()
	pub, err := amqpdelay.NewPublisher(ctx, amqpdelay.Config{URL: strings.Join(urls, ","), Prefix: prefix})
	if err != nil {
		t.Fatalf("publisher: %v", err)
	}
	defer pub.Close()
	const n = 300
	sent := make(map[string]time.Time, n)
	hops := 0
	for i := range n {
		delay := 5*time.Second + time.Duration(i)*150*time.Millisecond + time.Duration(i%7)*time.Millisecond
		r, err := pub.Publish(ctx, target, "kill", textMsg(fmt.Sprint("k", i)), delay)
		if err != nil {
			t.Fatalf("publish %d: %v", i, err)
		}
		if r.Path != amqpdelay.PathLadder {
			t.Fatalf("publish %d took the %v path, want the ladder", i, r.Path)
		}
		sent[r.MessageID] = r.Due
		hops += r.Hops
	}
	t.Logf("published %d delayed messages (%.2f hops each on average), due over the next 5-50 s", n, float64(hops)/n)
	return sent
}

// checkArrivedOnce reads arrivals until every message of sent has arrived (or none arrives for
// quiet) and fails the test on a message lost or delivered before its due time. A second copy
// (at-least-once dead-lettering across a node failure) is logged, not failed.
func checkArrivedOnce(t *testing.T, sent map[string]time.Time, arrivals <-chan arrival, quiet time.Duration) {
	t.Helper()
	got := map[string]bool{}
	early, dups := 0, 0
	var latest time.Duration
	for len(got) < len(sent) {
		var a arrival
		select {
		case a = <-arrivals:
		case <-time.After(quiet):
			t.Errorf("%d of %d delayed messages arrived; none for %v", len(got), len(sent), quiet)
			return
		}
		due, ok := sent[a.d.MessageId]
		if !ok {
			continue
		}
		if got[a.d.MessageId] {
			dups++
			continue
		}
		got[a.d.MessageId] = true
		if a.at.Before(due) {
			early++
			t.Errorf("message %s arrived %v before its due time", a.d.MessageId, due.Sub(a.at))
		}
		latest = max(latest, a.at.Sub(due))
	}
	t.Logf("all %d delayed messages arrived once or more (%d second copies, %d early); the latest %v after its due time", len(sent), dups, early, latest.Round(time.Millisecond))
}

// leadersLine is "node: N delay queues led, ..." for logs.
func leadersLine(cs *admin.ClusterStatus) string {
	var parts []string
	for _, n := range cs.Nodes {
		parts = append(parts, fmt.Sprintf("%s leads %d delay queues (%d quorum queues)", n.Name, n.DelayQueues, n.Leaders))
	}
	return strings.Join(parts, ", ")
}
