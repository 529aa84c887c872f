package metrics

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func counter(name string) prometheus.Counter {
	return prometheus.NewCounter(prometheus.CounterOpts{Namespace: Namespace, Name: name, Help: "A test counter."})
}

// TestRegister: all or none without share (a clash unregisters what was added and names the
// metric), the collector in effect with share, and unregister removing only what it added.
func TestRegister(t *testing.T) {
	reg := prometheus.NewRegistry()
	a, b := counter("a_total"), counter("b_total")
	in, unregister, err := Register(reg, false, a, b)
	if err != nil || in[0] != a || in[1] != b {
		t.Fatalf("Register: %v, %v", in, err)
	}

	// Without share: c is added, then a second a_total clashes; c is removed again.
	c := counter("c_total")
	if _, _, err := Register(reg, false, c, counter("a_total")); err == nil || !strings.Contains(err.Error(), "rabbitdelay_a_total") {
		t.Fatalf("a clash without share: %v, want an error naming rabbitdelay_a_total", err)
	}
	if reg.Unregister(counter("c_total")) {
		t.Errorf("c_total is still registered after the clash rolled back")
	}

	// With share: the a_total already there is the one in effect; unregister of the second
	// registration leaves it.
	in2, unregister2, err := Register(reg, true, counter("a_total"), counter("d_total"))
	if err != nil || in2[0] != a {
		t.Fatalf("Register with share: %v, %v; want the existing a_total in effect", in2, err)
	}
	unregister2()
	if n, err := testutil.GatherAndCount(reg, "rabbitdelay_a_total", "rabbitdelay_b_total", "rabbitdelay_d_total"); err != nil || n != 2 {
		t.Errorf("after the shared registration's unregister: %d series (%v), want a_total and b_total", n, err)
	}
	unregister()
	if n, err := testutil.GatherAndCount(reg); err != nil || n != 0 {
		t.Errorf("after unregister: %d series (%v), want none", n, err)
	}
}
