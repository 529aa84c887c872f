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

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/delaykit/rabbitdelay/internal/admin"
	"github.com/delaykit/rabbitdelay/internal/delayspec"
	"github.com/delaykit/rabbitdelay/internal/exporter"
)

// TestClusterStatusDeadLetterWait: `rabbitdelay status` names dead-lettering that waits on a
// stopped node, on a 3-node cluster. A quorum topology (test ladder) is applied through node 1;
// a second queue bound to the target exchange, declared through node 3 with one member
// (x-quorum-initial-group-size 1), is on node 3 only. Node 3, which also leads some of the
// delay queues, is stopped (scripts/broker stop-node), then messages due in 1-3 s are
// published through node 1: their last hop dead-letters (at least once) into the dispatch
// exchange, whose target routes to the ready queue and to that queue, which cannot confirm
// without node 3, so the messages stay in the last hops' dead-letter state (messages_dlx).
// The CLI binary's status must then exit 1 and print "DEAD-LETTERING WAITING ON AN
// UNREACHABLE NODE" with node 3's name and every delay queue that the management API shows
// holding messages_dlx. Node 3 started again: everything moves on, every message reaches the
// ready queue, and status exits 0. The exporter is read twice: on the healthy cluster its
// members and leaders per node must be the management API's (checkExporterNodes), with node 3
// stopped it must report node 3 not running, messages waiting on it and degraded queues.
// Runs under `make cluster-test` (skips without a cluster).
//
// No timing is asserted; every wait has a generous deadline.
func TestClusterStatusDeadLetterWait(t *testing.T) {
	c := getCluster(t)
	bin := buildDeclare(t)
	env, m := clusterMgmtEnv(t)
	const step = 5 * time.Minute
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()

	target, ready, held := env.Name("orders"), env.Name("ready"), env.Name("held-on-3")
	spec := delayspec.Spec{Prefix: env.Prefix, Targets: delayspec.Targets{{Name: target, Type: "direct"}}, Plugin: delayspec.PluginOff,
		Ladder: testLadder(), QueueType: delayspec.Quorum,
		ReadyQueues: delayspec.ReadyQueues{{Queue: ready, Exchange: target, BindingKey: "k"}}}
	p, err := admin.NewPlan(spec)
	if err != nil {
		t.Fatal(err)
	}
	conn1, err := clusterDial(c.nodeURL(1, env.VHost))
	if err != nil {
		t.Fatalf("dial node 1: %v", err)
	}
	defer conn1.Close()
	if _, err := admin.Apply(ctx, conn1, p, admin.ApplyOptions{Management: m}); err != nil {
		t.Fatalf("apply: %v", err)
	}
	conn3, err := clusterDial(c.nodeURL(3, env.VHost))
	if err != nil {
		t.Fatalf("dial node 3: %v", err)
	}
	ch3, err := conn3.Channel()
	if err == nil {
		_, err = ch3.QueueDeclare(held, true, false, false, false, amqp.Table{"x-queue-type": "quorum", "x-quorum-initial-group-size": int32(1)})
	}
	if err == nil {
		err = ch3.QueueBind(held, "k", target, false, nil)
	}
	_ = conn3.Close()
	if err != nil {
		t.Fatalf("declare and bind %s through node 3: %v", held, err)
	}
	info := c.waitQueueMembers(t, env.VHost, held, step, "led by node 3 alone", func(q clusterQueueInfo) bool {
		return len(q.Members) == 1 && c.nodeOf(q.Members[0]) == 3 && q.Leader == q.Members[0]
	})
	victim := info.Leader

	// Every delay queue led and every member online before node 3 goes.
	deadline := time.Now().Add(step)
	for {
		cs, err := m.Cluster(ctx, p)
		if err == nil && len(cs.Degraded) == 0 {
			t.Logf("leaders: %s", leadersLine(cs))
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("topology not healthy after %v: %v %+v", step, err, cs)
		}
		time.Sleep(2 * time.Second)
	}

	// The exporter, healthy cluster: every node running, and per node the members and leaders
	// of the specification's quorum queues that the management API lists.
	ereg := prometheus.NewRegistry()
	ereg.MustRegister(exporter.New(m, p, exporter.Options{}))
	checkExporterNodes(t, ctx, m, p, ereg, step)

	stopped := true
	if out, err := c.script("stop-node", "3"); err != nil {
		t.Fatalf("scripts/broker stop-node 3: %v\n%s", err, out)
	}
	defer func() {
		if stopped {
			c.startNode(t, 3)
		}
	}()

	pub := newPublisherURL(t, c.nodeURL(1, env.VHost), spec)
	const n = 20
	var ids []string
	for i := range n {
		id := fmt.Sprintf("wait-%02d", i)
		ids = append(ids, id)
		pctx, pcancel := context.WithTimeout(ctx, step)
		_, err := pub.Publish(pctx, target, "k", amqp.Publishing{MessageId: id, Body: []byte(id)}, time.Second+time.Duration(i)*100*time.Millisecond)
		pcancel()
		if err != nil {
			t.Fatalf("publish %s with node 3 stopped: %v", id, err)
		}
	}

	// status: the binary, as an operator runs it, through node 1.
	status := func() (int, string) {
		cmd := exec.CommandContext(ctx, bin, "status", "--timeout", "2m")
		cmd.Env = append(os.Environ(), "AMQPDELAY_URL="+c.nodeURL(1, env.VHost), "AMQPDELAY_MANAGEMENT_URL="+env.Broker.ManagementURL,
			"AMQPDELAY_PREFIX="+env.Prefix, "AMQPDELAY_TARGETS="+target+":direct", "AMQPDELAY_PLUGIN=off",
			"AMQPDELAY_LADDER_UNIT=1ms", "AMQPDELAY_LADDER_RADIX=16", "AMQPDELAY_LADDER_MAX=65535ms",
			"AMQPDELAY_LADDER_ORDER=shortest-first", // testLadder
			"AMQPDELAY_READY_QUEUES="+ready+"="+target+":k")
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		err := cmd.Run()
		var ee *exec.ExitError
		switch {
		case err == nil:
			return 0, out.String()
		case errors.As(err, &ee):
			return ee.ExitCode(), out.String()
		}
		t.Fatalf("rabbitdelay status: %v\n%s", err, out.String())
		return -1, ""
	}

	// Wait until every message is in a dead-letter state (the management API's view), then ask
	// status.
	var waiting []string
	deadline = time.Now().Add(step)
	for {
		qs, err := m.Queues(ctx)
		var dlx int64
		waiting = waiting[:0]
		for _, q := range p.DelayQueues() {
			if mq, ok := qs[q.Name]; ok && mq.MessagesDLX > 0 {
				dlx += mq.MessagesDLX
				waiting = append(waiting, q.Name)
			}
		}
		if err == nil && dlx >= n {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %v: %d of %d messages in dead-letter state (%v), err %v", step, dlx, n, waiting, err)
		}
		time.Sleep(2 * time.Second)
	}
	code, out := status()
	t.Logf("rabbitdelay status with node 3 (%s) stopped, messages_dlx in %v: exit %d\n%s", victim, waiting, code, out)
	if code != 1 {
		t.Errorf("rabbitdelay status exit code %d with node 3 stopped; want 1", code)
	}
	if !strings.Contains(out, "DEAD-LETTERING WAITING ON AN UNREACHABLE NODE: "+victim+" (") {
		t.Errorf("rabbitdelay status does not name dead-lettering waiting on %s:\n%s", victim, out)
	}
	for _, q := range waiting {
		if !strings.Contains(out, q+" (") {
			t.Errorf("rabbitdelay status does not list %s, which holds messages in dead-letter state:\n%s", q, out)
		}
	}

	// The exporter with node 3 stopped: node 3 not running, dead-lettering waiting on it, and
	// quorum queues degraded.
	var fams []*dto.MetricFamily
	var failed []string
	deadline = time.Now().Add(step)
	for {
		fams = metGather(t, ereg)
		failed = failed[:0]
		if v, found := metValue(fams, "rabbitdelay_node_running", map[string]string{"node": victim}); !found || v != 0 {
			failed = append(failed, fmt.Sprintf("node_running{node=%s} = %v (found %v), want 0", victim, v, found))
		}
		if v, _ := metValue(fams, "rabbitdelay_dead_letter_waiting_messages", map[string]string{"node": victim}); v < 1 {
			failed = append(failed, fmt.Sprintf("dead_letter_waiting_messages{node=%s} = %v, want at least 1", victim, v))
		}
		if v, _ := metValue(fams, "rabbitdelay_degraded_queues", nil); v < 1 {
			failed = append(failed, fmt.Sprintf("degraded_queues = %v, want at least 1", v))
		}
		if v, _ := metValue(fams, "rabbitdelay_delay_messages_dlx", nil); v < 1 {
			failed = append(failed, fmt.Sprintf("delay_messages_dlx = %v, want at least 1", v))
		}
		if len(failed) == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(2 * time.Second)
	}
	for _, f := range failed {
		t.Errorf("exporter with node 3 stopped: %s", f)
	}

	c.startNode(t, 3)
	stopped = false
	clusterGetAll(t, c.nodeURL(1, env.VHost), ready, step, ids) // every message, once node 3 is back
	deadline = time.Now().Add(step)
	for {
		code, out = status()
		if code == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("rabbitdelay status still exits %d %v after node 3 came back:\n%s", code, step, out)
		}
		time.Sleep(5 * time.Second)
	}
}

