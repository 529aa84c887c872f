//go:build integration && bench

package integration

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/delaykit/rabbitdelay/amqpdelay"
	"github.com/delaykit/rabbitdelay/integration/brokertest"
	"github.com/delaykit/rabbitdelay/internal/delayspec"
	"github.com/delaykit/rabbitdelay/internal/route"
	"github.com/delaykit/rabbitdelay/ttlbuckets"
)

var (
	pipelinedN      = flag.Int("pipelined", 20_000, "BenchmarkPublishPipelined: messages per case and round")
	pipelinedRounds = flag.Int("pipelined-rounds", 2, "BenchmarkPublishPipelined: rounds; the cases alternate within each round")
	pipelinedWindow = flag.Int("pipelined-window", 1024, "BenchmarkPublishPipelined: publishes in flight (raw and Config.MaxInFlight)")
	pipelinedChans  = flag.Int("pipelined-channels", amqpdelay.DefaultChannels, "BenchmarkPublishPipelined: the Publisher's Config.Channels")
	pipelinedRawCh  = flag.Int("pipelined-raw-channels", 1, "BenchmarkPublishPipelined: channels of the raw cases (message i goes on channel i mod N)")
)

// BenchmarkPublishPipelined measures publishing from one goroutine with many confirms in
// flight, 100-byte persistent messages: the baseline is raw amqp091-go on one connection and one
// channel (PublishWithDeferredConfirmWithContext, -pipelined-window in flight) to a plain quorum
// queue; the Publisher's cases use PublishDeferred with Config.MaxInFlight -pipelined-window:
// direct publishes (no delay) to the target exchange, whose ready queue is a quorum queue as
// raw's is; the bucket with 1 h delays (no hop falls inside the run); the default ladder
// (top-split) with 1 h delays, whose first hop is most of the highest digit's (the 3,145,728 ms
// level), so almost no hop falls inside the run; the same ladder with longest-first order,
// whose first hop is that whole digit; and the default ladder with delays of
// 1-10 s (the hops share the broker with the publishes). Five more raw cases diagnose the
// routes: raw-headers-exchange publishes through a headers exchange routed as a ladder level is, with
// headers of the Publisher's shape (rawHeadersPipelined); raw-fanout-exchange sends the same
// messages through a fanout exchange; raw-fanout-no-headers sends raw's messages through a
// fanout exchange, and raw-fanout-one-header the same with one header (the target's name);
// raw-topic-exchange sends raw's messages through a topic exchange as the direct case's
// target is; raw-bucket-headers-exchange sends messages with the bucket case's headers through a
// headers exchange bound as the bucket exchange is (rawBucketHeadersPipelined), and
// raw-bucket-fanout-exchange the same messages through a fanout exchange, which splits the
// bucket's headers routing from its headers. The cases alternate over
// -pipelined-rounds rounds, each case in a vhost of its own per round. Reports msg/s per case
// and the ratio to raw (x_raw) in "summary"; its table adds each case's ratio to raw round by
// round (range and median, roundRatios), for bucket-1h, ladder-1h-longest-first and direct their
// ratio to the raw case of their route round by round (raw-bucket-headers-exchange,
// raw-fanout-exchange (the ladder's first hop goes through its queue's entry exchange),
// raw-topic-exchange: what rabbitdelay's own code costs beside the broker's routing), and per case the broker's CPU time per message
// over the case's run (broker_us/msg, from /proc, when the broker runs on this machine: what
// the broker spent while the case ran, its publishes and any hops falling due in it), and this
// process's CPU time per message (client_us/msg, getrusage: the publishing side, amqp091-go
// and the Go runtime included), which shares the machine's cores with a broker running here.
//
// Targets (issue 18): ladder >= 0.85 x raw and bucket >= 0.9 x raw with 1 h delays.
func BenchmarkPublishPipelined(b *testing.B) {
	type tcase struct {
		name  string
		setup func(testing.TB) func(ctx context.Context, i int) (wait func() error, err error)
		delay func(i int) time.Duration
		route string // the raw case that takes the same route without rabbitdelay code, if any
	}
	hour := func(int) time.Duration { return time.Hour }
	short := func(int) time.Duration {
		return time.Second + time.Duration(rand.Int64N(int64(9*time.Second))).Truncate(time.Millisecond)
	}
	deferred := func(c delayCase, delay func(int) time.Duration) func(testing.TB) func(context.Context, int) (func() error, error) {
		return func(tb testing.TB) func(context.Context, int) (func() error, error) {
			s := declare(tb, c)
			pcfg := s.cfg
			pcfg.Strategy, pcfg.MaxInFlight, pcfg.Channels = amqpdelay.Auto, *pipelinedWindow, *pipelinedChans
			p, err := amqpdelay.NewPublisher(pubCtx(tb), pcfg)
			if err != nil {
				tb.Fatalf("publisher: %v", err)
			}
			tb.Cleanup(func() { _ = p.Close() })
			return func(ctx context.Context, i int) (func() error, error) {
				d, err := p.PublishDeferred(ctx, benchTarget, "bench.key", benchPublishing(i), delay(i))
				if err != nil {
					return nil, err
				}
				return func() error {
					r, err := d.Wait(ctx)
					if err == nil && r.Path != c.path {
						err = fmt.Errorf("published by the %v path, want %v", r.Path, c.path)
					}
					return err
				}, nil
			}
		}
	}
	bucket := delayCase{name: "bucket", ladder: ttlbuckets.Ladder{}.WithDefaults(), qtype: delayspec.Quorum,
		buckets: []time.Duration{time.Hour}, path: amqpdelay.PathBucket}
	cases := []tcase{
		{name: "raw", setup: rawPipelined},
		{name: "raw-headers-exchange", setup: rawHeadersPipelined},
		{name: "raw-fanout-exchange", setup: rawFanoutPipelined},
		{name: "raw-fanout-no-headers", setup: rawFanoutNoHeadersPipelined},
		{name: "raw-fanout-one-header", setup: rawFanoutOneHeaderPipelined},
		{name: "raw-topic-exchange", setup: rawTopicPipelined},
		{name: "raw-bucket-headers-exchange", setup: rawBucketHeadersPipelined},
		{name: "raw-bucket-fanout-exchange", setup: rawBucketFanoutPipelined},
		{name: "direct", setup: deferred(withPath(defaultLadderCase("direct"), amqpdelay.PathDirect), func(int) time.Duration { return 0 }), route: "raw-topic-exchange"},
		{name: "ladder-1h", setup: deferred(defaultLadderCase("ladder"), hour)},
		{name: "ladder-1h-longest-first", setup: deferred(ladderCase("ladder-lf", 0, 0, lf, delayspec.Quorum, ""), hour), route: "raw-fanout-exchange"},
		{name: "bucket-1h", setup: deferred(bucket, hour), route: "raw-bucket-headers-exchange"},
		{name: "ladder-1-10s", setup: deferred(defaultLadderCase("ladder"), short)},
	}
	n := *pipelinedN
	br := brokertest.Get(b)
	names := make([]string, len(cases))
	for k, c := range cases {
		names[k] = c.name
	}
	took := make([]time.Duration, len(cases))
	cpu := make([]time.Duration, len(cases))    // broker CPU over each case's runs; 0: not readable
	client := make([]time.Duration, len(cases)) // this process's CPU over each case's runs
	runs := make([][]time.Duration, len(cases)) // each run's time, in order: round r of every case is runs[k][r]
	done := make([]int, len(cases))
	for range b.N {
		alternate(b, names, *pipelinedRounds, n, "msg/s", took, done, func(b *testing.B, k, round int) time.Duration {
			start := cases[k].setup(b)
			cpu0, ok0 := brokerCPU(br)
			own0 := processCPU()
			d, err := runPipelined(context.Background(), n, *pipelinedWindow, start)
			if err != nil {
				b.Fatalf("%s, round %d: %v", cases[k].name, round, err)
			}
			own := processCPU() - own0
			client[k] += own
			runs[k] = append(runs[k], d)
			b.ReportMetric(float64(own.Microseconds())/float64(n), "client_us/msg")
			if cpu1, ok1 := brokerCPU(br); ok0 && ok1 {
				cpu[k] += cpu1 - cpu0
				b.ReportMetric(float64((cpu1-cpu0).Microseconds())/float64(n), "broker_us/msg")
			}
			return d
		})
	}
	rows := reportRates(b, names, took, done, n)
	rows[0] = append(rows[0], "x raw by round", "x route by round", "client us/msg", "broker us/msg")
	for k, c := range cases {
		vsRoute := ""
		if r := slices.Index(names, c.route); r >= 0 {
			if x := roundRatios(runs[r], runs[k]); x != "" {
				vsRoute = c.route + " " + x
			}
		}
		rows[k+1] = append(rows[k+1], roundRatios(runs[0], runs[k]), vsRoute)
		if client[k] > 0 {
			rows[k+1] = append(rows[k+1], fmt.Sprintf("%.0f", float64(client[k].Microseconds())/float64(done[k]*n)))
		}
		if cpu[k] > 0 {
			rows[k+1] = append(rows[k+1], fmt.Sprintf("%.0f", float64(cpu[k].Microseconds())/float64(done[k]*n)))
		}
	}
	b.Logf("pipelined publishing, %d rounds of %d messages per case, one goroutine, %d in flight, 100-byte persistent messages:%s",
		*pipelinedRounds, n, *pipelinedWindow, table(rows))
}

