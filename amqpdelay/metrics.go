package amqpdelay

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/delaykit/rabbitdelay/internal/metrics"
	"github.com/delaykit/rabbitdelay/internal/route"
	"github.com/delaykit/rabbitdelay/plugin"
)

// publishOutcome is the outcome label of a Publish call (Config.Metrics).
type publishOutcome string

const (
	outcomeConfirmed  publishOutcome = "confirmed"
	outcomeNacked     publishOutcome = "nacked"
	outcomeUnroutable publishOutcome = "unroutable"
	outcomeInvalid    publishOutcome = "invalid"
	outcomeRefused    publishOutcome = "refused"
	outcomeLost       publishOutcome = "lost"
	outcomeCanceled   publishOutcome = "canceled"
	outcomeClosed     publishOutcome = "closed"
	outcomeFailed     publishOutcome = "failed"
)

func outcomeOf(err error) publishOutcome {
	switch {
	case err == nil:
		return outcomeConfirmed
	case errors.Is(err, ErrNacked):
		return outcomeNacked
	case errors.Is(err, ErrUnroutable):
		return outcomeUnroutable
	case errors.Is(err, ErrInvalidInput), errors.Is(err, ErrUnknownTarget), errors.Is(err, ErrDelayTooLong),
		errors.Is(err, ErrPluginUnavailable):
		return outcomeInvalid
	case errors.Is(err, ErrAccessRefused), errors.Is(err, ErrExchangeNotFound):
		return outcomeRefused
	case errors.Is(err, ErrConnectionLost):
		return outcomeLost
	case errors.Is(err, ErrClosed):
		return outcomeClosed
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return outcomeCanceled
	}
	return outcomeFailed
}

const pathNone = "none" // the path label of a publish refused before a path was chosen

// pubMetrics are a Publisher's collectors; a nil *pubMetrics records nothing.
type pubMetrics struct {
	publishes   *prometheus.CounterVec
	confirm     *prometheus.HistogramVec
	inFlight    prometheus.Gauge
	disconnects prometheus.Counter
	reconnects  prometheus.Counter
	reconnFails prometheus.Counter
	revocations *prometheus.CounterVec
	unregister  func()
}

// newPubMetrics registers p's collectors on reg (nil: none).
func newPubMetrics(reg prometheus.Registerer, p *Publisher) (*pubMetrics, error) {
	if reg == nil {
		return nil, nil
	}
	const sub = "publisher"
	m := &pubMetrics{
		publishes: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: metrics.Namespace, Subsystem: sub, Name: "publishes_total",
			Help: "Publish calls by delay path (none: refused before a path was chosen) and outcome (confirmed: the broker's publisher confirm)."},
			[]string{"path", "outcome"}),
		confirm: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: metrics.Namespace, Subsystem: sub, Name: "confirm_duration_seconds",
			Help: "Time from handing a message to its channel until the broker's publisher confirm, confirmed publishes only.", Buckets: metrics.DurationBuckets},
			[]string{"path"}),
		inFlight: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: metrics.Namespace, Subsystem: sub, Name: "publishes_in_flight",
			Help: "Publish calls in progress."}),
		disconnects: prometheus.NewCounter(prometheus.CounterOpts{Namespace: metrics.Namespace, Subsystem: sub, Name: "disconnects_total",
			Help: "Connection losses of the Publisher."}),
		reconnects: prometheus.NewCounter(prometheus.CounterOpts{Namespace: metrics.Namespace, Subsystem: sub, Name: "reconnects_total",
			Help: "Reconnections of the Publisher after a connection loss."}),
		reconnFails: prometheus.NewCounter(prometheus.CounterOpts{Namespace: metrics.Namespace, Subsystem: sub, Name: "reconnect_failures_total",
			Help: "Failed reconnection attempts of the Publisher."}),
		revocations: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: metrics.Namespace, Name: "revocations_total",
			Help: "Revocations recorded by the Publisher, by outcome (confirmed: the broker's publisher confirm)."},
			[]string{"outcome"}),
	}
	plug := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: metrics.Namespace, Subsystem: sub, Name: "plugin_available",
		Help: "1 while the delayed-message plugin's exchange is in use by the Publisher, else 0."},
		func() float64 {
			if p.pluginOK.Load() {
				return 1
			}
			return 0
		})
	_, unregister, err := metrics.Register(reg, false, m.publishes, m.confirm, m.inFlight, m.disconnects, m.reconnects, m.reconnFails,
		m.revocations, plug)
	if err != nil {
		return nil, fmt.Errorf("%w: Config.Metrics: %w (one Publisher per Registerer: give each its own label with "+
			"prometheus.WrapRegistererWith(prometheus.Labels{\"publisher\": \"<name>\"}, reg))", ErrInvalidConfig, err)
	}
	m.unregister = unregister
	return m, nil
}

// begin counts a Publish call in and returns what to call when it returns.
func (m *pubMetrics) begin() func(path string, err error) {
	if m == nil {
		return func(string, error) {}
	}
	m.inFlight.Inc()
	return func(path string, err error) {
		m.inFlight.Dec()
		m.publishes.WithLabelValues(path, string(outcomeOf(err))).Inc()
	}
}

func (m *pubMetrics) confirmed(path Path, took time.Duration) {
	if m != nil {
		m.confirm.WithLabelValues(path.String()).Observe(took.Seconds())
	}
}

func (m *pubMetrics) connection(k ReconnectKind) {
	if m != nil {
		[...]prometheus.Counter{Disconnected: m.disconnects, ReconnectFailed: m.reconnFails, Reconnected: m.reconnects}[k].Inc()
	}
}

func (m *pubMetrics) revoked(outcome publishOutcome, n int) {
	if m != nil {
		m.revocations.WithLabelValues(string(outcome)).Add(float64(n))
	}
}

func (m *pubMetrics) close() {
	if m != nil {
		m.unregister()
	}
}

// DeliveryPath returns the delay path a delivery last travelled, read from the Publisher's
// headers (none of them: PathDirect); ok is false without the rabbitdelay-due header.
func DeliveryPath(d amqp.Delivery) (path Path, ok bool) {
	if _, ok := Due(d); !ok {
		return PathDirect, false
	}
	has := func(k string) bool { _, ok := d.Headers[k]; return ok }
	switch {
	case has(route.BucketHeader):
		return PathBucket, true
	case has(route.LastLevelHeader), has(route.DigitHeader(0)):
		return PathLadder, true
	case has(plugin.DelayHeader):
		return PathPlugin, true
	}
	return PathDirect, true
}
