package consumer

import (
	"fmt"
	"reflect"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/delaykit/rabbitdelay/amqpdelay"
	"github.com/delaykit/rabbitdelay/internal/metrics"
)

// consumerMetrics are the collectors shared by the Consumers of one registry.
type consumerMetrics struct {
	messages, failures, reconnects, derived *prometheus.CounterVec
	duration, lateness                      *prometheus.HistogramVec
}

// newConsumerMetrics registers the collectors on reg, or shares those already there.
func newConsumerMetrics(reg prometheus.Registerer) (*consumerMetrics, error) {
	if reg == nil {
		return nil, nil
	}
	counter := func(name, help string, labels ...string) prometheus.Collector {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: metrics.Namespace, Subsystem: "consumer", Name: name, Help: help},
			append([]string{"queue"}, labels...))
	}
	histogram := func(name, help string, buckets []float64, label string) prometheus.Collector {
		return prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: metrics.Namespace, Subsystem: "consumer", Name: name,
			Help: help, Buckets: buckets}, []string{"queue", label})
	}
	cs := []prometheus.Collector{
		counter("messages_total", "Deliveries by outcome: handled, retried, parked, duplicate, deferred, requeued, unsettled, revoked, rejected.", "outcome"),
		counter("handler_failures_total", "Handler runs that returned an error or panicked."),
		histogram("handler_duration_seconds", "Handler run time, by result (ok or error).", metrics.DurationBuckets, "result"),
		histogram("lateness_seconds", "How long after its rabbitdelay-due time a handled delivery's handling began, by the delay path it came through.",
			metrics.LatenessBuckets, "path"),
		counter("reconnects_total", "Reconnections of the Consumer after a connection loss."),
		counter("derived_ids_total", "Deliveries whose id the Consumer derived, by reason: missing (no MessageId: a hash of the content) or too-long.", "reason")}
	in, _, err := metrics.Register(reg, true, cs...)
	if err != nil {
		return nil, fmt.Errorf("%w: Options.Metrics: %w", ErrInvalidConfig, err)
	}
	for i := range in {
		if reflect.TypeOf(in[i]) != reflect.TypeOf(cs[i]) {
			return nil, fmt.Errorf("%w: Options.Metrics: the registry already has a collector of another kind for metric %d of the consumer's",
				ErrInvalidConfig, i+1)
		}
	}
	cv := func(i int) *prometheus.CounterVec { return in[i].(*prometheus.CounterVec) }
	hv := func(i int) *prometheus.HistogramVec { return in[i].(*prometheus.HistogramVec) }
	return &consumerMetrics{messages: cv(0), failures: cv(1), duration: hv(2), lateness: hv(3), reconnects: cv(4), derived: cv(5)}, nil
}

func outcome(k EventKind) string {
	if k == Skipped {
		return "duplicate"
	}
	return string(k)
}

// paths are the path label values of lateness_seconds.
var paths = []amqpdelay.Path{amqpdelay.PathDirect, amqpdelay.PathBucket, amqpdelay.PathLadder, amqpdelay.PathPlugin}

// start creates every series of queue at 0.
func (m *consumerMetrics) start(queue string) {
	if m == nil {
		return
	}
	for _, k := range []EventKind{Handled, Retried, Parked, Skipped, Deferred, Requeued, Unsettled, Revoked, Rejected} {
		m.messages.WithLabelValues(queue, outcome(k))
	}
	for _, r := range []string{DerivedMissing, DerivedTooLong} {
		m.derived.WithLabelValues(queue, r)
	}
	m.failures.WithLabelValues(queue)
	m.reconnects.WithLabelValues(queue)
	for _, r := range []string{"ok", "error"} {
		m.duration.WithLabelValues(queue, r)
	}
	for _, p := range paths {
		m.lateness.WithLabelValues(queue, p.String())
	}
}

func (m *consumerMetrics) observe(queue string, e Event) {
	if m == nil {
		return
	}
	switch e.Kind {
	case Reconnected:
		m.reconnects.WithLabelValues(queue).Inc()
	case Disconnected:
	case IDDerived: // not an outcome
		m.derived.WithLabelValues(queue, e.Info.IDDerived).Inc()
	default:
		m.messages.WithLabelValues(queue, outcome(e.Kind)).Inc()
		if e.Kind == Handled && e.Info.HasDue && !e.Info.Replayed {
			m.lateness.WithLabelValues(queue, e.Info.Path.String()).Observe(e.Info.Late.Seconds())
		}
	}
}

// handlerRan records one handler run, whatever becomes of its delivery.
func (m *consumerMetrics) handlerRan(queue string, err error, took time.Duration) {
	if m == nil {
		return
	}
	result := "ok"
	if err != nil {
		result = "error"
		m.failures.WithLabelValues(queue).Inc()
	}
	m.duration.WithLabelValues(queue, result).Observe(took.Seconds())
}
