package exporter

import (
	"net"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/delaykit/rabbitdelay/topology"
)

// TestCollectManagementDown: when the management API does not answer, a scrape reports
// rabbitdelay_up 0 and its duration, nothing else, and passes the linter.
func TestCollectManagementDown(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close() // nothing listens there now: connection refused
	m, err := topology.NewManagement("http://"+addr+"/", "/")
	if err != nil {
		t.Fatal(err)
	}
	p, err := (topology.Spec{Prefix: "rd", Targets: topology.Targets{{Name: "orders", Type: "topic"}}}).Plan()
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(New(m, p, Options{Timeout: 5 * time.Second}))
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, f := range fams {
		names = append(names, f.GetName())
		if f.GetName() == "rabbitdelay_up" && f.GetMetric()[0].GetGauge().GetValue() != 0 {
			t.Errorf("rabbitdelay_up = %v, want 0", f.GetMetric()[0].GetGauge().GetValue())
		}
	}
	if len(names) != 2 || names[0] != "rabbitdelay_scrape_duration_seconds" || names[1] != "rabbitdelay_up" {
		t.Errorf("metrics %v, want rabbitdelay_scrape_duration_seconds and rabbitdelay_up alone", names)
	}
	problems, err := testutil.GatherAndLint(reg)
	if err != nil {
		t.Fatal(err)
	}
	for _, pr := range problems {
		t.Errorf("lint: %s: %s", pr.Metric, pr.Text)
	}
}
