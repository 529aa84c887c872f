package declare

import (
	"cmp"
	"context"
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/delaykit/rabbitdelay/internal/admin"
	"github.com/delaykit/rabbitdelay/internal/delayspec"
	"github.com/delaykit/rabbitdelay/internal/exporter"
)

const defaultListen = ":9531"

var exporterCommand = command{name: "exporter", summary: "serve the topology's state as Prometheus metrics on /metrics (management API)",
	help: "Serves /metrics (Prometheus exposition format) until interrupted (SIGINT, SIGTERM). Each scrape reads the management\n" +
		"API (--management-url, required): messages per ladder level and bucket, messages in dead-letter state, consumers\n" +
		"on delay queues, the parking and ready queues, policy problems, and leaders and members per cluster node; every\n" +
		"name starts with rabbitdelay_ (the exporter package documents each). --timeout bounds each scrape's requests\n" +
		"(default 10 s here), not the command; so do the scrape's request and Prometheus's\n" +
		"X-Prometheus-Scrape-Timeout-Seconds, and at most 2 scrapes run at once. Grafana: docs/grafana/rabbitdelay.json.",
	long: true,
	extra: func(s *settings) []option {
		return []option{{name: "listen", arg: "ADDR", def: defaultListen, usage: "address to serve /metrics on (host:port; port 0 picks one, logged)",
			set: func(v string) error { s.listen = v; return nil }},
			boolOption("per-queue", "label the delay queues' metrics with the queue (one series per queue, 330 for the default ladder) "+
				"instead of summing them per ladder level and bucket", flagOf(&s.perQueue))}
	}, run: cmdExporter}

func cmdExporter(ctx context.Context, e *invocation) error {
	p, m, err := e.managed(func(*admin.Plan) string {
		return "exporter reads the management API: set --management-url or AMQPDELAY_MANAGEMENT_URL " +
			"(a user with the monitoring tag also sees the cluster's nodes)"
	})
	if err != nil {
		return err
	}
	if p.Spec.Plugin == delayspec.PluginAuto {
		p = p.WithoutPlugin() // the plugin holds its messages in no queue: nothing to count
	}
	// A scrape's bound, not the command's: Prometheus waits 10 s by default.
	scrape := cmp.Or(time.Duration(e.s.vars.Timeout), exporter.DefaultTimeout)
	exp := exporter.New(m, p, exporter.Options{PerQueue: e.s.perQueue, Timeout: scrape, OnScrape: scrapeLogger(e)})
	// One scrape before serving puts a wrong management URL or password in the log at once.
	first := prometheus.NewRegistry()
	first.MustRegister(exp)
	_, _ = first.Gather()
	h, err := exporter.Handler(exp)
	if err != nil {
		return err
	}
	addr := cmp.Or(e.s.listen, defaultListen)
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return usageError{fmt.Errorf("--listen %s: %w", addr, err)}
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", h)
	mux.HandleFunc("/{$}", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, "rabbitdelay exporter: metrics on /metrics")
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	e.log.Info().Str("address", ln.Addr().String()).Str("prefix", p.Spec.Prefix).Str("vhost", m.VHost()).
		Msg("exporter: serving /metrics")
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	select {
	case err := <-done:
		return fmt.Errorf("exporter: %w", err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		return fmt.Errorf("exporter: shut down: %w", err)
	}
	e.log.Info().Msg("exporter: stopped")
	return nil
}

// scrapeLogger returns the exporter's OnScrape: it logs the first failing scrape, then at most
// one a minute while scrapes keep failing (so frequent scrapes do not flood the log), and the
// management API answering again.
func scrapeLogger(e *invocation) func(error) {
	var mu sync.Mutex
	failing, first := false, true
	var at time.Time
	return func(err error) {
		mu.Lock()
		defer mu.Unlock()
		defer func() { first = false }()
		if err == nil {
			if failing {
				e.log.Info().Msg("exporter: the management API answers again")
				failing = false
			}
			return
		}
		if !failing || time.Since(at) >= time.Minute {
			what := "exporter: a scrape could not read the management API (rabbitdelay_up 0; logged at most once a minute while it fails)"
			if first {
				what = "exporter: the management API does not answer; serving rabbitdelay_up 0 until it does"
			}
			e.log.Error().Err(err).Msg(what)
			failing, at = true, time.Now()
		}
	}
}
