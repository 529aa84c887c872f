//go:build integration && bench

package integration

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/delaykit/rabbitdelay/integration/brokertest"
	"github.com/delaykit/rabbitdelay/internal/delayspec"
)

// BenchmarkDueUnroutableLateness measures what 1,100 due messages that no queue takes cost a
// message due right after them (issue 13, item 2): a 3 s bucket gets 1,100 messages for target
// "orders" and then one with the key the ready queue is bound by; reported is how late that
// one arrives. The baseline, in the same run, is the same with the 1,100 taken by a queue
// bound for them (the same dead-lettering work, only routable). Cases: quorum delay queues
// with the dead-letter worker's prefetch at RabbitMQ's default of 32 and at 1,024
// (scripts/broker's setting; it needs scripts/broker's private node, BROKER_STATE, to change
// it: without, only the broker's own setting runs), and classic delay queues (no dead-letter
// worker). Metrics: baseline-late-ms, unroutable-late-ms and their ratio
// (unroutable/baseline).
func BenchmarkDueUnroutableLateness(b *testing.B) {
	const unbound = 1100
	type benchCase struct {
		qt       delayspec.QueueType
		prefetch int // 0: leave the broker's setting
	}
	cases := []benchCase{{delayspec.Quorum, 32}, {delayspec.Quorum, 1024}, {delayspec.Classic, 0}}
	for _, bc := range cases {
		b.Run(fmt.Sprintf("%s/prefetch=%d", bc.qt, bc.prefetch), func(b *testing.B) {
			if bc.prefetch > 0 && !benchSetDLXPrefetch(b, bc.prefetch) {
				b.Skip("needs scripts/broker's private node (BROKER_STATE) to set dead_letter_worker_consumer_prefetch")
			}
			for range b.N {
				base := benchUnroutableRun(b, bc.qt, unbound, true)
				late := benchUnroutableRun(b, bc.qt, unbound, false)
				b.ReportMetric(float64(base.Microseconds())/1000, "baseline-late-ms")
				b.ReportMetric(float64(late.Microseconds())/1000, "unroutable-late-ms")
				b.ReportMetric(float64(late)/float64(max(base, time.Millisecond)), "ratio")
			}
		})
	}
}

// benchSetDLXPrefetch sets the node's dead_letter_worker_consumer_prefetch (read by each
// quorum queue's dead-letter worker when it starts) and restores it when b ends.
func benchSetDLXPrefetch(b *testing.B, n int) bool {
	before, ok := brokerCtl(b, "eval", "application:get_env(rabbit, dead_letter_worker_consumer_prefetch).")
	if !ok {
		return false
	}
	restore := "application:unset_env(rabbit, dead_letter_worker_consumer_prefetch)."
	if v := strings.TrimSpace(before); strings.HasPrefix(v, "{ok,") {
		restore = fmt.Sprintf("application:set_env(rabbit, dead_letter_worker_consumer_prefetch, %s).", strings.TrimSuffix(strings.TrimPrefix(v, "{ok,"), "}"))
	}
	if _, ok := brokerCtl(b, "eval", fmt.Sprintf("application:set_env(rabbit, dead_letter_worker_consumer_prefetch, %d).", n)); !ok {
		b.Fatal("cannot set dead_letter_worker_consumer_prefetch")
	}
	b.Cleanup(func() { brokerCtl(b, "eval", restore) })
	return true
}

// benchUnroutableRun declares polSpec(qt) in a vhost of its own, publishes n messages into
// its 3 s bucket (routed to a sink queue when routable, else to no queue) and then the bound
// one, and returns how late the bound one arrived. A minute after due without it fails b.
func benchUnroutableRun(b *testing.B, qt delayspec.QueueType, n int, routable bool) time.Duration {
	b.Helper()
	env := brokertest.NewEnv(b)
	m := topoNeedManagement(b, env)
	p, _, err := polApply(b, env, m, polSpec(qt))
	if err != nil {
		b.Fatalf("apply: %v", err)
	}
	if routable {
		ch := env.Channel(b)
		if _, err := ch.QueueDeclare("sink", true, false, false, false, nil); err != nil {
			b.Fatal(err)
		}
		if err := ch.QueueBind("sink", "unbound.#", "orders", false, nil); err != nil {
			b.Fatal(err)
		}
	}
	got := polConsume(b, env, "orders.ready")
	polPublishBucket(b, env, p, 3000, "orders", n, func(i int) string { return fmt.Sprintf("unbound.%d", i) })
	sent := polPublishBucket(b, env, p, 3000, "orders", 1, func(int) string { return "bound" })
	due := sent.Add(3 * time.Second)
	select {
	case a := <-got:
		return a.at.Sub(due)
	case <-time.After(63 * time.Second):
		b.Fatalf("%s: the bound message had not arrived a minute after due", qt)
	}
	return 0
}
