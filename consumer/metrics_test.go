package consumer

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/delaykit/rabbitdelay/amqpdelay"
)

// TestMetricsShared: two Consumers share one registry's collectors, told apart by the queue
// label; handled deliveries with a due time give one lateness observation each, by path.
func TestMetricsShared(t *testing.T) {
	reg := prometheus.NewRegistry()
	m1, err := newConsumerMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	m2, err := newConsumerMetrics(reg)
	if err != nil {
		t.Fatalf("a second Consumer on the same registry: %v", err)
	}
	late := Info{HasDue: true, Late: 20 * time.Millisecond, Path: amqpdelay.PathLadder}
	m1.observe("a", Event{Kind: Handled, Info: late, Duration: time.Millisecond})
	m1.observe("a", Event{Kind: Handled, Info: Info{}, Duration: time.Millisecond}) // no due time: no lateness
	m2.observe("b", Event{Kind: Retried, Info: late, Duration: time.Millisecond})
	m2.observe("b", Event{Kind: Skipped, Info: late})
	m2.observe("b", Event{Kind: Reconnected})
	m2.observe("b", Event{Kind: Revoked, Info: late})
	for _, c := range []struct {
		got  float64
		want float64
		what string
	}{
		{testutil.ToFloat64(m1.messages.WithLabelValues("a", "handled")), 2, "a handled"},
		{testutil.ToFloat64(m1.messages.WithLabelValues("b", "retried")), 1, "b retried (through the first's collector)"},
		{testutil.ToFloat64(m1.messages.WithLabelValues("b", "duplicate")), 1, "b duplicate"},
		{testutil.ToFloat64(m1.messages.WithLabelValues("b", "revoked")), 1, "b revoked"},
		{testutil.ToFloat64(m1.failures.WithLabelValues("b")), 1, "b failures"},
		{testutil.ToFloat64(m1.reconnects.WithLabelValues("b")), 1, "b reconnects"},
		{float64(testutil.CollectAndCount(m1.lateness)), 1, "lateness series"},
	} {
		if c.got != c.want {
			t.Errorf("%s = %v, want %v", c.what, c.got, c.want)
		}
	}
	problems, err := testutil.GatherAndLint(reg)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("lint: %s: %s", p.Metric, p.Text)
	}
}
