//go:build integration && bench

package integration

// The benchmarks of `make bench` (docs/benchmarks.md), built only with the bench tag beside
// integration, so that the correctness tests compile without them. Each one measures its own baseline in the
// same run and reports ratios to it, because the machines they run on are noisy: a figure alone
// says little, a ratio to raw amqp091-go publishing on the same broker at the same moment says
// more. Every heavy measurement runs once per benchmark iteration, so run them with
// -benchtime 1x (as `make bench` does):
//
//	go test -tags integration,bench ./integration -run '^$' -bench . -benchtime 1x -timeout 60m
//	go test -tags integration,bench ./integration -run '^$' -bench Burst -benchtime 1x -args -burst=20000
//
// Figures are reported with b.ReportMetric and a small table through b.Logf (shown with -v or
// when the benchmark logs). Each case works in its own vhost (brokertest.NewEnv), deleted with
// everything in it when the case ends.

import (
	"context"
	"encoding/binary"
	"flag"
	"fmt"
	"math"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/delaykit/rabbitdelay/amqpdelay"
	"github.com/delaykit/rabbitdelay/integration/brokertest"
)

// Flags that size the benchmarks; the defaults are the figures. Pass them after -args.
var (
	scaleN   = flag.Int("scale", 200_000, "BenchmarkPendingScale: messages waiting on the ladder (the issue's full run: 1000000)")
	burstN   = flag.Int("burst", 100_000, "BenchmarkBurst: messages in the burst")
	burstDue = flag.Duration("burst-due", 0, "BenchmarkBurst: start of the 1 s window every message is due in, from the start of publishing; "+
		"0: 30 s, or 3 times as long as the raw case took to publish when that is longer (so the burst is published before it falls due)")
	burstCases      = flag.String("burst-cases", "bucket,split,shortest", "BenchmarkBurst: comma-separated ladder cases besides raw (and plugin, when AMQP_PLUGIN_URL is set): "+strings.Join(burstCaseNames(), ", "))
	burstTrace      = flag.Bool("burst-trace", false, "BenchmarkBurst: log, every second of the drain, the messages arrived and the queues that hold the most messages")
	steadyCases     = flag.String("steady-cases", "raw,split,shortest,bucket", "BenchmarkLatenessSteady: comma-separated cases: raw, bucket and the ladder cases of -burst-cases; the plugin case runs as well whenever AMQP_PLUGIN_URL is set (naming it here is allowed)")
	steadySeconds   = flag.Int("steady-seconds", 20, "BenchmarkLatenessSteady: seconds of publishing")
	steadyRate      = flag.Int("steady-rate", 1000, "BenchmarkLatenessSteady: messages per second")
	throughputN     = flag.Int("throughput", 10_000, "BenchmarkPublishThroughput: messages per case and round")
	throughputRound = flag.Int("throughput-rounds", 2, "BenchmarkPublishThroughput: rounds; the cases alternate within each round")
	prefetch        = flag.Int("prefetch", 1000, "consumers of the ready queues: prefetch (basic.qos); they acknowledge with multiple=true every 100 deliveries")
	autoAck         = flag.Bool("autoack", false, "consumers of the ready queues: consume with auto-ack (no prefetch limit, no acknowledgements)")
)

const (
	// benchWorkers is the publishers' concurrency: 8 goroutines, each with one publish (and
	// its confirm) in flight, in every throughput and burst case, raw or not.
	benchWorkers = 8
	// benchBodySize is the size of every message body: the message's index, then padding.
	benchBodySize = 100
	// benchTarget is the target exchange (topic) of every case; benchReady the quorum queue bound
	// to it with "#".
	benchTarget = "bench.target"
	benchReady  = "bench.ready"
)

// benchBody returns message i's body: i as 8 bytes big-endian, padded to benchBodySize bytes.
func benchBody(i int) []byte {
	b := make([]byte, benchBodySize)
	binary.BigEndian.PutUint64(b, uint64(i))
	for j := 8; j < len(b); j++ {
		b[j] = 'x'
	}
	return b
}

