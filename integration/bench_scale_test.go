//go:build integration && bench

package integration

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/delaykit/rabbitdelay/amqpdelay"
	"github.com/delaykit/rabbitdelay/integration/brokertest"
)

var (
	scaleWorkers  = flag.Int("scale-workers", 64, "BenchmarkPendingScale: publishing goroutines (the Publisher pipelines their publishes over its channels)")
	scaleRounds   = flag.Int("scale-rounds", 1, "BenchmarkPendingScale: rounds, each measuring raw and then running the ladder (and the plugin) against it; use this, not -count, for repeats")
	scaleDeferred = flag.Int("scale-deferred", 0, "BenchmarkPendingScale: when > 0, publish from one goroutine with PublishDeferred, this many in flight (Config.MaxInFlight), instead of -scale-workers goroutines calling Publish")
)

// settledMemory waits (at most 2 minutes) until the broker's memory use stops falling - a vhost
// deleted by the previous benchmark frees its memory over tens of seconds - and returns it.
func settledMemory(ctx context.Context, tb testing.TB, br *brokertest.Broker) (int64, error) {
	prev, err := brokerMemory(tb, br)
	if err != nil {
		return 0, err
	}
	for end := time.Now().Add(2 * time.Minute); time.Now().Before(end); {
		select {
		case <-ctx.Done():
			return prev, nil
		case <-time.After(6 * time.Second): // mem_used is refreshed every 5 s
		}
		m, err := brokerMemory(tb, br)
		if err != nil {
			return 0, err
		}
		if m > prev-prev/50 { // fell by less than 2 %
			return min(m, prev), nil
		}
		prev = m
	}
	return prev, nil
}

// BenchmarkPendingScale puts -scale messages (200,000; the full run: -scale=1000000) on
// the default ladder (radix 16, 1 ms, top-split, quorum queues), published as fast as
// -scale-workers goroutines calling Publish can (or, with -scale-deferred=W, one goroutine
// calling PublishDeferred with W in flight), and waits until every one is delivered. So that all of them
// really wait at the same time, every message is due 60-120 s (uniform) after the moment
// publishing is expected to end, hold = n / (0.4 x the raw quorum publish rate measured first in
// the same run); a message published later than that still gets at least 60 s. It first waits
// for the broker's memory use to settle (see settledMemory). While the messages wait it samples
// the broker's memory (management API, mem_used summed over nodes) every 5 s and reports the
// sample taken with the most messages pending: mem_MiB, mem_delta_MiB over the memory before
// publishing, pending (how many were pending then; n when all waited at once) and bytes_per_msg
// (delta / pending), and the part of the delta in the categories where each path keeps its
// waiting messages (mem_mnesia_delta_MiB: the plugin's Mnesia tables; mem_quorum_delta_MiB:
// quorum queues' in-memory log tables and processes). Then pub_msg/s and pub_x_raw, drain_msg/s (arrivals per second from the
// first due time to the last arrival) and drain_x_raw, lateness p50/p99/max, early and lost
// counts. When AMQP_PLUGIN_URL is the broker of AMQP_URL, the plugin then holds the same load
// (sub-benchmark plugin): the plugin keeps every waiting message in memory (Mnesia), the ladder
// in its queues' logs on disk.
//
// Target (issue): 0 lost.
func BenchmarkPendingScale(b *testing.B) {
	n := *scaleN
	c := defaultLadderCase("ladder")
	p := pluginSetup(b)
	// Go's -count repeats each sub-benchmark in a row (raw N times, then the ladder N times),
	// which would hold every ladder run to the last raw run: each round measures its own raw.
	for round := range *scaleRounds {
		raw := measureRaw(b, min(n, 20_000))
		hold := time.Duration(float64(n) / (0.4 * raw) * float64(time.Second)).Round(time.Second)
		b.Logf("round %d: raw quorum publish: %.0f msg/s; every message is due 60-120 s after %v from the start of publishing", round+1, raw, hold)
		// A benchmark that runs sub-benchmarks (raw) reports no metrics of its own: the ladder
		// is a sub-benchmark too.
		b.Run("ladder", func(b *testing.B) {
			pendingScale(b, n, c.String(), func(tb testing.TB) setup { return declare(tb, c) }, raw, hold)
		})
		if p != nil {
			b.Run("plugin", func(b *testing.B) { pendingScale(b, n, "the plugin", p, raw, hold) })
		}
	}
}

