//go:build integration && bench

package integration

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/delaykit/rabbitdelay/amqpdelay"
	"github.com/delaykit/rabbitdelay/internal/delayspec"
	"github.com/delaykit/rabbitdelay/ttlbuckets"
)

// steadyBuckets are the buckets of the bucket case: every whole second the steady delays can take.
var steadyBuckets = []time.Duration{1 * time.Second, 2 * time.Second, 3 * time.Second, 4 * time.Second, 5 * time.Second,
	6 * time.Second, 7 * time.Second, 8 * time.Second, 9 * time.Second, 10 * time.Second}

// BenchmarkLatenessSteady publishes -steady-rate messages per second (1,000) for -steady-seconds
// (20), delays uniform in 1-10 s, and reports per path the lateness (arrival minus the due time
// the publisher computed) p50, p99 and max in ms, and the early and lost counts. Cases
// (-steady-cases): "raw", the baseline of the same run (a plain publish with a confirm, no delay,
// to the target exchange: the broker's own publish-to-delivery latency at that rate), "bucket"
// (delays rounded to whole seconds, one bucket per second), any ladder case of -burst-cases' list
// (default: radix 16, 1 ms, quorum, in the default order, top-split ("split"), and
// shortest-first) and, when
// AMQP_PLUGIN_URL is set, the plugin. Each case runs alone, in a vhost of its own, with a
// consumer draining its ready queue as messages arrive. When the broker runs on this machine it
// also reports the broker's CPU time per message (broker_cpu_ms/msg, from /proc: publish, every
// hop and the delivery) and the cores it kept busy on average (broker_cores): what each path
// costs the broker, and how close to its CPU limit the rate is; after the raw case, also that
// CPU as a ratio to raw's (broker_cpu_x_raw).
//
// Target (issue) for the default ladder on quorum queues: p99 <= 20 ms, 0 early, 0 lost.
func BenchmarkLatenessSteady(b *testing.B) {
	type scase struct {
		name  string
		setup func(testing.TB) setup
		delay func() time.Duration
	}
	msDelay := func() time.Duration {
		return time.Second + time.Duration(rand.Int64N(int64(9*time.Second))).Truncate(time.Millisecond)
	}
	var cases []scase
	namedPlugin := false
	for _, name := range strings.Split(*steadyCases, ",") {
		switch name = strings.TrimSpace(name); name {
		case "":
		case "plugin":
			namedPlugin = true // added below whenever pluginSetup has a broker with the plugin
		case "raw":
			// The floor: a plain publish with a confirm to the target exchange, consumed from the
			// same ready queue; lateness is arrival minus the publish call.
			cases = append(cases, scase{name: name, delay: func() time.Duration { return 0 }, setup: rawReady})
		case "bucket":
			cases = append(cases, scase{name: name, delay: func() time.Duration { return steadyBuckets[rand.IntN(len(steadyBuckets))] }, setup: func(tb testing.TB) setup {
				return declare(tb, delayCase{name: "bucket", ladder: ttlbuckets.Ladder{}.WithDefaults(), qtype: delayspec.Quorum, buckets: steadyBuckets, path: amqpdelay.PathBucket})
			}})
		default:
			c := casesFromFlag(b, name)[0]
			cases = append(cases, scase{name: name, delay: msDelay, setup: func(tb testing.TB) setup { return declare(tb, c) }})
		}
	}
	if p := pluginSetup(b); p != nil {
		cases = append(cases, scase{name: "plugin", delay: msDelay, setup: p})
	} else if namedPlugin {
		b.Fatalf("-steady-cases names the plugin, but AMQP_PLUGIN_URL is not set: start a broker with the plugin (see CONTRIBUTING.md, The delayed-message plugin)")
	}
	rate, secs := *steadyRate, *steadySeconds
	var rawCPU float64 // broker CPU ms per message of the raw case, when it ran first
	n := rate * secs
	rows := [][]string{{"path", "p50 ms", "p99 ms", "max ms", "early", "lost", "dups", "broker CPU ms/msg", "broker cores"}}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			for range b.N {
				s := c.setup(b)
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
				rec := newRecorder(n)
				cctx, stop := context.WithCancel(ctx)
				wait := consume(cctx, b, s.url, s.ready, rec)
				var cpu0 time.Duration
				cpuOK := s.broker != nil
				if cpuOK {
					cpu0, cpuOK = brokerCPU(s.broker)
				}
				wall0 := time.Now()
				start := time.Now().Add(100 * time.Millisecond)
				interval := time.Second / time.Duration(rate)
				sendAt := func(i int) time.Time { return start.Add(time.Duration(i) * interval) }
				took, err := runWorkers(ctx, n, s.publish, rec, sendAt, func(int, time.Time) time.Duration { return c.delay() })
				if err != nil {
					b.Fatalf("publish: %v", err)
				}
				if behind := took - time.Duration(n)*interval; behind > time.Second {
					b.Logf("publishing fell %v behind the %d msg/s schedule", behind.Round(time.Millisecond), rate)
				}
				waitArrivals(ctx, rec, time.Now().Add(10*time.Second+60*time.Second), 10*time.Second, nil)
				cpuMs, cpuCores := "", ""
				if cpu1, ok := cpuAfter(s, cpuOK); ok {
					perMsg := float64(cpu1-cpu0) / float64(time.Millisecond) / float64(n)
					cores := float64(cpu1-cpu0) / float64(time.Since(wall0))
					b.ReportMetric(perMsg, "broker_cpu_ms/msg")
					b.ReportMetric(cores, "broker_cores")
					if c.name == "raw" {
						rawCPU = perMsg
					} else if rawCPU > 0 {
						b.ReportMetric(perMsg/rawCPU, "broker_cpu_x_raw")
					}
					cpuMs, cpuCores = fmt.Sprintf("%.2f", perMsg), fmt.Sprintf("%.2f", cores)
				}
				stop()
				wait()
				cancel()
				res := rec.result()
				b.ReportMetric(res.p50, "p50_ms")
				b.ReportMetric(res.p99, "p99_ms")
				b.ReportMetric(res.max, "max_ms")
				b.ReportMetric(float64(res.early), "early")
				b.ReportMetric(float64(res.lost), "lost")
				b.ReportMetric(float64(res.dups), "dups")
				b.ReportMetric(0, "ns/op")
				rows = append(rows, []string{c.name, ms(res.p50), ms(res.p99), ms(res.max), fmt.Sprint(res.early), fmt.Sprint(res.lost), fmt.Sprint(res.dups), cpuMs, cpuCores})
				if res.lost > 0 {
					b.Errorf("%d of %d messages lost; queues holding messages:%s", res.lost, res.published, s.queues(10))
				}
			}
		})
	}
	b.Logf("steady %d msg/s for %d s, delays uniform in 1-10 s:%s", rate, secs, table(rows))
}

// cpuAfter reads the broker's CPU time when the case could read it before (cpuOK).
func cpuAfter(s setup, cpuOK bool) (time.Duration, bool) {
	if !cpuOK {
		return 0, false
	}
	return brokerCPU(s.broker)
}