// benchIndex reads the index benchBody wrote, or -1.
func benchIndex(body []byte) int {
	if len(body) < 8 {
		return -1
	}
	return int(binary.BigEndian.Uint64(body))
}

// benchPublishing is message i as the benchmarks publish it: persistent, 100 bytes.
func benchPublishing(i int) amqp.Publishing {
	return amqp.Publishing{DeliveryMode: amqp.Persistent, ContentType: "application/octet-stream", Body: benchBody(i)}
}

// recorder keeps, for n messages, when each was due (Unix ns, from the publisher's answer) and
// when it arrived (Unix ns, first arrival), so that lateness, early, lost and duplicate counts
// come out at the end. Safe for one writer per message index plus one consumer.
type recorder struct {
	due     []atomic.Int64 // requested due time, Unix ns
	pubDue  []atomic.Int64 // the Publisher's Receipt.Due, Unix ns (ms precision)
	arrived []atomic.Int64
	// headerDue is the due time carried by the delivery (ms), for the early check.
	headerDue  []atomic.Int64
	published  atomic.Int64
	count      atomic.Int64
	dups       atomic.Int64
	unknown    atomic.Int64
	lastArrive atomic.Int64
}

func newRecorder(n int) *recorder {
	return &recorder{due: make([]atomic.Int64, n), pubDue: make([]atomic.Int64, n), arrived: make([]atomic.Int64, n), headerDue: make([]atomic.Int64, n)}
}

// sent records that message i was published, asked to be due at requested (the time of the
// publish call plus the requested delay) and told due at pubDue by the Publisher.
func (r *recorder) sent(i int, requested, pubDue time.Time) {
	r.due[i].Store(requested.UnixNano())
	r.pubDue[i].Store(pubDue.UnixNano())
	r.published.Add(1)
}

// arrive records delivery d at time now.
func (r *recorder) arrive(d *amqp.Delivery, now time.Time) {
	i := benchIndex(d.Body)
	if i < 0 || i >= len(r.arrived) {
		r.unknown.Add(1)
		return
	}
	if !r.arrived[i].CompareAndSwap(0, now.UnixNano()) {
		r.dups.Add(1)
		return
	}
	if due, ok := deliveryDue(d); ok {
		r.headerDue[i].Store(due.UnixMilli())
	}
	r.count.Add(1)
	r.lastArrive.Store(now.UnixNano())
}

// result is what a recorder says about one case.
type result struct {
	published, arrived, lost, early, dups, unknown int
	// Lateness percentiles, ms: arrival minus the requested due time (so they include rounding
	// to the ladder's unit and the publish call's own latency).
	p50, p99, max float64
	// p50Pub, p99Pub: lateness, ms, against the due time the publisher answered (pubDue): the
	// same as p50 and p99 for a path that keeps the requested time to the ms, later by the
	// rounding for one that rounds (the binary topology's whole seconds).
	p50Pub, p99Pub float64
	firstArrive    time.Time
	lastArrive     time.Time
}

// firstDue returns the earliest requested due time, Unix ns (0 when nothing was sent).
func (r *recorder) firstDue() int64 {
	var first int64
	for i := range r.due {
		if d := r.due[i].Load(); d != 0 && (first == 0 || d < first) {
			first = d
		}
	}
	return first
}

func (r *recorder) result() result {
	var res result
	lat := make([]float64, 0, len(r.arrived))
	latPub := make([]float64, 0, len(r.arrived))
	var first, last int64
	for i := range r.arrived {
		due := r.due[i].Load()
		if due == 0 {
			continue
		}
		res.published++
		a := r.arrived[i].Load()
		if a == 0 {
			res.lost++
			continue
		}
		res.arrived++
		if first == 0 || a < first {
			first = a
		}
		last = max(last, a)
		// Early: arrived before the requested due time, the one the Publisher answered, or the
		// one the message carries (compared in whole ms: the header has ms precision).
		if a/1e6 < max(due/1e6, r.pubDue[i].Load()/1e6, r.headerDue[i].Load()) {
			res.early++
		}
		lat = append(lat, float64(a-due)/1e6)
		latPub = append(latPub, float64(a-r.pubDue[i].Load())/1e6)
	}
	res.dups = int(r.dups.Load())
	res.unknown = int(r.unknown.Load())
	if first != 0 {
		res.firstArrive = time.Unix(0, first)
		res.lastArrive = time.Unix(0, last)
	}
	slices.Sort(lat)
	res.p50, res.p99, res.max = percentile(lat, 50), percentile(lat, 99), percentile(lat, 100)
	slices.Sort(latPub)
	res.p50Pub, res.p99Pub = percentile(latPub, 50), percentile(latPub, 99)
	return res
}

