//go:build integration && bench

package integration

import (
	"context"
	"flag"
	"fmt"
	"math/bits"
	"math/rand/v2"
	"os"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/delaykit/rabbitdelay/amqpdelay"
	"github.com/delaykit/rabbitdelay/integration/brokertest"
	"github.com/delaykit/rabbitdelay/internal/delayspec"
	"github.com/delaykit/rabbitdelay/internal/route"
	"github.com/delaykit/rabbitdelay/ttlbuckets"
)

// BenchmarkBinary compares the default ladder with what users of RabbitMQ 4.3 have instead of
// the delayed-message plugin: the 28-level binary delay topology that NServiceBus and
// Celery/kombu (5.5+) declare (declareBinary, built from its public description), and with the
// bucket path, the one-hop limit, on the same broker in the same run. Three parts, each a
// sub-benchmark, each with its baseline ("binary") in the same run:
//
//   - publish: -binary-pub messages (10,000) per case and round, -binary-pub-rounds rounds (2),
//     the cases alternating, 8 goroutines with one publish in flight each, delays uniform in
//     1-60 s (ms resolution; the bucket case: whole seconds, one bucket per second): msg/s and
//     x_binary. Also "raw" (a plain quorum queue, the limit) and two diagnostic cases:
//     "ladder-raw" (the Publisher's ladder message, its headers and its entry exchange, sent
//     with amqp091-go directly: the broker's share of a ladder publish) and "binary-top" (the
//     binary topology entered at level 27, as kombu does, instead of at the delay's highest
//     bit, as NServiceBus does).
//   - steady: -steady-rate messages per second (1,000) for -binary-steady-seconds (20), delays
//     uniform in 1-60 s (ms resolution; bucket: whole seconds): lateness p50/p99/max against the
//     requested due time, and for the binary topology also against its rounded due time (whole
//     seconds, rounded up: p50_rounded_ms, p99_rounded_ms). Plus "raw" (no delay).
//   - burst: -burst messages (100,000) all due in one 1 s window (as BenchmarkBurst): publish and
//     drain rate, lateness p50/p99/max (binary: also against its rounded due time), early, lost.
//
// -binary-cases picks the cases (default binary,ladder,bucket; binary must come first: it is the
// baseline of the x_binary ratios).
//
// Target (issue 35): the default ladder at or above the binary topology on every figure.
func BenchmarkBinary(b *testing.B) {
	names := strings.Split(*binaryCases, ",")
	if len(names) == 0 || names[0] != "binary" {
		b.Fatalf("-binary-cases %q: the first case must be binary (the baseline)", *binaryCases)
	}
	b.Run("publish", func(b *testing.B) { benchBinaryPublish(b, names) })
	b.Run("steady", func(b *testing.B) { benchBinarySteady(b, names) })
	b.Run("burst", func(b *testing.B) { benchBinaryBurst(b, names) })
}

var (
	binaryCases         = flag.String("binary-cases", "binary,ladder,bucket", "BenchmarkBinary: comma-separated cases, binary first: binary, ladder, bucket (publish also: raw, ladder-raw, binary-top)")
	binaryPubN          = flag.Int("binary-pub", 10_000, "BenchmarkBinary/publish: messages per case and round")
	binaryPubRounds     = flag.Int("binary-pub-rounds", 2, "BenchmarkBinary/publish: rounds; the cases alternate within each round")
	binarySteadySeconds = flag.Int("binary-steady-seconds", 20, "BenchmarkBinary/steady: seconds of publishing at -steady-rate")
)

// binaryLevels is the binary topology's number of levels: delays up to 2^28-1 s (8.5 years).
const binaryLevels = 28

// binaryMaxDelay is the highest bit's delay times two, less 1 s.
const binaryMaxDelay = (1<<binaryLevels - 1) * time.Second

// binaryDelay returns 1-60 s, uniform, ms resolution: the steady and publish delays.
func binaryDelay() time.Duration {
	return time.Second + time.Duration(rand.Int64N(int64(59*time.Second))).Truncate(time.Millisecond)
}

