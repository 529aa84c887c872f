//go:build integration && bench

package integration

import (
	"context"
	"flag"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/delaykit/rabbitdelay/integration/brokertest"
	"github.com/delaykit/rabbitdelay/internal/admin"
	"github.com/delaykit/rabbitdelay/internal/delayspec"
	"github.com/delaykit/rabbitdelay/internal/exporter"
)

var exporterWaiting = flag.Int("exporter-waiting", 200_000, "BenchmarkExporterScrape: messages waiting in the delay queues")

// BenchmarkExporterScrape measures one scrape of the exporter's /metrics over HTTP (the
// management API requests and the exposition) for the default ladder (330 queues) with
// -exporter-waiting messages waiting in its level 6 queues (4.7 h and more). The baselines, in
// the same run: the same scrape of the same topology while it was empty (s/scrape-empty), and
// one management API request for the vhost's queues with the messages waiting
// (s/get-queues, the least a scrape of the management API costs). Reported: s/scrape, the
// baselines and the ratios to them.
func BenchmarkExporterScrape(b *testing.B) {
	env := brokertest.NewEnv(b)
	if env.Broker.ManagementURL == "" {
		b.Skip("needs the management API (AMQP_MANAGEMENT_URL)")
	}
	m, err := admin.NewManagement(env.Broker.ManagementURL, env.VHost)
	if err != nil {
		b.Fatal(err)
	}
	spec := delayspec.Spec{Prefix: "rd", Targets: delayspec.Targets{{Name: "orders", Type: "topic"}}, QueueType: delayspec.Quorum,
		Plugin: delayspec.PluginOff, ReadyQueues: delayspec.ReadyQueues{{Queue: "orders.work", Exchange: "orders", BindingKey: "o.#"}}}
	p, err := admin.NewPlan(spec)
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	if _, err := admin.Apply(ctx, env.Dial(b), p, admin.ApplyOptions{Management: m}); err != nil {
		b.Fatalf("apply: %v", err)
	}
	h, err := exporter.Handler(exporter.New(m, p, exporter.Options{}))
	if err != nil {
		b.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()
	scrape := func() {
		resp, err := http.Get(srv.URL)
		if err != nil {
			b.Fatalf("scrape: %v", err)
		}
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			b.Fatalf("scrape: %s", resp.Status)
		}
	}
	const baselineScrapes = 10
	start := time.Now()
	for range baselineScrapes {
		scrape()
	}
	empty := time.Since(start) / baselineScrapes

	start = time.Now()
	// Fill the level 6 queues straight through the default exchange, pipelined with confirms.
	var queues []string
	for _, q := range p.Queues {
		if q.Role == admin.RoleLadder && q.Level == 6 {
			queues = append(queues, q.Name)
		}
	}
	const workers = 8
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ch, err := env.Dial(b).Channel()
			if err == nil {
				err = ch.Confirm(false)
			}
			if err != nil {
				errs <- err
				return
			}
			var pending []*amqp.DeferredConfirmation
			for i := w; i < *exporterWaiting; i += workers {
				c, err := ch.PublishWithDeferredConfirmWithContext(ctx, "", queues[i%len(queues)], false, false,
					amqp.Publishing{DeliveryMode: amqp.Persistent, Body: []byte("waiting")})
				if err != nil {
					errs <- err
					return
				}
				if pending = append(pending, c); len(pending) == 500 {
					for _, c := range pending {
						if ok, err := c.WaitContext(ctx); err != nil || !ok {
							errs <- fmt.Errorf("confirm: ack %v, %v", ok, err)
							return
						}
					}
					pending = pending[:0]
				}
			}
			for _, c := range pending {
				if ok, err := c.WaitContext(ctx); err != nil || !ok {
					errs <- fmt.Errorf("confirm: ack %v, %v", ok, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		b.Fatalf("publish: %v", err)
	}
	published := time.Since(start)
	// The management API counts them within a collect_statistics_interval or two.
	for deadline := time.Now().Add(2 * time.Minute); ; {
		queues, err := m.Queues(ctx)
		if err != nil {
			b.Fatal(err)
		}
		var n int64
		for _, q := range queues {
			n += max(q.Messages, 0)
		}
		if n >= int64(*exporterWaiting) {
			break
		}
		if time.Now().After(deadline) {
			b.Fatalf("the management API counts %d messages, want %d", n, *exporterWaiting)
		}
		time.Sleep(time.Second)
	}
	b.Logf("%d messages waiting (published in %v)", *exporterWaiting, published.Round(time.Second))
	n := 0
	start = time.Now()
	for b.Loop() {
		scrape()
		n++
	}
	per := time.Since(start) / time.Duration(n)
	b.StopTimer()
	// The second baseline: one management API request, the vhost's queues with their
	// counts, with the messages waiting: what any scrape of the management API costs at least.
	start = time.Now()
	for range baselineScrapes {
		if _, err := m.Queues(ctx); err != nil {
			b.Fatal(err)
		}
	}
	one := time.Since(start) / baselineScrapes
	b.ReportMetric(per.Seconds(), "s/scrape")
	b.ReportMetric(empty.Seconds(), "s/scrape-empty")
	b.ReportMetric(one.Seconds(), "s/get-queues")
	b.ReportMetric(float64(per)/float64(empty), "x-empty")
	b.ReportMetric(float64(per)/float64(one), "x-get-queues")
}