// percentile returns the p-th percentile (nearest rank) of sorted, or NaN when it is empty.
func percentile(sorted []float64, p float64) float64 {
	if len(sorted) == 0 {
		return math.NaN()
	}
	k := int(math.Ceil(p/100*float64(len(sorted)))) - 1
	return sorted[min(max(k, 0), len(sorted)-1)]
}

// deliveryDue is the due time a delivery carries (amqpdelay.Due).
func deliveryDue(d *amqp.Delivery) (time.Time, bool) { return amqpdelay.Due(*d) }

// consume reads queue on its own connection until ctx ends, recording every delivery in rec.
// It acknowledges with multiple=true every 100 deliveries and every 50 ms (-prefetch), or
// consumes with auto-ack (-autoack).
func consume(ctx context.Context, tb testing.TB, url, queue string, rec *recorder) (wait func()) {
	tb.Helper()
	conn, err := amqp.DialConfig(url, amqp.Config{Dial: amqp.DefaultDial(10 * time.Second)})
	if err != nil {
		tb.Fatalf("consumer: dial: %v", err)
	}
	ch, err := conn.Channel()
	if err != nil {
		tb.Fatalf("consumer: channel: %v", err)
	}
	if err := ch.Qos(*prefetch, 0, false); err != nil {
		tb.Fatalf("consumer: qos: %v", err)
	}
	deliveries, err := ch.ConsumeWithContext(ctx, queue, "", *autoAck, false, false, false, nil)
	if err != nil {
		tb.Fatalf("consumer: consume %s: %v", queue, err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer conn.Close()
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		var lastTag uint64
		unacked := 0
		ack := func() {
			if unacked > 0 {
				_ = ch.Ack(lastTag, true)
				unacked = 0
			}
		}
		for {
			select {
			case <-ctx.Done():
				ack()
				return
			case <-tick.C:
				ack()
			case d, ok := <-deliveries:
				if !ok {
					return
				}
				rec.arrive(&d, time.Now())
				if *autoAck {
					continue
				}
				lastTag = d.DeliveryTag
				if unacked++; unacked >= 100 {
					ack()
				}
			}
		}
	}()
	return func() { <-done }
}

// publishFunc publishes message i from worker w (0..benchWorkers-1) with the given delay and
// returns when it is due.
type publishFunc func(ctx context.Context, w, i int, delay time.Duration) (time.Time, error)

// runWorkers runs benchWorkers goroutines that publish messages 0..n-1, message i after
// sendAt(i) when sendAt is not nil, and with the delay delayOf(i, now). It returns the time
// taken; the first error stops every worker.
func runWorkers(ctx context.Context, n int, pub publishFunc, rec *recorder, sendAt func(i int) time.Time, delayOf func(i int, now time.Time) time.Duration) (time.Duration, error) {
	return runWorkersN(ctx, benchWorkers, n, pub, rec, sendAt, delayOf)
}

// runWorkersN is runWorkers with workers goroutines (a publishFunc that needs a worker index
// below benchWorkers must be run with runWorkers).
func runWorkersN(ctx context.Context, workers, n int, pub publishFunc, rec *recorder, sendAt func(i int) time.Time, delayOf func(i int, now time.Time) time.Duration) (time.Duration, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var next atomic.Int64
	var once sync.Once
	var firstErr error
	var wg sync.WaitGroup
	start := time.Now()
	for w := range workers {
		wg.Go(func() {
			for ctx.Err() == nil {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				if sendAt != nil {
					if d := time.Until(sendAt(i)); d > 0 {
						select {
						case <-time.After(d):
						case <-ctx.Done():
							return
						}
					}
				}
				now := time.Now()
				delay := delayOf(i, now)
				due, err := pub(ctx, w, i, delay)
				if err != nil {
					once.Do(func() { firstErr = fmt.Errorf("message %d: %w", i, err); cancel() })
					return
				}
				if rec != nil {
					rec.sent(i, now.Add(delay), due)
				}
			}
		})
	}
	wg.Wait()
	return time.Since(start), firstErr
}

// waitArrivals waits until every published message arrived, or until deadline has passed and
// nothing arrived for quiet, or ctx ends. progress, when not nil, is called every second.
func waitArrivals(ctx context.Context, rec *recorder, deadline time.Time, quiet time.Duration, progress func(arrived int64)) {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	lastCount, lastChange := int64(-1), time.Now()
	for {
		c := rec.count.Load()
		if c >= rec.published.Load() {
			return
		}
		if c != lastCount {
			lastCount, lastChange = c, time.Now()
		}
		if time.Now().After(deadline) && time.Since(lastChange) >= quiet {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			if progress != nil {
				progress(rec.count.Load())
			}
		}
	}
}

// channels opens one connection to url and benchWorkers channels on it in confirm mode.
func channels(tb testing.TB, url string) []*amqp.Channel {
	tb.Helper()
	conn, err := amqp.DialConfig(url, amqp.Config{Dial: amqp.DefaultDial(10 * time.Second)})
	if err != nil {
		tb.Fatalf("dial: %v", err)
	}
	tb.Cleanup(func() { _ = conn.Close() })
	chs := make([]*amqp.Channel, benchWorkers)
	for w := range chs {
		ch, err := conn.Channel()
		if err != nil {
			tb.Fatalf("channel: %v", err)
		}
		if err := ch.Confirm(false); err != nil {
			tb.Fatalf("confirm mode: %v", err)
		}
		chs[w] = ch
	}
	return chs
}

// publishConfirmed publishes on ch and waits for the broker's confirm.
func publishConfirmed(ctx context.Context, ch *amqp.Channel, exchange, key string, msg amqp.Publishing) error {
	dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, exchange, key, false, false, msg)
	if err != nil {
		return err
	}
	ok, err := dc.WaitContext(ctx)
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("broker nacked the publish to %q", exchange)
	}
	return nil
}