// binarySeconds returns 1-60 s, uniform, whole seconds: the bucket case's delays.
func binarySeconds() time.Duration { return time.Duration(1+rand.IntN(60)) * time.Second }

// binaryBuckets are the bucket case's buckets: every whole second from 1 to 60 s.
var binaryBuckets = func() []time.Duration {
	var out []time.Duration
	for s := 1; s <= 60; s++ {
		out = append(out, time.Duration(s)*time.Second)
	}
	return out
}()

// binaryKey returns the binary topology's routing key for a delay of secs seconds to
// destination: one word per level, the highest level first, "1" where the level's bit of secs
// is set, "0" elsewhere, then the destination: "0.0. ... .1.0.1.bench.target".
func binaryKey(secs int64, destination string) string {
	var sb strings.Builder
	sb.Grow(2*binaryLevels + len(destination))
	for level := binaryLevels - 1; level >= 0; level-- {
		if secs>>level&1 == 1 {
			sb.WriteString("1.")
		} else {
			sb.WriteString("0.")
		}
	}
	sb.WriteString(destination)
	return sb.String()
}

// binaryPattern returns the topic binding pattern of level's exchange for bit value v ("0" or
// "1"): a "*" per higher level, then v, then "#" (the lower levels and the destination).
func binaryPattern(level int, v string) string {
	return strings.Repeat("*.", binaryLevels-1-level) + v + ".#"
}

// declareBinary gives the binary delay topology a vhost of its own, as NServiceBus and
// Celery/kombu 5.5+ describe it publicly (built from that description, not their code): per
// level n (0 to 27) a topic exchange level-NN and a quorum queue level-NN with x-message-ttl
// 2^n s, dead-lettered (at-least-once, overflow reject-publish: no loss on a broker crash,
// as the ladder's queues) to level n-1's exchange, level 0's to the topic exchange delivery.
// Level n's exchange binds its queue on the routing key's word for bit n being "1" and level
// n-1's exchange (level 0: delivery) on it being "0" (an exchange-to-exchange binding); delivery
// binds the destination (the target exchange benchTarget, with the ready queue benchReady) on
// "#.<destination>". A message is published with binaryKey to the exchange of the highest set
// bit of its delay in whole seconds, rounded up (never early), or with top to level 27's (kombu
// publishes there; NServiceBus to the highest set bit's). The due time returned is the rounded
// one; the recorder keeps the requested one too.
func declareBinary(tb testing.TB, top bool) setup {
	tb.Helper()
	env := brokertest.NewEnv(tb)
	if env.VHost == "/" {
		tb.Skip("the benchmarks need the management API (AMQP_MANAGEMENT_URL): every case works in a vhost of its own")
	}
	conn := env.Dial(tb)
	ch, err := conn.Channel()
	if err != nil {
		tb.Fatalf("channel: %v", err)
	}
	defer ch.Close()
	must := func(what string, err error) {
		tb.Helper()
		if err != nil {
			tb.Fatalf("declare %s: %v", what, err)
		}
	}
	must(benchTarget, ch.ExchangeDeclare(benchTarget, "topic", true, false, false, false, nil))
	declareReady(tb, conn, benchTarget, benchReady)
	delivery := env.Name("binary.delivery")
	level := func(n int) string { return env.Name(fmt.Sprintf("binary.level-%02d", n)) }
	next := func(n int) string {
		if n == 0 {
			return delivery
		}
		return level(n - 1)
	}
	must(delivery, ch.ExchangeDeclare(delivery, "topic", true, false, false, false, nil))
	must("delivery binding", ch.ExchangeBind(benchTarget, "#."+benchTarget, delivery, false, nil))
	for n := range binaryLevels {
		must(level(n), ch.ExchangeDeclare(level(n), "topic", true, false, false, false, nil))
	}
	for n := range binaryLevels {
		_, err := ch.QueueDeclare(level(n), true, false, false, false, amqp.Table{
			"x-queue-type": "quorum", "x-message-ttl": int64(1000) << n, "x-dead-letter-exchange": next(n),
			"x-dead-letter-strategy": "at-least-once", "x-overflow": "reject-publish"})
		must(level(n), err)
		must(level(n)+" binding", ch.QueueBind(level(n), binaryPattern(n, "1"), level(n), false, nil))
		must(level(n)+" pass-through", ch.ExchangeBind(next(n), binaryPattern(n, "0"), level(n), false, nil))
	}
	chs := channels(tb, env.URL)
	pub := func(ctx context.Context, w, i int, delay time.Duration) (time.Time, error) {
		now := time.Now()
		secs := int64((delay + time.Second - 1) / time.Second)
		if delay > binaryMaxDelay {
			return time.Time{}, fmt.Errorf("delay %v above the binary topology's %v", delay, binaryMaxDelay)
		}
		if secs <= 0 {
			return now, publishConfirmed(ctx, chs[w], benchTarget, "bench.key", benchPublishing(i))
		}
		entry := bits.Len64(uint64(secs)) - 1
		if top {
			entry = binaryLevels - 1
		}
		return now.Add(time.Duration(secs) * time.Second), publishConfirmed(ctx, chs[w], level(entry), binaryKey(secs, benchTarget), benchPublishing(i))
	}
	return setup{broker: env.Broker, vhost: env.VHost, url: env.URL, ready: benchReady, publish: pub}
}