// roundRatios returns the range and median of a case's rate over raw's in the same round, run by
// run (the same number of messages each: raw's time over the case's), as "min-max (median)";
// "" when either did not run. Raw's own rate moves between rounds, and a round's ratio with it:
// the median over several rounds is steadier than any one round.
func roundRatios(raw, c []time.Duration) string {
	if len(raw) == 0 || len(raw) != len(c) {
		return ""
	}
	x := make([]float64, len(c))
	for i := range c {
		x[i] = raw[i].Seconds() / c[i].Seconds()
	}
	slices.Sort(x)
	med := x[len(x)/2]
	if len(x)%2 == 0 {
		med = (x[len(x)/2-1] + x[len(x)/2]) / 2
	}
	return fmt.Sprintf("%s-%s (%s)", ratio(x[0]), ratio(x[len(x)-1]), ratio(med))
}

// runPipelined starts messages 0..n-1 with start from one goroutine, keeping at most window
// outstanding (it waits for the oldest when the window is full), then waits for the rest. It
// returns the time taken; the first error ends it.
func runPipelined(ctx context.Context, n, window int, start func(context.Context, int) (func() error, error)) (time.Duration, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Minute)
	defer cancel()
	begin := time.Now()
	waits := make([]func() error, 0, window)
	for i := range n {
		if len(waits) == window {
			if err := waits[0](); err != nil {
				return 0, fmt.Errorf("message %d: %w", i-window, err)
			}
			waits = waits[1:]
		}
		w, err := start(ctx, i)
		if err != nil {
			return 0, fmt.Errorf("message %d: %w", i, err)
		}
		waits = append(waits, w)
	}
	for k, w := range waits {
		if err := w(); err != nil {
			return 0, fmt.Errorf("message %d: %w", n-len(waits)+k, err)
		}
	}
	return time.Since(begin), nil
}