// rawQueue declares a plain quorum queue in a new vhost and returns a publishFunc that
// publishes to it through the default exchange: the limit every ratio is taken against.
func rawQueue(tb testing.TB) publishFunc {
	tb.Helper()
	env := brokertest.NewEnv(tb)
	chs := channels(tb, env.URL)
	q := env.Name("raw")
	if _, err := chs[0].QueueDeclare(q, true, false, false, false, amqp.Table{"x-queue-type": "quorum"}); err != nil {
		tb.Fatalf("declare %s: %v", q, err)
	}
	if env.VHost == "/" {
		tb.Cleanup(func() { _, _ = chs[0].QueueDelete(q, false, false, false) })
	}
	return func(ctx context.Context, w, i int, _ time.Duration) (time.Time, error) {
		return time.Now(), publishConfirmed(ctx, chs[w], "", q, benchPublishing(i))
	}
}

// rawReady is the raw case of BenchmarkLatenessSteady: a vhost of its own with the target exchange
// and the ready queue of every case, and a publishFunc that publishes to that exchange with a
// confirm and no delay. The due time it returns is the moment of the publish call, so lateness
// is the broker's publish-to-delivery latency.
func rawReady(tb testing.TB) setup {
	tb.Helper()
	env := brokertest.NewEnv(tb)
	chs := channels(tb, env.URL)
	if err := chs[0].ExchangeDeclare(benchTarget, "topic", true, false, false, false, nil); err != nil {
		tb.Fatalf("declare %s: %v", benchTarget, err)
	}
	conn := env.Dial(tb)
	declareReady(tb, conn, benchTarget, benchReady)
	pub := func(ctx context.Context, w, i int, _ time.Duration) (time.Time, error) {
		now := time.Now()
		return now, publishConfirmed(ctx, chs[w], benchTarget, "bench.key", benchPublishing(i))
	}
	return setup{broker: env.Broker, vhost: env.VHost, url: env.URL, ready: benchReady, publish: pub}
}