// declareLadderRaw is the diagnostic publish case "ladder-raw": the default ladder as declare
// applies it, each message sent with amqp091-go directly, as the Publisher sends it (its
// headers: route.EncodeRoute's digits and last level, target, due time, copy tag; a
// UUID-long message id; to the entry exchange of its first queue), without the Publisher's own
// work (checks, header validation, the dead-letter reserve, its channel choice). Beside
// "ladder", it splits a ladder publish's cost into the broker's and the Publisher's.
func declareLadderRaw(tb testing.TB) setup {
	tb.Helper()
	s := declare(tb, defaultLadderCase("ladder-raw"))
	chs := channels(tb, s.url)
	names := delayspec.Names{Prefix: s.cfg.Prefix}
	l := ttlbuckets.Ladder{}.WithDefaults()
	s.publish = func(ctx context.Context, w, i int, delay time.Duration) (time.Time, error) {
		now := time.Now()
		p, err := l.Plan(delay, ttlbuckets.RoundUp)
		if err != nil {
			return time.Time{}, err
		}
		due := now.Add(p.Effective)
		h := amqp.Table{}
		route.EncodeRoute(l, p, h)
		h[route.TargetHeader] = benchTarget
		h[route.DueHeader] = due.UnixMilli()
		h[amqpdelay.CopyHeader] = fmt.Sprintf("%016x", i)
		first := p.Hops[0]
		q := names.LadderQueue(first.Level, first.Digit)
		if _, more := route.Next(l, first.Level); more && len(p.Hops) == 1 {
			q = names.LadderLastHopQueueShard(first.Level, first.Digit, 0)
		}
		if route.FirstHopQueue(l, p) {
			q = names.LadderFirstHopQueueShard(first.Level, first.Digit, 0)
		}
		m := benchPublishing(i)
		m.MessageId = fmt.Sprintf("%08x-0000-4000-8000-%012x", i, i)
		m.Headers = h
		return due, publishConfirmed(ctx, chs[w], names.LadderEntryExchange(q), "bench.key", m)
	}
	s.cfg = amqpdelay.Config{}
	return s
}

// binaryCase is one case of BenchmarkBinary: how to declare it for each part, and its delays.
type binaryCase struct {
	name   string
	setup  func(testing.TB) setup
	delay  func() time.Duration
	burst  func(testing.TB) setup // nil: not a burst case
	steady bool
}

