package schedule

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestMetricsStartAtZero(t *testing.T) {
	m := NewMetrics()
	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(m); err != nil {
		t.Fatal(err)
	}
	m.init("a")
	if n := testutil.CollectAndCount(m); n != 3 {
		t.Errorf("%d series after declaring one schedule, want 3 (fired, late, missed at 0)", n)
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
	var nilM *Metrics
	nilM.fired("a", 0, 1) // counts nothing, no panic
}