// measureRaw publishes n messages with rawQueue in a vhost of its own and returns msg/s.
func measureRaw(b *testing.B, n int) float64 {
	b.Helper()
	var rate float64
	b.Run("raw", func(b *testing.B) {
		pub := rawQueue(b)
		took, err := runWorkers(context.Background(), n, pub, nil, nil, func(int, time.Time) time.Duration { return 0 })
		if err != nil {
			b.Fatalf("raw publish: %v", err)
		}
		rate = float64(n) / took.Seconds()
		b.ReportMetric(rate, "raw_msg/s")
		b.ReportMetric(0, "ns/op")
	})
	return rate
}

// brokerMemory returns the broker's memory use (the management API's mem_used, summed over
// nodes), in bytes.
func brokerMemory(tb testing.TB, br *brokertest.Broker) (int64, error) {
	var nodes []struct {
		Name    string `json:"name"`
		MemUsed int64  `json:"mem_used"`
	}
	if err := br.Management("GET", "api/nodes?columns=name,mem_used", nil, &nodes); err != nil {
		return 0, err
	}
	var sum int64
	for _, n := range nodes {
		sum += n.MemUsed
	}
	return sum, nil
}

// brokerMemoryParts returns the broker's memory by category (the management API's
// api/nodes/NAME/memory, in bytes, summed over nodes), e.g. "mnesia" (where the delayed-message
// plugin keeps its messages) and "quorum_ets", "quorum_queue_procs" (quorum queues' in-memory
// log tables and processes).
func brokerMemoryParts(br *brokertest.Broker) (map[string]int64, error) {
	var nodes []struct {
		Name string `json:"name"`
	}
	if err := br.Management("GET", "api/nodes?columns=name", nil, &nodes); err != nil {
		return nil, err
	}
	sum := map[string]int64{}
	for _, n := range nodes {
		var m struct {
			Memory map[string]any `json:"memory"`
		}
		if err := br.Management("GET", "api/nodes/"+url.PathEscape(n.Name)+"/memory", nil, &m); err != nil {
			return nil, err
		}
		for k, v := range m.Memory {
			if f, ok := v.(float64); ok {
				sum[k] += int64(f)
			}
		}
	}
	return sum, nil
}

// brokerCPU returns the CPU time (user + system) the broker's Erlang VM has used so far, read
// from /proc; ok is false when the broker does not run on this machine (AMQP_URL elsewhere, or
// a container whose process IDs differ) or /proc cannot be read.
func brokerCPU(br *brokertest.Broker) (cpu time.Duration, ok bool) {
	var nodes []struct {
		PID string `json:"os_pid"`
	}
	// A node that has just started lists [[]] until its first statistics (a few seconds).
	for end := time.Now().Add(15 * time.Second); ; time.Sleep(500 * time.Millisecond) {
		nodes = nil
		err := br.Management("GET", "api/nodes?columns=os_pid", nil, &nodes)
		if err == nil && len(nodes) == 1 && nodes[0].PID != "" {
			break
		}
		if time.Now().After(end) {
			return 0, false
		}
	}
	comm, err := os.ReadFile("/proc/" + nodes[0].PID + "/comm")
	if err != nil || !strings.HasPrefix(string(comm), "beam") {
		return 0, false
	}
	stat, err := os.ReadFile("/proc/" + nodes[0].PID + "/stat")
	if err != nil {
		return 0, false
	}
	// Fields after the command name (which may hold spaces, inside parentheses): state is
	// field 3, utime field 14 and stime field 15, in clock ticks (USER_HZ, 100 on Linux).
	rest := string(stat[strings.LastIndexByte(string(stat), ')')+2:])
	f := strings.Fields(rest)
	if len(f) < 13 {
		return 0, false
	}
	ut, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, false
	}
	return time.Duration(ut+st) * 10 * time.Millisecond, true
}

// queueStat is one queue as the management API lists it.
type queueStat struct {
	Name     string `json:"name"`
	Messages int64  `json:"messages"`
	DLX      int64  `json:"messages_dlx"`
}