func binaryCaseOf(tb testing.TB, name string) binaryCase {
	bucket := func(tb testing.TB) setup {
		return declare(tb, delayCase{name: "bucket", ladder: ttlbuckets.Ladder{}.WithDefaults(), qtype: delayspec.Quorum, buckets: binaryBuckets, path: amqpdelay.PathBucket})
	}
	switch name {
	case "binary":
		return binaryCase{name: name, setup: func(tb testing.TB) setup { return declareBinary(tb, false) }, delay: binaryDelay,
			burst: func(tb testing.TB) setup { return declareBinary(tb, false) }, steady: true}
	case "binary-top":
		return binaryCase{name: name, setup: func(tb testing.TB) setup { return declareBinary(tb, true) }, delay: binaryDelay}
	case "ladder":
		l := func(tb testing.TB) setup { return declare(tb, defaultLadderCase("ladder")) }
		return binaryCase{name: name, setup: l, delay: binaryDelay, burst: l, steady: true}
	case "ladder-raw":
		return binaryCase{name: name, setup: declareLadderRaw, delay: binaryDelay}
	case "bucket":
		return binaryCase{name: name, setup: bucket, delay: binarySeconds, burst: declareBucketBurst, steady: true}
	case "raw":
		return binaryCase{name: name, setup: func(tb testing.TB) setup { return setup{publish: rawQueue(tb)} }, delay: func() time.Duration { return 0 }}
	}
	for _, c := range burstCatalogue {
		if c.name == name {
			l := func(tb testing.TB) setup { return declare(tb, c) }
			return binaryCase{name: name, setup: l, delay: binaryDelay, burst: l, steady: true}
		}
	}
	tb.Fatalf("-binary-cases: unknown case %q (binary, binary-top, ladder, ladder-raw, bucket, raw, or a -burst-cases name)", name)
	return binaryCase{}
}

// loadNote returns the 1-minute load average (/proc/loadavg), for the log beside each figure.
func loadNote() string {
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		if f := strings.Fields(string(b)); len(f) > 0 {
			return f[0]
		}
	}
	return "?"
}

func benchBinaryPublish(b *testing.B, names []string) {
	var cases []binaryCase
	for _, n := range names {
		cases = append(cases, binaryCaseOf(b, n))
	}
	n := *binaryPubN
	took := make([]time.Duration, len(cases))
	done := make([]int, len(cases))
	for range b.N {
		alternate(b, names, *binaryPubRounds, n, "msg/s", took, done, func(b *testing.B, k, round int) time.Duration {
			c := cases[k]
			s := c.setup(b)
			load := loadNote()
			d, err := runWorkers(context.Background(), n, s.publish, nil, nil, func(int, time.Time) time.Duration { return c.delay() })
			if err != nil {
				b.Fatalf("%s, round %d: %v", c.name, round, err)
			}
			b.Logf("%s round %d: %.0f msg/s (load %s)", c.name, round, float64(n)/d.Seconds(), load)
			return d
		})
	}
	rate := func(k int) float64 { return float64(done[k]*n) / took[k].Seconds() }
	rows := [][]string{{"case", "msg/s", "x binary"}}
	b.Run("summary", func(b *testing.B) {
		for k, name := range names {
			if took[k] == 0 {
				continue
			}
			b.ReportMetric(rate(k), name+"_msg/s")
			if took[0] > 0 {
				b.ReportMetric(rate(k)/rate(0), name+"_x_binary")
			}
			rows = append(rows, []string{name, num(rate(k)), ratio(rate(k) / rate(0))})
		}
		b.ReportMetric(0, "ns/op")
	})
	b.Logf("publish, %d rounds of %d messages per case, %d goroutines, delays 1-60 s, load %s now:%s", *binaryPubRounds, n, benchWorkers, loadNote(), table(rows))
}

