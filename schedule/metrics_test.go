package schedule

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestMetricsStartAtZero(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	m, err := newMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	m.init("a")
	if n, err := testutil.GatherAndCount(reg); err != nil || n != 3 {
		t.Errorf("%d series (%v) after declaring one schedule, want 3 (fired, late, missed at 0)", n, err)
	}
	m.fired("a", 2*time.Second, 4)
	m.fired("a", 0, 0)
	m.fired("a", -1, 2) // skipped: nothing fired, 2 missed
	if got := testutil.ToFloat64(m.firedC.WithLabelValues("a")); got != 2 {
		t.Errorf("fired %v", got)
	}
	if got := testutil.ToFloat64(m.lateC.WithLabelValues("a")); got != 1 {
		t.Errorf("late %v", got)
	}
	if got := testutil.ToFloat64(m.missedC.WithLabelValues("a")); got != 6 {
		t.Errorf("missed %v", got)
	}
	var nilM *schedMetrics
	nilM.fired("a", 0, 1) // counts nothing, no panic
	if m, err := newMetrics(nil); m != nil || err != nil {
		t.Errorf("newMetrics(nil) = %v, %v; want no counters and no error", m, err)
	}
}

// TestMetricsShared: Schedulers on one registry share its counters; a registry that holds one
// of the names with other labels is refused, naming Options.Metrics.
func TestMetricsShared(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	a, err := newMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	b, err := newMetrics(reg)
	if err != nil {
		t.Fatalf("second Scheduler on the registry: %v", err)
	}
	b.fired("s", 0, 0)
	if got := testutil.ToFloat64(a.firedC.WithLabelValues("s")); got != 1 {
		t.Errorf("fired seen by the first Scheduler's counters: %v, want 1", got)
	}

	clash := prometheus.NewPedanticRegistry()
	clash.MustRegister(prometheus.NewCounterVec(prometheus.CounterOpts{Name: "rabbitdelay_schedule_occurrences_late_total", Help: "other"}, []string{"other"}))
	if _, err := newMetrics(clash); !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), "Options.Metrics") {
		t.Errorf("a clashing registry: %v, want ErrInvalidConfig naming Options.Metrics", err)
	}
}
