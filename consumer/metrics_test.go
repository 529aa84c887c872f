package consumer

import (
	"errors"
	"strings"
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

// TestMetricsStartAtZero: every counter series of the queue a Consumer is made for exists at 0
// from New, each outcome and reason included (before, a queue's series appeared at its first
// event, so an alert on them saw nothing), and the histograms' series by result and path too.
// Observing an event of every kind then creates no series that New had not: no outcome is
// missing from the started set.
func TestMetricsStartAtZero(t *testing.T) {
	reg := prometheus.NewRegistry()
	cfg := amqpdelay.Config{}
	if _, err := New(cfg, "work", noop, Options{Metrics: reg}); err != nil {
		t.Fatal(err)
	}
	const want = `
# HELP rabbitdelay_consumer_derived_ids_total Deliveries whose id the Consumer derived, by reason: missing (no MessageId: a hash of the content) or too-long.
# TYPE rabbitdelay_consumer_derived_ids_total counter
rabbitdelay_consumer_derived_ids_total{queue="work",reason="missing"} 0
rabbitdelay_consumer_derived_ids_total{queue="work",reason="too-long"} 0
# HELP rabbitdelay_consumer_handler_failures_total Handler runs that returned an error or panicked.
# TYPE rabbitdelay_consumer_handler_failures_total counter
rabbitdelay_consumer_handler_failures_total{queue="work"} 0
# HELP rabbitdelay_consumer_messages_total Deliveries by outcome: handled, retried, parked, duplicate, deferred, requeued, unsettled, revoked, rejected.
# TYPE rabbitdelay_consumer_messages_total counter
rabbitdelay_consumer_messages_total{outcome="deferred",queue="work"} 0
rabbitdelay_consumer_messages_total{outcome="duplicate",queue="work"} 0
rabbitdelay_consumer_messages_total{outcome="handled",queue="work"} 0
rabbitdelay_consumer_messages_total{outcome="parked",queue="work"} 0
rabbitdelay_consumer_messages_total{outcome="rejected",queue="work"} 0
rabbitdelay_consumer_messages_total{outcome="requeued",queue="work"} 0
rabbitdelay_consumer_messages_total{outcome="retried",queue="work"} 0
rabbitdelay_consumer_messages_total{outcome="revoked",queue="work"} 0
rabbitdelay_consumer_messages_total{outcome="unsettled",queue="work"} 0
# HELP rabbitdelay_consumer_reconnects_total Reconnections of the Consumer after a connection loss.
# TYPE rabbitdelay_consumer_reconnects_total counter
rabbitdelay_consumer_reconnects_total{queue="work"} 0
`
	counters := []string{"rabbitdelay_consumer_derived_ids_total", "rabbitdelay_consumer_handler_failures_total",
		"rabbitdelay_consumer_messages_total", "rabbitdelay_consumer_reconnects_total"}
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), counters...); err != nil {
		t.Fatal(err)
	}
	for name, n := range map[string]int{"rabbitdelay_consumer_handler_duration_seconds": 2, "rabbitdelay_consumer_lateness_seconds": 4} {
		if got, err := testutil.GatherAndCount(reg, name); err != nil || got != n {
			t.Errorf("%s: %d series (%v), want %d at 0 (one per result or path)", name, got, err, n)
		}
	}
	before, err := testutil.GatherAndCount(reg)
	if err != nil {
		t.Fatal(err)
	}
	m, err := newConsumerMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []EventKind{Handled, Retried, Parked, Skipped, Deferred, Requeued, Unsettled, Disconnected, Reconnected,
		Revoked, Rejected, IDDerived} {
		in := Info{HasDue: true, IDDerived: DerivedMissing}
		for _, p := range paths {
			in.Path = p
			m.observe("work", Event{Kind: k, Info: in})
		}
		in.IDDerived = DerivedTooLong
		m.observe("work", Event{Kind: k, Info: in})
	}
	m.handlerRan("work", nil, time.Millisecond)
	m.handlerRan("work", errors.New("x"), time.Millisecond)
	if after, err := testutil.GatherAndCount(reg); err != nil || after != before {
		t.Errorf("%d series after an event of every kind (%v), %d from New: an outcome or label value was not started at 0", after, err, before)
	}
	// A second Consumer on the registry starts its own queue's series.
	if _, err := New(cfg, "other", noop, Options{Metrics: reg}); err != nil {
		t.Fatal(err)
	}
	if v := testutil.ToFloat64(m.messages.WithLabelValues("other", "parked")); v != 0 {
		t.Errorf("other queue's parked = %v", v)
	}
	if after, _ := testutil.GatherAndCount(reg); after != 2*before {
		t.Errorf("%d series with two queues, want %d", after, 2*before)
	}
}
