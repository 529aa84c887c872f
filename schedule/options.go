package schedule

import (
	"cmp"
	"errors"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/delaykit/rabbitdelay/internal/delayspec"
	"github.com/delaykit/rabbitdelay/internal/metrics"
)

// ErrInvalidConfig is wrapped by every error about an [Options] field.
var ErrInvalidConfig = errors.New("schedule: invalid configuration")

// Options configure a Scheduler ([New]; [Inspect] uses LinkGrace only). A zero field means its
// default; a value out of range is refused with an error wrapping ErrInvalidConfig that names
// the field and the range, one per field, joined.
type Options struct {
	// Instance names this instance in the fired records ([InstanceHeader]) and in `rabbitdelay
	// schedules`. "": <hostname>-<pid>-<4 random hex digits>; else at most 200 bytes.
	Instance string
	// LinkGrace is how long past due a pending link may be missing from the links queue before
	// the chain counts as broken ([Info.Broken]). 0: DefaultLinkGrace; else at least 1 s.
	LinkGrace time.Duration
	// Retention is the schedules stream's x-max-age, such as 7D or 12h (an integer and Y, M, D,
	// h, m or s). "": DefaultRetention. Every instance must give the same: RabbitMQ refuses to
	// redeclare a queue with other arguments (406 PRECONDITION_FAILED).
	Retention string
	// ConnectionName names the connection ("": "rabbitdelay-schedule"); links add "-links".
	ConnectionName string
	// Logger receives the logs (connection losses, links dropped or given back); zero: none (a
	// global logger is never used).
	Logger zerolog.Logger
	// Metrics, when set, is the Prometheus registry (never the global one; Schedulers may share
	// it) of rabbitdelay_schedule_occurrences_fired_total, ..._late_total (more than
	// [LateThreshold] late) and ..._missed_total, labelled by schedule, at 0 from its Declare. A
	// registry that refuses them (names registered with other labels): ErrInvalidConfig.
	Metrics prometheus.Registerer
}

// DefaultLinkGrace is the default Options.LinkGrace: the delay topology delivers a link
// milliseconds after its time, seconds on a busy cluster.
const DefaultLinkGrace = 10 * time.Second

// DefaultRetention is the schedules stream's default x-max-age: 7 days. An active schedule's
// definition record is rewritten when older than half the retention, so it never ages out.
const DefaultRetention = "7D"

// options are Options resolved: defaults filled in, ranges checked.
type options struct {
	log       zerolog.Logger
	instance  string
	maxAge    string
	retention time.Duration // maxAge as a duration
	name      string
	metrics   *schedMetrics
	grace     time.Duration
}

// resolve fills in the defaults and checks the other fields (one error per unusable field). It
// registers the counters on opts.Metrics when withMetrics is set.
func (opts Options) resolve(withMetrics bool) (options, error) {
	o := options{log: opts.Logger, instance: opts.Instance, maxAge: cmp.Or(opts.Retention, DefaultRetention),
		name: cmp.Or(opts.ConnectionName, "rabbitdelay-schedule"), grace: DefaultLinkGrace}
	var errs []error
	bad := func(format string, a ...any) {
		errs = append(errs, fmt.Errorf("%w: "+format, append([]any{ErrInvalidConfig}, a...)...))
	}
	if n := len(opts.Instance); n > 200 {
		bad("Options.Instance of %d bytes: want at most 200 (\"\": <hostname>-<pid>-<random>)", n)
	}
	switch d := opts.LinkGrace; {
	case d == 0:
	case d < time.Second:
		bad("Options.LinkGrace %v: want 1s or more (0: the default %v)", d, DefaultLinkGrace)
	default:
		o.grace = d
	}
	if age, ok := delayspec.ParseMaxAge(o.maxAge); ok {
		o.retention = age
	} else {
		bad("Options.Retention %q: want a whole number and a unit of RabbitMQ's x-max-age (Y, M, D, h, m or s), e.g. 7D or 12h", o.maxAge)
	}
	if withMetrics && len(errs) == 0 {
		m, err := newMetrics(opts.Metrics)
		if err != nil {
			errs = append(errs, err)
		}
		o.metrics = m
	}
	if o.instance == "" {
		o.instance = defaultInstance()
	}
	return o, errors.Join(errs...)
}

// LateThreshold is how late after its due time an occurrence counts as late in the metrics.
const LateThreshold = time.Second

// schedMetrics are the counters of Options.Metrics; a nil *schedMetrics counts nothing.
type schedMetrics struct {
	firedC, lateC, missedC *prometheus.CounterVec
}

// newMetrics registers the counters on reg, or finds those already there (nil reg: none).
func newMetrics(reg prometheus.Registerer) (*schedMetrics, error) {
	if reg == nil {
		return nil, nil
	}
	vec := func(name, help string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: metrics.Namespace, Subsystem: "schedule", Name: name, Help: help}, []string{"schedule"})
	}
	in, _, err := metrics.Register(reg, true,
		vec("occurrences_fired_total", "Occurrences this instance published to their target."),
		vec("occurrences_late_total", "Occurrences this instance published more than 1 s after their due time."),
		vec("occurrences_missed_total", "Occurrences the missed policy dropped (every instance was down at their time)."),
	)
	if err != nil {
		return nil, fmt.Errorf("%w: Options.Metrics: %w", ErrInvalidConfig, err)
	}
	m := &schedMetrics{}
	for i, c := range []**prometheus.CounterVec{&m.firedC, &m.lateC, &m.missedC} {
		var ok bool
		if *c, ok = in[i].(*prometheus.CounterVec); !ok {
			return nil, fmt.Errorf("%w: Options.Metrics: the registry already has a collector of another kind for metric %d of the scheduler's",
				ErrInvalidConfig, i+1)
		}
	}
	return m, nil
}

// init makes the counters of schedule name exist, at 0.
func (m *schedMetrics) init(name string) {
	if m != nil {
		m.firedC.WithLabelValues(name)
		m.lateC.WithLabelValues(name)
		m.missedC.WithLabelValues(name)
	}
}

// fired counts one occurrence fired late by late (late < 0: none fired) and missed dropped.
func (m *schedMetrics) fired(name string, late time.Duration, missed int64) {
	if m == nil {
		return
	}
	m.init(name)
	if late >= 0 {
		m.firedC.WithLabelValues(name).Inc()
		if late > LateThreshold {
			m.lateC.WithLabelValues(name).Inc()
		}
	}
	if missed > 0 {
		m.missedC.WithLabelValues(name).Add(float64(missed))
	}
}
