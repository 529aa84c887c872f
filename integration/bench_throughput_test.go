//go:build integration && bench

package integration

import (
	"context"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/delaykit/rabbitdelay/amqpdelay"
	"github.com/delaykit/rabbitdelay/internal/delayspec"
	"github.com/delaykit/rabbitdelay/ttlbuckets"
)

// throughputBucket is the bucket the throughput benchmark publishes to: long enough that nothing
// falls due while it runs.
const throughputBucket = time.Hour

// BenchmarkPublishThroughput measures publishing with confirms, 100-byte persistent messages, 8
// goroutines: raw amqp091-go to a plain quorum queue (the limit), and the ladder (the default
// order, top-split, and longest-first), the bucket path and, when AMQP_PLUGIN_URL is set, the
// plugin. Ladder delays are uniform in 1 min - 1 h (ms resolution), so nothing falls due during
// the run; both orders take a long hop first, so few hops run while it publishes. The
// cases alternate over -throughput-rounds rounds of -throughput messages each, every case in a
// vhost of its own per round. Reports msg/s per case and the ratio to raw (x_raw).
//
// Target (issue): ladder >= 0.85 x raw.
func BenchmarkPublishThroughput(b *testing.B) {
	type tcase struct {
		name  string
		setup func(testing.TB) publishFunc
		delay func(i int) time.Duration
	}
	longDelay := func(i int) time.Duration {
		return time.Minute + time.Duration(rand.Int64N(int64(59*time.Minute))).Truncate(time.Millisecond)
	}
	cases := []tcase{
		{name: "raw", setup: rawQueue, delay: func(int) time.Duration { return 0 }},
		{name: "ladder", setup: func(tb testing.TB) publishFunc {
			return declare(tb, defaultLadderCase("ladder")).publish
		}, delay: longDelay},
		{name: "ladder-longest", setup: func(tb testing.TB) publishFunc {
			return declare(tb, ladderCase("ladder-longest", ms1, 16, lf, delayspec.Quorum, "")).publish
		}, delay: longDelay},
		{name: "bucket", setup: func(tb testing.TB) publishFunc {
			return declare(tb, delayCase{name: "bucket", ladder: ttlbuckets.Ladder{}.WithDefaults(), qtype: delayspec.Quorum,
				buckets: []time.Duration{throughputBucket}, path: amqpdelay.PathBucket}).publish
		}, delay: func(int) time.Duration { return throughputBucket }},
	}
	if p := pluginSetup(b); p != nil {
		cases = append(cases, tcase{name: "plugin", setup: func(tb testing.TB) publishFunc { return p(tb).publish }, delay: longDelay})
	}
	n := *throughputN
	names := make([]string, len(cases))
	for k, c := range cases {
		names[k] = c.name
	}
	took := make([]time.Duration, len(cases))
	done := make([]int, len(cases))
	for range b.N {
		alternate(b, names, *throughputRound, n, "msg/s", took, done, func(b *testing.B, k, round int) time.Duration {
			c := cases[k]
			d, err := runWorkers(context.Background(), n, c.setup(b), nil, nil, func(i int, _ time.Time) time.Duration { return c.delay(i) })
			if err != nil {
				b.Fatalf("%s, round %d: %v", c.name, round, err)
			}
			return d
		})
	}
	rows := reportRates(b, names, took, done, n)
	b.Logf("publish throughput, %d rounds of %d messages per case, %d goroutines, 100-byte persistent messages, confirms:%s",
		*throughputRound, n, benchWorkers, table(rows))
}
