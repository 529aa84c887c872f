package exporter

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/delaykit/rabbitdelay/internal/admin"
	"github.com/delaykit/rabbitdelay/internal/delayspec"
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
	m, err := admin.NewManagement("http://"+addr+"/", "/")
	if err != nil {
		t.Fatal(err)
	}
	p, err := admin.NewPlan(delayspec.Spec{Prefix: "rd", Targets: delayspec.Targets{{Name: "orders", Type: "topic"}}})
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

// TestHandlerBoundsScrapes: a management API that accepts and never answers held each scrape for
// the whole Options.Timeout (the CLI passed its 60 s command timeout), past Prometheus's own
// scrape timeout, and every abandoned scrape kept its requests open. Through Handler a scrape
// ends by Prometheus's X-Prometheus-Scrape-Timeout-Seconds (with rabbitdelay_up 0), or when its
// client goes away; and beyond MaxScrapesInFlight scrapes get 503 at once.
func TestHandlerBoundsScrapes(t *testing.T) {
	hang := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-hang:
		case <-r.Context().Done():
		}
	}))
	defer srv.Close()
	defer close(hang)
	m, err := admin.NewManagement(srv.URL+"/", "/")
	if err != nil {
		t.Fatal(err)
	}
	p, err := admin.NewPlan(delayspec.Spec{Prefix: "rd", Targets: delayspec.Targets{{Name: "orders", Type: "topic"}}})
	if err != nil {
		t.Fatal(err)
	}
	h, err := Handler(New(m, p, Options{Timeout: 10 * time.Minute}))
	if err != nil {
		t.Fatal(err)
	}
	web := httptest.NewServer(h)
	defer web.Close()

	// Prometheus's header: the scrape answers, with rabbitdelay_up 0, before the 2 s it allows.
	req, _ := http.NewRequest("GET", web.URL, nil)
	req.Header.Set("X-Prometheus-Scrape-Timeout-Seconds", "2")
	done := make(chan string, 1)
	go func() {
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			done <- err.Error()
			return
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		done <- string(body)
	}()
	select {
	case body := <-done:
		if !strings.Contains(body, "rabbitdelay_up 0") {
			t.Errorf("scrape with a 2 s scrape timeout: %.300s; want rabbitdelay_up 0", body)
		}
	case <-time.After(time.Minute): // bounds a hang only; the scrape's bound is 1.5 s
		t.Fatal("a scrape with X-Prometheus-Scrape-Timeout-Seconds: 2 did not end within a minute")
	}

	// Clients that go away: their scrapes end, so new ones are served (not 503).
	for range 3 * MaxScrapesInFlight {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		req, _ := http.NewRequestWithContext(ctx, "GET", web.URL, nil)
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
		}
		cancel()
	}
	// Scrapes that stay: beyond MaxScrapesInFlight, 503 at once.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for range MaxScrapesInFlight {
		go func() {
			// Until the scrapes of the clients that went away have ended, this one may be
			// refused too: again until it is served (and hangs until ctx ends).
			for ctx.Err() == nil {
				req, _ := http.NewRequestWithContext(ctx, "GET", web.URL, nil)
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					return
				}
				resp.Body.Close()
				if resp.StatusCode != http.StatusServiceUnavailable {
					return
				}
				time.Sleep(20 * time.Millisecond)
			}
		}()
	}
	deadline := time.Now().Add(time.Minute)
	for {
		// Until both hanging scrapes hold their place, this one may be served (and hang): a
		// short client timeout, then again.
		pctx, pcancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		req, _ := http.NewRequestWithContext(pctx, "GET", web.URL, nil)
		resp, err := http.DefaultClient.Do(req)
		pcancel()
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusServiceUnavailable {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("with %d scrapes hanging, another is still served (%v), want 503", MaxScrapesInFlight, err)
		}
	}
}