// rawPipelined declares a plain quorum queue in a vhost of its own and returns a starter that
// publishes to it through the default exchange on one channel in confirm mode, returning a wait
// for the deferred confirm: the baseline of BenchmarkPublishPipelined.
func rawPipelined(tb testing.TB) func(context.Context, int) (func() error, error) {
	tb.Helper()
	return rawPipelinedTo(tb, func(ch *amqp.Channel, q string) (string, string) { return "", q }, benchPublishing)
}

// rawHeadersPipelined is rawPipelined through a headers exchange with the bindings of a
// default-ladder level's exchange (topology.Plan): 15 to the queue, one per digit value of
// level 5's digit header (the level a 1 h delay enters at, longest first), one for digit 0 to
// another exchange, and one on the last-level header to a second headers exchange, which binds
// the values digit + 16 to a second queue (the level's last-hop exchange and queues). Each
// message carries the headers the Publisher sets on such a message (ladderShapedMsg). A
// diagnostic case: what the broker's headers routing and larger headers cost, without any
// rabbitdelay code. RabbitMQ's headers exchange tests every binding of the exchange against
// every message (rabbit_exchange_type_headers), so its cost grows with the bindings.
func rawHeadersPipelined(tb testing.TB) func(context.Context, int) (func() error, error) {
	tb.Helper()
	declare := func(ch *amqp.Channel, q string) (string, string) {
		x, next, lastX, last := q+".level", q+".next", q+".level.last", q+".last"
		for _, name := range []string{x, next, lastX} {
			if err := ch.ExchangeDeclare(name, amqp.ExchangeHeaders, true, false, false, false, nil); err != nil {
				tb.Fatalf("declare %s: %v", name, err)
			}
		}
		if _, err := ch.QueueDeclare(last, true, false, false, false, amqp.Table{"x-queue-type": "quorum"}); err != nil {
			tb.Fatalf("declare %s: %v", last, err)
		}
		const radix = 16
		for v := 1; v < radix; v++ {
			if err := ch.QueueBind(q, "", x, false, amqp.Table{"x-match": "all", route.DigitHeader(5): int64(v)}); err != nil {
				tb.Fatalf("bind %s: %v", q, err)
			}
			if err := ch.QueueBind(last, "", lastX, false, amqp.Table{"x-match": "all", route.DigitHeader(5): int64(v + radix)}); err != nil {
				tb.Fatalf("bind %s: %v", last, err)
			}
		}
		if err := ch.ExchangeBind(next, "", x, false, amqp.Table{"x-match": "all", route.DigitHeader(5): int64(0)}); err != nil {
			tb.Fatalf("bind %s: %v", next, err)
		}
		if err := ch.ExchangeBind(lastX, "", x, false, amqp.Table{"x-match": "all", route.LastLevelHeader: int64(5)}); err != nil {
			tb.Fatalf("bind %s: %v", lastX, err)
		}
		return x, "bench.key"
	}
	return rawPipelinedTo(tb, declare, ladderShapedMsg(time.Now().Add(time.Hour)))
}

