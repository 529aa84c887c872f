package consumer

import (
	"errors"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"

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
	m2.handlerRan("b", errors.New("failed"), time.Millisecond)
	m2.observe("b", Event{Kind: Retried, Info: late, Duration: time.Millisecond})
	m2.handlerRan("b", errors.New("failed, then given back"), time.Millisecond) // no event of a settlement
	m1.handlerRan("a", nil, time.Millisecond)
	replayed := late
	replayed.Replayed = true
	m1.observe("a", Event{Kind: Handled, Info: replayed, Duration: time.Millisecond}) // lateness from before parking: not recorded
	m2.observe("b", Event{Kind: Skipped, Info: late})
	m2.observe("b", Event{Kind: Reconnected})
	m2.observe("b", Event{Kind: Revoked, Info: late})
	for _, c := range []struct {
		got  float64
		want float64
		what string
	}{
		{testutil.ToFloat64(m1.messages.WithLabelValues("a", "handled")), 3, "a handled"},
		{testutil.ToFloat64(m1.messages.WithLabelValues("b", "retried")), 1, "b retried (through the first's collector)"},
		{testutil.ToFloat64(m1.messages.WithLabelValues("b", "duplicate")), 1, "b duplicate"},
		{testutil.ToFloat64(m1.messages.WithLabelValues("b", "revoked")), 1, "b revoked"},
		{testutil.ToFloat64(m1.failures.WithLabelValues("b")), 2, "b failures (one whose delivery was given back)"},
		{testutil.ToFloat64(m1.failures.WithLabelValues("a")), 0, "a failures"},
		{histogramCount(t, m1.duration, "a", "ok"), 1, "a handler runs ok"},
		{histogramCount(t, m1.duration, "b", "error"), 2, "b handler runs with an error"},
		{histogramCount(t, m1.lateness, "a", "ladder"), 1, "a lateness observations (not the replayed one)"},
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

// histogramCount is the sample count of h's series with these label values.
func histogramCount(t *testing.T, h *prometheus.HistogramVec, labels ...string) float64 {
	t.Helper()
	var m dto.Metric
	if err := h.WithLabelValues(labels...).(prometheus.Histogram).Write(&m); err != nil {
		t.Fatal(err)
	}
	return float64(m.GetHistogram().GetSampleCount())
}
