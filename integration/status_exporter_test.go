//go:build integration

package integration

import (
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/delaykit/rabbitdelay/integration/brokertest"
	"github.com/delaykit/rabbitdelay/internal/admin"
	"github.com/delaykit/rabbitdelay/internal/delayspec"
	"github.com/delaykit/rabbitdelay/internal/exporter"
)

// TestStatusExporterZeroSeries: every series of every label set the specification configures
// is in the exporter's first scrape, at 0 where nothing happened, so that an alert sees 0, not
// nothing: before apply (every queue missing: the message gauges 0, missing_queues the count)
// and after it (once the management API has statistics): the delay queues per level and
// bucket, the parking queue, each ready queue's messages and requeue loop, the revocation
// stream, each node's dead-letter waits, each policy problem's breaks and severity.
func TestStatusExporterZeroSeries(t *testing.T) {
	t.Parallel()
	env := brokertest.NewEnv(t)
	m := topoNeedManagement(t, env)
	spec := polSpec(delayspec.Quorum)
	spec.Prefix = env.Prefix
	spec.Targets = delayspec.Targets{{Name: env.Name("orders"), Type: "topic"}}
	ready := env.Name("ready")
	spec.ReadyQueues = delayspec.ReadyQueues{{Queue: ready, Exchange: env.Name("orders"), BindingKey: "k"}}
	p, err := admin.NewPlan(spec)
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(exporter.New(m, p, exporter.Options{}))
	var levels, buckets []string
	for _, q := range p.DelayQueues() {
		if q.Role == admin.RoleLadder {
			levels = appendNew(levels, strconv.Itoa(q.Level))
		} else {
			buckets = appendNew(buckets, (time.Duration(q.TTL) * time.Millisecond).String())
		}
	}
	check := func(when string, zeroMessages bool) bool {
		fams := metGather(t, reg)
		ok := true
		want := func(name string, labels map[string]string, zero bool) {
			v, found := metValue(fams, name, labels)
			if !found || (zero && v != 0) {
				ok = false
				if !zeroMessages { // polled: only the last try reports
					return
				}
				t.Errorf("%s: %s%v = %v (present: %v), want present at 0", when, name, labels, v, found)
			}
		}
		for _, l := range levels {
			for _, n := range []string{"rabbitdelay_delay_messages", "rabbitdelay_delay_messages_dlx", "rabbitdelay_delay_queue_consumers"} {
				want(n, map[string]string{"path": "ladder", "level": l, "bucket": ""}, true)
			}
		}
		for _, b := range buckets {
			want("rabbitdelay_delay_messages", map[string]string{"path": "bucket", "level": "", "bucket": b}, true)
		}
		want("rabbitdelay_parking_messages", nil, true)
		want("rabbitdelay_ready_queue_messages", map[string]string{"queue": ready}, true)
		want("rabbitdelay_ready_queue_requeue_loop", map[string]string{"queue": ready}, true)
		want("rabbitdelay_revocation_stream_messages", map[string]string{"queue": p.Names.Revoked()}, true)
		for _, b := range []string{"early", "deletes", "drops", "stalls"} {
			want("rabbitdelay_policy_problems", map[string]string{"breaks": b, "severity": "error"}, false)
		}
		if fams := metGather(t, reg); true {
			if _, found := metValue(fams, "rabbitdelay_node_members", nil); found {
				want("rabbitdelay_dead_letter_waiting_messages", nil, true)
			}
		}
		return ok
	}
	// Nothing declared: every queue missing, every series at 0.
	check("before apply", true)
	if v, _ := metValue(metGather(t, reg), "rabbitdelay_missing_queues", nil); int(v) == 0 {
		t.Errorf("before apply: missing_queues = %v, want every queue", v)
	}
	if _, _, err := polApply(t, env, m, spec); err != nil {
		t.Fatal(err)
	}
	// Applied: the management API has no figures for a new queue for up to its statistics
	// interval (5 s by default), so poll until every series is there, then check once more
	// reporting what is not.
	deadline := time.Now().Add(60 * time.Second)
	for !check("after apply", false) && time.Now().Before(deadline) {
		time.Sleep(time.Second)
	}
	check("after apply", true)
}

func appendNew(list []string, s string) []string {
	for _, x := range list {
		if x == s {
			return list
		}
	}
	return append(list, s)
}