// rawFanoutPipelined is rawHeadersPipelined through a fanout exchange bound to the queue
// alone: the same messages, routed without reading their headers.
func rawFanoutPipelined(tb testing.TB) func(context.Context, int) (func() error, error) {
	tb.Helper()
	return rawPipelinedTo(tb, boundTo(tb, amqp.ExchangeFanout, "", nil), ladderShapedMsg(time.Now().Add(time.Hour)))
}

// rawFanoutNoHeadersPipelined is rawFanoutPipelined with rawPipelined's messages (no headers,
// no message id): what any exchange other than the default exchange costs a publish, before
// any header.
func rawFanoutNoHeadersPipelined(tb testing.TB) func(context.Context, int) (func() error, error) {
	tb.Helper()
	return rawPipelinedTo(tb, boundTo(tb, amqp.ExchangeFanout, "", nil), benchPublishing)
}

// rawFanoutOneHeaderPipelined is rawFanoutNoHeadersPipelined with one header on each message,
// the target's name as the Publisher sets it (route.TargetHeader), which the dispatch
// exchange routes a due message on: the least any delayed message of this design carries.
func rawFanoutOneHeaderPipelined(tb testing.TB) func(context.Context, int) (func() error, error) {
	tb.Helper()
	return rawPipelinedTo(tb, boundTo(tb, amqp.ExchangeFanout, "", nil), func(i int) amqp.Publishing {
		m := benchPublishing(i)
		m.Headers = amqp.Table{route.TargetHeader: benchTarget}
		return m
	})
}

// boundTo returns a declare for rawPipelinedTo: an exchange of type kind bound to the queue
// alone, with binding key key and arguments args.
func boundTo(tb testing.TB, kind, key string, args amqp.Table) func(ch *amqp.Channel, q string) (string, string) {
	return func(ch *amqp.Channel, q string) (string, string) {
		x := q + "." + kind
		if err := ch.ExchangeDeclare(x, kind, true, false, false, false, nil); err != nil {
			tb.Fatalf("declare %s: %v", x, err)
		}
		if err := ch.QueueBind(q, key, x, false, args); err != nil {
			tb.Fatalf("bind %s: %v", q, err)
		}
		return x, "bench.key"
	}
}

// rawTopicPipelined is rawPipelined through a topic exchange bound to the queue with "#", as
// the direct case's target exchange is, with rawPipelined's messages (no headers): what the
// direct case's route costs without any rabbitdelay code.
func rawTopicPipelined(tb testing.TB) func(context.Context, int) (func() error, error) {
	tb.Helper()
	return rawPipelinedTo(tb, boundTo(tb, amqp.ExchangeTopic, "#", nil), benchPublishing)
}

// rawBucketHeadersPipelined is rawPipelined through a headers exchange bound to the queue as a
// 1 h bucket's queue is bound to the bucket exchange (one binding, x-match all on the bucket's
// TTL, topology.Plan), with messages that carry the headers the Publisher sets on a 1 h bucket
// message (bucketShapedMsg): the bucket case's route without any rabbitdelay code.
func rawBucketHeadersPipelined(tb testing.TB) func(context.Context, int) (func() error, error) {
	tb.Helper()
	args := amqp.Table{"x-match": "all", route.BucketHeader: time.Hour.Milliseconds()}
	return rawPipelinedTo(tb, boundTo(tb, amqp.ExchangeHeaders, "", args), bucketShapedMsg(time.Now().Add(time.Hour)))
}

// rawBucketFanoutPipelined is rawBucketHeadersPipelined through a fanout exchange bound to the
// queue alone: the same messages, routed without reading their headers.
func rawBucketFanoutPipelined(tb testing.TB) func(context.Context, int) (func() error, error) {
	tb.Helper()
	return rawPipelinedTo(tb, boundTo(tb, amqp.ExchangeFanout, "", nil), bucketShapedMsg(time.Now().Add(time.Hour)))
}