func benchBinarySteady(b *testing.B, names []string) {
	rate, secs := *steadyRate, *binarySteadySeconds
	n := rate * secs
	var cases []binaryCase
	cases = append(cases, binaryCase{name: "raw", setup: rawReady, delay: func() time.Duration { return 0 }, steady: true})
	for _, name := range names {
		if c := binaryCaseOf(b, name); c.steady {
			cases = append(cases, c)
		}
	}
	rows := [][]string{{"case", "p50 ms", "p99 ms", "max ms", "p50 rounded", "p99 rounded", "early", "lost", "load"}}
	var base result // binary's
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			for range b.N {
				s := c.setup(b)
				load := loadNote()
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
				defer cancel()
				rec := newRecorder(n)
				cctx, stop := context.WithCancel(ctx)
				wait := consume(cctx, b, s.url, s.ready, rec)
				start := time.Now().Add(100 * time.Millisecond)
				interval := time.Second / time.Duration(rate)
				took, err := runWorkers(ctx, n, s.publish, rec, func(i int) time.Time { return start.Add(time.Duration(i) * interval) },
					func(int, time.Time) time.Duration { return c.delay() })
				if err != nil {
					b.Fatalf("publish: %v", err)
				}
				if behind := took - time.Duration(n)*interval; behind > time.Second {
					b.Logf("publishing fell %v behind the %d msg/s schedule", behind.Round(time.Millisecond), rate)
				}
				waitArrivals(ctx, rec, time.Now().Add(65*time.Second), 10*time.Second, nil)
				stop()
				wait()
				res := rec.result()
				b.ReportMetric(res.p50, "p50_ms")
				b.ReportMetric(res.p99, "p99_ms")
				b.ReportMetric(res.max, "max_ms")
				b.ReportMetric(res.p50Pub, "p50_rounded_ms")
				b.ReportMetric(res.p99Pub, "p99_rounded_ms")
				b.ReportMetric(float64(res.early), "early")
				b.ReportMetric(float64(res.lost), "lost")
				b.ReportMetric(float64(res.dups), "dups")
				b.ReportMetric(0, "ns/op")
				if c.name == "binary" {
					base = res
				} else if base.p99 > 0 && c.name != "raw" {
					b.ReportMetric(res.p99/base.p99, "p99_x_binary")
					b.ReportMetric(res.p99/base.p99Pub, "p99_x_binary_rounded")
				}
				rows = append(rows, []string{c.name, ms(res.p50), ms(res.p99), ms(res.max), ms(res.p50Pub), ms(res.p99Pub),
					fmt.Sprint(res.early), fmt.Sprint(res.lost), load})
				if res.lost > 0 {
					b.Errorf("%d of %d messages lost; queues holding messages:%s", res.lost, res.published, s.queues(10))
				}
			}
		})
	}
	b.Logf("steady %d msg/s for %d s, delays 1-60 s (bucket: whole seconds):%s", rate, secs, table(rows))
}

func benchBinaryBurst(b *testing.B, names []string) {
	n := *burstN
	raw := measureRaw(b, n)
	due := *burstDue
	if due <= 0 {
		due = max(30*time.Second, 3*time.Duration(float64(n)/raw*float64(time.Second)).Round(time.Second))
	}
	b.Logf("raw quorum publish, %d messages: %.0f msg/s (load %s); the window opens %v after publishing starts", n, raw, loadNote(), due)
	rows := [][]string{{"case", "pub msg/s", "drain msg/s", "p50 ms", "p99 ms", "max ms", "p99 rounded", "early", "lost", "dups", "load"}}
	var base *burstResult
	for _, name := range names {
		c := binaryCaseOf(b, name)
		if c.burst == nil {
			continue
		}
		b.Run(c.name, func(b *testing.B) {
			for range b.N {
				s := c.burst(b)
				load := loadNote()
				r := runBurst(b, s, n, due)
				r.report(b, raw)
				b.ReportMetric(r.p99Pub, "p99_rounded_ms")
				if c.name == "binary" {
					base = &r
				} else if base != nil && base.drainRate > 0 {
					b.ReportMetric(r.pubRate/base.pubRate, "pub_x_binary")
					b.ReportMetric(r.drainRate/base.drainRate, "drain_x_binary")
					b.ReportMetric(r.p99/base.p99, "p99_x_binary")
				}
				rows = append(rows, []string{c.name, num(r.pubRate), num(r.drainRate), ms(r.p50), ms(r.p99), ms(r.max), ms(r.p99Pub),
					fmt.Sprint(r.early), fmt.Sprint(r.lost), fmt.Sprint(r.dups), load})
			}
		})
	}
	b.Logf("burst of %d messages due in one 1 s window %v after publishing starts:%s", n, due, table(rows))
}