// pendingScale runs BenchmarkPendingScale's load on the case that setupCase declares (named
// what in the log line).
func pendingScale(b *testing.B, n int, what string, setupCase func(testing.TB) setup, raw float64, hold time.Duration) {
	for range b.N {
		s := setupCase(b)
		if s.broker == nil {
			b.Skip("needs the management API of the case's broker to read its memory (AMQP_PLUGIN_URL is not the broker of AMQP_URL)")
		}
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Minute)
		rec := newRecorder(n)
		cctx, stop := context.WithCancel(ctx)
		wait := consume(cctx, b, s.url, s.ready, rec)

		before, err := settledMemory(ctx, b, s.broker)
		if err != nil {
			b.Fatalf("broker memory: %v", err)
		}
		partsBefore, err := brokerMemoryParts(s.broker)
		if err != nil {
			b.Fatalf("broker memory by category: %v", err)
		}
		// Sample memory with the pending count until everything has arrived.
		var (
			mu                 sync.Mutex
			peakPending, peakM int64
			peakParts          map[string]int64
		)
		sampled := make(chan struct{})
		go func() {
			defer close(sampled)
			tick := time.NewTicker(5 * time.Second)
			defer tick.Stop()
			for {
				select {
				case <-cctx.Done():
					return
				case <-tick.C:
				}
				pending := rec.published.Load() - rec.count.Load()
				m, err := brokerMemory(b, s.broker)
				if err != nil {
					continue
				}
				parts, err := brokerMemoryParts(s.broker)
				if err != nil {
					continue
				}
				mu.Lock()
				if pending > peakPending {
					peakPending, peakM, peakParts = pending, m, parts
				}
				mu.Unlock()
			}
		}()
		windowStart := time.Now().Add(hold)
		delayOf := func(_ int, now time.Time) time.Duration {
			extra := 60*time.Second + time.Duration(rand.Int64N(int64(60*time.Second)))
			return max(windowStart.Sub(now), 0).Truncate(time.Millisecond) + extra.Truncate(time.Millisecond)
		}
		var took time.Duration
		if *scaleDeferred > 0 {
			took, err = publishDeferredN(ctx, s.cfg, n, *scaleDeferred, rec, delayOf)
		} else {
			took, err = runWorkersN(ctx, *scaleWorkers, n, s.publish, rec, nil, delayOf)
		}
		if err != nil {
			b.Fatalf("publish: %v", err)
		}
		waitArrivals(ctx, rec, windowStart.Add(120*time.Second+60*time.Second), 10*time.Second, nil)
		stop()
		wait()
		<-sampled
		cancel()
		res := rec.result()
		firstDue := time.Unix(0, rec.firstDue())
		drain := float64(res.arrived) / res.lastArrive.Sub(firstDue).Seconds()
		if peakPending == 0 {
			b.Fatal("no memory sample was taken while messages were pending: the management API did not answer")
		}
		const mib = 1 << 20
		delta := peakM - before
		// mem_used moves by hundreds of MiB as quorum queues' write-ahead log rolls over; the
		// categories where each path keeps its waiting messages are steadier.
		partDelta := func(names ...string) float64 {
			var d int64
			for _, n := range names {
				d += peakParts[n] - partsBefore[n]
			}
			return float64(d) / mib
		}
		mnesiaDelta := partDelta("mnesia")
		quorumDelta := partDelta("quorum_ets", "quorum_queue_procs", "quorum_queue_dlx_procs")
		b.ReportMetric(mnesiaDelta, "mem_mnesia_delta_MiB")
		b.ReportMetric(quorumDelta, "mem_quorum_delta_MiB")
		b.ReportMetric(float64(n)/took.Seconds(), "pub_msg/s")
		b.ReportMetric(float64(n)/took.Seconds()/raw, "pub_x_raw")
		b.ReportMetric(drain/raw, "drain_x_raw")
		b.ReportMetric(float64(peakPending), "pending")
		b.ReportMetric(float64(peakM)/mib, "mem_MiB")
		b.ReportMetric(float64(delta)/mib, "mem_delta_MiB")
		b.ReportMetric(float64(delta)/float64(max(peakPending, 1)), "bytes_per_msg")
		b.ReportMetric(drain, "drain_msg/s")
		b.ReportMetric(res.p50, "p50_ms")
		b.ReportMetric(res.p99, "p99_ms")
		b.ReportMetric(res.max, "max_ms")
		b.ReportMetric(float64(res.early), "early")
		b.ReportMetric(float64(res.lost), "lost")
		b.ReportMetric(0, "ns/op")
		b.Logf("%d messages on %s, due 60-120 s after publishing: published in %v (%.0f msg/s, %s); broker memory %.0f MiB before, "+
			"%.0f MiB with %d pending (%.0f bytes each; of the delta, Mnesia %.0f MiB, quorum queues %.0f MiB); drained at %.0f msg/s; lateness p50 %.0f ms, p99 %.0f ms, max %.0f ms; %d early, %d lost, %d duplicates",
			n, what, took.Round(time.Millisecond), float64(n)/took.Seconds(), publishers(), float64(before)/mib, float64(peakM)/mib, peakPending,
			float64(delta)/float64(max(peakPending, 1)), mnesiaDelta, quorumDelta, drain, res.p50, res.p99, res.max, res.early, res.lost, res.dups)
		if res.lost > 0 {
			b.Errorf("%d of %d messages lost; queues holding messages:%s", res.lost, res.published, s.queues(10))
		}
	}
}

// publishers describes how BenchmarkPendingScale publishes (-scale-deferred, -scale-workers).
func publishers() string {
	if *scaleDeferred > 0 {
		return fmt.Sprintf("one goroutine, PublishDeferred with %d in flight", *scaleDeferred)
	}
	return fmt.Sprintf("%d goroutines calling Publish", *scaleWorkers)
}

// publishDeferredN publishes messages 0..n-1 to benchTarget from one goroutine with
// PublishDeferred on a Publisher of its own for cfg (Config.MaxInFlight window), window in flight
// (runPipelined), recording each confirmed one in rec, and returns the time from the first
// publish to the last confirmation. The first error ends it.
func publishDeferredN(ctx context.Context, cfg amqpdelay.Config, n, window int, rec *recorder,
	delayOf func(i int, now time.Time) time.Duration) (time.Duration, error) {
	cfg.Strategy, cfg.MaxInFlight = amqpdelay.LadderOnly, window
	p, err := amqpdelay.NewPublisher(ctx, cfg)
	if err != nil {
		return 0, fmt.Errorf("publisher: %w", err)
	}
	defer p.Close()
	return runPipelined(ctx, n, window, func(ctx context.Context, i int) (func() error, error) {
		now := time.Now()
		d := delayOf(i, now)
		def, err := p.PublishDeferred(ctx, benchTarget, "bench.key", benchPublishing(i), d)
		if err != nil {
			return nil, err
		}
		return func() error {
			r, err := def.Wait(ctx)
			if err == nil {
				rec.sent(i, now.Add(d), r.Due)
			}
			return err
		}, nil
	})
}
