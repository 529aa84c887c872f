//go:build integration && bench

package integration

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"
)

// BenchmarkBurst publishes -burst messages (100,000) as fast as 8 goroutines can, every one due
// in the same 1 s window that opens -burst-due after publishing starts (default: 30 s, or three
// times the raw case's publishing time when that is longer, so that the burst is published before
// it falls due): the "send every reminder at 09:00" case. Lateness is measured from each
// message's place in the window, so a message published after it was due counts as late
// (late_published says how many were). Per case it reports the publish rate, the drain rate
// (messages arrived per second from the start of the window to the last arrival), lateness
// p50/p99/max, early, lost and duplicate counts; the raw quorum-queue publish rate of the same run is the limit both rates
// are compared with (pub_x_raw, drain_x_raw). Cases: raw, then -burst-cases (default: the
// bucket path, then the radix-16 1 ms quorum ladder in the default order, top-split, and
// shortest-first), then the plugin when
// AMQP_PLUGIN_URL is set. A case after "bucket" also reports its drain rate and p99 lateness
// as ratios to the bucket's latest run (drain_x_bucket, p99_x_bucket): the bucket path is one
// hop, the limit of any TTL design for messages falling due together.
//
// Target (issue): the default ladder drains at least 0.9 x the bucket path, p99 at most 1.2 x
// the bucket's, 0 lost, 0 early.
func BenchmarkBurst(b *testing.B) {
	n := *burstN
	cases := casesFromFlag(b, *burstCases)
	raw := measureRaw(b, n)
	due := *burstDue
	if due <= 0 {
		due = max(30*time.Second, 3*time.Duration(float64(n)/raw*float64(time.Second)).Round(time.Second))
	}
	b.Logf("raw quorum publish, %d messages, %d goroutines: %.0f msg/s; the window opens %v after publishing starts", n, benchWorkers, raw, due)
	rows := [][]string{{"case", "pub msg/s", "x raw", "drain msg/s", "x raw", "p50 ms", "p99 ms", "max ms", "early", "lost", "dups"}}
	rows = append(rows, []string{"raw", num(raw), "1.00", "", "", "", "", "", "", "", ""})
	var bucket *burstResult // the latest run of case "bucket", the limit the ladder is held to
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			for range b.N {
				s := declare(b, c)
				r := runBurst(b, s, n, due)
				r.report(b, raw)
				if c.name == "bucket" {
					bucket = &r
				} else if bucket != nil && bucket.drainRate > 0 && bucket.p99 > 0 {
					b.ReportMetric(r.drainRate/bucket.drainRate, "drain_x_bucket")
					b.ReportMetric(r.p99/bucket.p99, "p99_x_bucket")
				}
				rows = append(rows, r.row(c.name, raw))
			}
		})
	}
	if p := pluginSetup(b); p != nil {
		b.Run("plugin", func(b *testing.B) {
			for range b.N {
				r := runBurst(b, p(b), n, due)
				r.report(b, raw)
				rows = append(rows, r.row("plugin", raw))
			}
		})
	}
	b.Logf("burst of %d messages due in one 1 s window %v after publishing starts:%s", n, due, table(rows))
}

// burstResult is one case's burst.
type burstResult struct {
	result
	pubRate, drainRate float64
	latePublished      int64
}

func (r burstResult) report(b *testing.B, raw float64) {
	b.ReportMetric(r.pubRate, "pub_msg/s")
	b.ReportMetric(r.pubRate/raw, "pub_x_raw")
	b.ReportMetric(r.drainRate, "drain_msg/s")
	b.ReportMetric(r.drainRate/raw, "drain_x_raw")
	b.ReportMetric(r.p50, "p50_ms")
	b.ReportMetric(r.p99, "p99_ms")
	b.ReportMetric(r.max, "max_ms")
	b.ReportMetric(float64(r.early), "early")
	b.ReportMetric(float64(r.lost), "lost")
	b.ReportMetric(float64(r.dups), "dups")
	b.ReportMetric(float64(r.latePublished), "late_published")
	b.ReportMetric(0, "ns/op") // the time per run says nothing here
}

func (r burstResult) row(name string, raw float64) []string {
	return []string{name, num(r.pubRate), ratio(r.pubRate / raw), num(r.drainRate), ratio(r.drainRate / raw),
		ms(r.p50), ms(r.p99), ms(r.max), fmt.Sprint(r.early), fmt.Sprint(r.lost), fmt.Sprint(r.dups)}
}

// runBurst runs one burst of n messages through s.
func runBurst(b *testing.B, s setup, n int, due time.Duration) burstResult {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	rec := newRecorder(n)
	cctx, stop := context.WithCancel(ctx)
	wait := consume(cctx, b, s.url, s.ready, rec)
	defer func() { stop(); wait() }()

	window := time.Now().Add(due)
	var late atomic.Int64
	// Message i is due at a point of the window spread evenly by a multiplicative hash of i.
	dueOf := func(i int) time.Time { return window.Add(time.Duration(uint64(i) * 2654435761 % uint64(time.Second))) }
	took, err := runWorkers(ctx, n, s.publish, rec, nil, func(i int, now time.Time) time.Duration {
		d := dueOf(i).Sub(now)
		if d <= 0 {
			late.Add(1)
		}
		return d
	})
	if err != nil {
		b.Fatalf("publish: %v", err)
	}
	res := burstResult{pubRate: float64(n) / took.Seconds(), latePublished: late.Load()}
	if res.latePublished > 0 {
		b.Logf("%d messages were published after their due time: publishing took %v, longer than the %v before the window (-burst-due)", res.latePublished, took, due)
	}
	var progress func(int64)
	if *burstTrace {
		ticks := 0
		progress = func(c int64) {
			// The management API is slow while the broker is busy: list the queues every 5 s only.
			var qs string
			if ticks++; ticks%5 == 0 {
				qs = "; queues:" + s.queues(6)
			}
			b.Logf("%+6.1fs arrived %6d%s", time.Since(window).Seconds(), c, qs)
		}
	}
	waitArrivals(ctx, rec, window.Add(time.Second+60*time.Second), 10*time.Second, progress)
	res.result = rec.result()
	if res.arrived > 0 {
		res.drainRate = float64(res.arrived) / res.lastArrive.Sub(window).Seconds()
	}
	if res.lost > 0 {
		b.Errorf("%d of %d messages lost; queues holding messages:%s", res.lost, res.published, s.queues(10))
	}
	return res
}
