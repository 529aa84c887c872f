package exporter

import (
	"context"
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// MaxScrapesInFlight is how many scrapes [Handler] serves at once; more get 503 at once, so a
// management API that hangs cannot pile up scrapes.
const MaxScrapesInFlight = 2

// Handler returns an http.Handler serving e's metrics with the Go runtime's and the process's,
// on registries of its own: mount it on /metrics. Each scrape is bounded by e's
// Options.Timeout, by its request and by X-Prometheus-Scrape-Timeout-Seconds less half a second
// (so that rabbitdelay_up 0 arrives before Prometheus gives up). The error is a collector's
// registration error.
func Handler(e *Exporter) (http.Handler, error) {
	gc, pc := collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{})
	check := prometheus.NewRegistry()
	for _, c := range []prometheus.Collector{e, gc, pc} {
		if err := check.Register(c); err != nil {
			return nil, err
		}
	}
	inFlight := make(chan struct{}, MaxScrapesInFlight)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case inFlight <- struct{}{}:
			defer func() { <-inFlight }()
		default:
			http.Error(w, "rabbitdelay exporter: too many scrapes in flight (the management API is slow?)", http.StatusServiceUnavailable)
			return
		}
		ctx := r.Context()
		if v, err := strconv.ParseFloat(r.Header.Get("X-Prometheus-Scrape-Timeout-Seconds"), 64); err == nil && v > 1 {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, time.Duration((v-0.5)*float64(time.Second)))
			defer cancel()
		}
		reg := prometheus.NewRegistry()
		reg.MustRegister(scrape{e: e, ctx: ctx}, gc, pc) // registered once above: they register
		promhttp.HandlerFor(reg, promhttp.HandlerOpts{}).ServeHTTP(w, r)
	}), nil
}

type scrape struct {
	e   *Exporter
	ctx context.Context
}

func (s scrape) Describe(ch chan<- *prometheus.Desc) { s.e.Describe(ch) }
func (s scrape) Collect(ch chan<- prometheus.Metric) { s.e.collect(s.ctx, ch) }
