package schedule

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/delaykit/rabbitdelay/internal/metrics"
)

// LateThreshold is how late an occurrence must be published, after its due time, to count as
// late in the metrics (the message's [LateHeader] always says how late it is).
const LateThreshold = time.Second

// Metrics counts, per schedule, the occurrences this instance fired, fired late, and missed
// (dropped by the missed policy). It is a prometheus.Collector: register it, and pass it to
// [New] with [WithMetrics]. Every counter of a schedule starts at 0 when the schedule is
// declared. Metric names: rabbitdelay_schedule_occurrences_fired_total,
// rabbitdelay_schedule_occurrences_late_total, rabbitdelay_schedule_occurrences_missed_total,
// each with the label schedule. A nil *Metrics counts nothing.
type Metrics struct {
	firedC, lateC, missedC *prometheus.CounterVec
}

// NewMetrics returns counters to register.
func NewMetrics() *Metrics {
	vec := func(name, help string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: metrics.Namespace, Subsystem: "schedule", Name: name, Help: help}, []string{"schedule"})
	}
	return &Metrics{
		firedC:  vec("occurrences_fired_total", "Occurrences this instance published to their target."),
		lateC:   vec("occurrences_late_total", "Occurrences this instance published more than 1 s after their due time."),
		missedC: vec("occurrences_missed_total", "Occurrences the missed policy dropped (every instance was down at their time)."),
	}
}

// Describe implements prometheus.Collector.
func (m *Metrics) Describe(ch chan<- *prometheus.Desc) {
	m.firedC.Describe(ch)
	m.lateC.Describe(ch)
	m.missedC.Describe(ch)
}

// Collect implements prometheus.Collector.
func (m *Metrics) Collect(ch chan<- prometheus.Metric) {
	m.firedC.Collect(ch)
	m.lateC.Collect(ch)
	m.missedC.Collect(ch)
}

func (m *Metrics) init(name string) {
	if m == nil {
		return
	}
	m.firedC.WithLabelValues(name)
	m.lateC.WithLabelValues(name)
	m.missedC.WithLabelValues(name)
}

// fired counts one occurrence fired late by late (late < 0: none fired) and missed dropped.
func (m *Metrics) fired(name string, late time.Duration, missed int64) {
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