// checkExporterNodes waits (up to within) until the exporter registered on reg reports every
// node running and, per node, as many members (node_members) and leaders (node_leaders,
// node_delay_queue_leaders) of the plan's quorum queues as the management API's queue list
// gives, and fails the test if it does not.
func checkExporterNodes(t *testing.T, ctx context.Context, m *admin.Management, p *admin.Plan, reg prometheus.Gatherer, within time.Duration) {
	t.Helper()
	var failed []string
	deadline := time.Now().Add(within)
	for {
		failed = failed[:0]
		qs, err := m.Queues(ctx)
		if err != nil {
			t.Fatal(err)
		}
		members, leaders, delayLeaders := map[string]float64{}, map[string]float64{}, map[string]float64{}
		for _, q := range p.Queues {
			mq, ok := qs[q.Name]
			if !ok || mq.Type != string(delayspec.Quorum) {
				continue
			}
			for _, n := range mq.Members {
				members[n]++
			}
			leaders[mq.Leader]++
			if q.IsDelay() {
				delayLeaders[mq.Leader]++
			}
		}
		fams := metGather(t, reg)
		if len(members) != 3 {
			failed = append(failed, fmt.Sprintf("the quorum queues have members on %d nodes, want 3", len(members)))
		}
		for node := range members {
			if v, found := metValue(fams, "rabbitdelay_node_running", map[string]string{"node": node}); !found || v != 1 {
				failed = append(failed, fmt.Sprintf("node_running{node=%s} = %v (found %v), want 1", node, v, found))
			}
			for name, want := range map[string]float64{"rabbitdelay_node_members": members[node], "rabbitdelay_node_leaders": leaders[node],
				"rabbitdelay_node_delay_queue_leaders": delayLeaders[node]} {
				if v, _ := metValue(fams, name, map[string]string{"node": node}); v != want {
					failed = append(failed, fmt.Sprintf("%s{node=%s} = %v, want %v", name, node, v, want))
				}
			}
		}
		if leaders[""] > 0 {
			failed = append(failed, fmt.Sprintf("%v quorum queues without a leader", leaders[""]))
		}
		if len(failed) == 0 {
			t.Logf("exporter per node: members %v, leaders %v, delay queue leaders %v", members, leaders, delayLeaders)
			return
		}
		if time.Now().After(deadline) {
			break
		}
		time.Sleep(2 * time.Second)
	}
	for _, f := range failed {
		t.Errorf("exporter, healthy cluster: %s", f)
	}
}