// bucketShapedMsg returns messages with the headers the Publisher sets on a message for a 1 h
// bucket due at due (amqpdelay's buildHeaders): publisherShapedMsg's and the bucket's TTL.
func bucketShapedMsg(due time.Time) func(int) amqp.Publishing {
	return publisherShapedMsg(due, func(h amqp.Table) { h[route.BucketHeader] = time.Hour.Milliseconds() })
}

// ladderShapedMsg returns messages with the headers the Publisher sets on a longest-first
// default-ladder message due at due after a delay of 1 h, on a topology with last-hop queues:
// publisherShapedMsg's, the digit headers of levels 5 (its entry) to 1 (its last hop) and the
// last-level header (route.EncodeRoute).
func ladderShapedMsg(due time.Time) func(int) amqp.Publishing {
	l := ttlbuckets.Ladder{}.WithDefaults()
	l.Order = ttlbuckets.LongestFirst
	plan, err := l.Plan(time.Hour, ttlbuckets.RoundUp)
	if err != nil {
		panic(err)
	}
	return publisherShapedMsg(due, func(h amqp.Table) { route.EncodeRoute(l, plan, h) })
}

// publisherShapedMsg returns benchPublishing's messages with what the Publisher adds on every
// delayed path (amqpdelay's buildHeaders): the target, the due time, a copy tag and a
// UUID-long message id, plus the path's own headers, which pathHeaders adds.
func publisherShapedMsg(due time.Time, pathHeaders func(amqp.Table)) func(int) amqp.Publishing {
	return func(i int) amqp.Publishing {
		m := benchPublishing(i)
		m.MessageId = fmt.Sprintf("%08x-0000-4000-8000-%012x", i, i)
		m.Headers = amqp.Table{route.TargetHeader: benchTarget, route.DueHeader: due.UnixMilli(),
			amqpdelay.CopyHeader: fmt.Sprintf("%016x", i)}
		pathHeaders(m.Headers)
		return m
	}
}

// rawPipelinedTo declares a quorum queue in a vhost of its own, then what declare adds (it
// returns the exchange and routing key to publish to), and returns a starter that publishes
// msg(i) in confirm mode on channel i mod -pipelined-raw-channels (default one channel) of one
// connection, returning a wait for the deferred confirm.
func rawPipelinedTo(tb testing.TB, declare func(ch *amqp.Channel, q string) (exchange, key string), msg func(int) amqp.Publishing) func(context.Context, int) (func() error, error) {
	tb.Helper()
	env := brokertest.NewEnv(tb)
	conn, err := amqp.DialConfig(env.URL, amqp.Config{Dial: amqp.DefaultDial(10 * time.Second)})
	if err != nil {
		tb.Fatalf("dial: %v", err)
	}
	tb.Cleanup(func() { _ = conn.Close() })
	ch, err := conn.Channel()
	if err != nil {
		tb.Fatalf("channel: %v", err)
	}
	if err := ch.Confirm(false); err != nil {
		tb.Fatalf("confirm mode: %v", err)
	}
	q := env.Name("raw")
	if _, err := ch.QueueDeclare(q, true, false, false, false, amqp.Table{"x-queue-type": "quorum"}); err != nil {
		tb.Fatalf("declare %s: %v", q, err)
	}
	if env.VHost == "/" {
		tb.Cleanup(func() { _, _ = ch.QueueDelete(q, false, false, false) })
	}
	exchange, key := declare(ch, q)
	chans := []*amqp.Channel{ch}
	for len(chans) < *pipelinedRawCh {
		c, err := conn.Channel()
		if err != nil {
			tb.Fatalf("channel: %v", err)
		}
		if err := c.Confirm(false); err != nil {
			tb.Fatalf("confirm mode: %v", err)
		}
		chans = append(chans, c)
	}
	return func(ctx context.Context, i int) (func() error, error) {
		dc, err := chans[i%len(chans)].PublishWithDeferredConfirmWithContext(ctx, exchange, key, false, false, msg(i))
		if err != nil {
			return nil, err
		}
		return func() error {
			ok, err := dc.WaitContext(ctx)
			if err == nil && !ok {
				err = fmt.Errorf("broker nacked the publish to %q", q)
			}
			return err
		}, nil
	}
}

func withPath(c delayCase, p amqpdelay.Path) delayCase { c.path = p; return c }