// topQueues lists the k queues of vhost that hold the most messages (ready, unacked and
// waiting to be dead-lettered), for tracing where a backlog sits.
func topQueues(br *brokertest.Broker, vhost string, k int) string {
	var qs []queueStat
	if err := br.Management("GET", "api/queues/"+url.PathEscape(vhost)+"?columns=name,messages,messages_dlx", nil, &qs); err != nil {
		return err.Error()
	}
	slices.SortFunc(qs, func(a, b queueStat) int { return int((b.Messages + b.DLX) - (a.Messages + a.DLX)) })
	var sb strings.Builder
	for _, q := range qs[:min(k, len(qs))] {
		if q.Messages+q.DLX == 0 {
			break
		}
		name := q.Name
		if i := strings.Index(name, ".ladder."); i >= 0 {
			name = name[i+1:]
		}
		fmt.Fprintf(&sb, " %s=%d", name, q.Messages)
		if q.DLX > 0 {
			fmt.Fprintf(&sb, "(+%d dlx)", q.DLX)
		}
	}
	return sb.String()
}

// table formats rows of cells as aligned columns for b.Logf.
func table(rows [][]string) string {
	widths := map[int]int{}
	for _, r := range rows {
		for j, c := range r {
			widths[j] = max(widths[j], len(c))
		}
	}
	var sb strings.Builder
	for _, r := range rows {
		sb.WriteString("\n")
		for j, c := range r {
			fmt.Fprintf(&sb, "%*s  ", widths[j], c)
		}
	}
	return sb.String()
}

func ms(v float64) string  { return fmt.Sprintf("%.0f", v) }
func num(v float64) string { return fmt.Sprintf("%.0f", v) }
func ratio(v float64) string {
	return fmt.Sprintf("%.2f", v)
}

// alternate runs case k of names as a sub-benchmark of that name once per round, the cases
// alternating within each round: run(b, k, round) does one run of n operations and returns
// how long they took (it may report metrics of its own and fails b itself). Each run reports
// its rate in unit (e.g. "msg/s"), adds its time to took[k] and counts itself in done[k]. A
// -bench pattern can leave out some runs of a case (round r's sub-benchmark is named
// "name#0r"), so done, not rounds, says how many ran.
func alternate(b *testing.B, names []string, rounds, n int, unit string, took []time.Duration, done []int, run func(b *testing.B, k, round int) time.Duration) {
	for round := range rounds {
		for k, name := range names {
			b.Run(name, func(b *testing.B) {
				d := run(b, k, round)
				took[k] += d
				done[k]++
				b.ReportMetric(float64(n)/d.Seconds(), unit)
				b.ReportMetric(0, "ns/op")
			})
		}
	}
}

// reportRates reports, in a sub-benchmark "summary" (a benchmark that has sub-benchmarks prints
// no line of its own), each case's rate (done[k] runs of n messages over their summed time
// took[k]) and its
// ratio to the first case, the baseline, and returns the same as table rows, one per case
// after the header row. A case that did not run (took[k] == 0: -bench selected other cases) is
// reported as "not run", and so are the ratios when the baseline did not run.
func reportRates(b *testing.B, cases []string, took []time.Duration, done []int, n int) [][]string {
	rate := func(k int) float64 { return float64(done[k]*n) / took[k].Seconds() }
	rows := [][]string{{"case", "msg/s", "x raw"}}
	for k, name := range cases {
		switch {
		case took[k] == 0:
			rows = append(rows, []string{name, "not run", ""})
		case took[0] == 0:
			rows = append(rows, []string{name, num(rate(k)), "not run"})
		default:
			rows = append(rows, []string{name, num(rate(k)), ratio(rate(k) / rate(0))})
		}
	}
	b.Run("summary", func(b *testing.B) {
		for k, name := range cases {
			if took[k] == 0 {
				continue
			}
			b.ReportMetric(rate(k), name+"_msg/s")
			if k > 0 && took[0] > 0 {
				b.ReportMetric(rate(k)/rate(0), name+"_x_raw")
			}
		}
		b.ReportMetric(0, "ns/op")
	})
	return rows
}
