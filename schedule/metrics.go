package schedule

import (
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/delaykit/rabbitdelay/internal/metrics"
)

// LateThreshold is how late an occurrence must be published, after its due time, to count as
// late in the metrics (the message's [LateHeader] always says how late it is).
const LateThreshold = time.Second

// schedMetrics are the counters of Options.Metrics, shared by the Schedulers of one registry.
// A nil *schedMetrics counts nothing.
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
