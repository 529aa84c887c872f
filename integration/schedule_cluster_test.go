//go:build integration

package integration

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/delaykit/rabbitdelay/amqpdelay"
	"github.com/delaykit/rabbitdelay/integration/brokertest"
	"github.com/delaykit/rabbitdelay/internal/delayspec"
	"github.com/delaykit/rabbitdelay/schedule"
)

// TestClusterScheduleNodeKilled: on a 3-node cluster, three scheduler processes (each given every
// node's URL) run a 2 s schedule (missed policy all); the node leading the links queue (node 2
// when node 1 leads it: node 1 serves the test's management API) is killed mid-run and started
// again. A plain consumer of the target's queue gets every occurrence from the first to the last,
// none early. (A node failure may duplicate a message inside the broker, so duplicates are
// reported, not failed: see docs/schedules.md.)
func TestClusterScheduleNodeKilled(t *testing.T) {
	c := getCluster(t)
	env := brokertest.NewEnv(t)
	if env.VHost == "/" {
		t.Skip("needs the management API of node 1 (AMQP_MANAGEMENT_URL)")
	}
	f := &schedFixture{env: env, target: env.Name("billing"), queue: env.Name("bills")}
	f.spec = testSpec(env, delayspec.Target{Name: f.target, Type: "topic"})
	f.spec.ReadyQueues = delayspec.ReadyQueues{{Queue: f.queue, Exchange: f.target, BindingKey: "#"}}
	declareTopology(t, env, f.spec)
	urls := c.vhostURLs(env.VHost)
	f.cfg = amqpdelay.Config{URL: strings.Join(urls, ","), Prefix: f.spec.Prefix}
	log := consumeOccurrencesAt(t, urls, f.queue)
	const every = 2 * time.Second
	sch := f.schedule("cluster", every)
	sch.Missed = schedule.MissedAll
	for i := range 3 {
		startSchedProc(t, schedProcConfig{Instance: fmt.Sprintf("proc-%d", i), Config: connOf(f.cfg), Schedule: sch})
	}
	waitFor(t, 2*time.Minute, "5 occurrences", func() bool { return log.count() >= 5 })
	victim := 2
	if q, err := c.queueMembers(env.VHost, (f.spec.WithDefaults().Prefix + ".schedules.links")); err == nil {
		if n := c.nodeOf(q.Leader); n > 1 {
			victim = n
		}
		t.Logf("links queue leader %s; killing node %d", q.Leader, victim)
	}
	c.kill(t, victim)
	before := log.count()
	waitFor(t, 3*time.Minute, "5 occurrences with a node down", func() bool { return log.count() >= before+5 })
	c.startNode(t, victim)
	after := log.count()
	waitFor(t, 3*time.Minute, "5 occurrences after the node came back", func() bool { return log.count() >= after+5 })
	stopAt := time.Now()
	waitFor(t, 2*time.Minute, "the occurrences due by now", func() bool {
		for _, d := range log.all() {
			if !d.at.Before(stopAt) {
				return true
			}
		}
		return false
	})
	// Lost and early fail; a duplicate is logged (a node failure can store a publish twice).
	n, dups := log.verify(t, every, t.Logf)
	t.Logf("%d occurrences, %d duplicated, node %d killed", n, dups, victim)
}
