//go:build integration

package integration

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/delaykit/rabbitdelay/amqpdelay"
	"github.com/delaykit/rabbitdelay/consumer"
	"github.com/delaykit/rabbitdelay/integration/brokertest"
	"github.com/delaykit/rabbitdelay/internal/admin"
	"github.com/delaykit/rabbitdelay/internal/delayspec"
	"github.com/delaykit/rabbitdelay/internal/exporter"
	"github.com/delaykit/rabbitdelay/ttlbuckets"
)

// metSpec is the metrics tests' topology: target orders (topic), buckets 1 s and 1 min, a
// radix-16 ladder up to 65,535 ms, quorum queues, and the ready queue orders.work (o.#).
func metSpec() delayspec.Spec {
	return delayspec.Spec{Prefix: "rd", Targets: delayspec.Targets{{Name: "orders", Type: "topic"}},
		Buckets: delayspec.Delays{time.Second, time.Minute}, Ladder: testLadder(), QueueType: delayspec.Quorum,
		Plugin: delayspec.PluginOff, ReadyQueues: delayspec.ReadyQueues{{Queue: "orders.work", Exchange: "orders", BindingKey: "o.#"}}}
}

// metValue returns the value of the sample of metric name whose labels include want (a
// counter's or gauge's value, a histogram's count), summed over every matching sample.
func metValue(fams []*dto.MetricFamily, name string, want map[string]string) (v float64, found bool) {
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
	samples:
		for _, m := range f.GetMetric() {
			have := map[string]string{}
			for _, l := range m.GetLabel() {
				have[l.GetName()] = l.GetValue()
			}
			for k, w := range want {
				if have[k] != w {
					continue samples
				}
			}
			found = true
			switch {
			case m.Counter != nil:
				v += m.GetCounter().GetValue()
			case m.Gauge != nil:
				v += m.GetGauge().GetValue()
			case m.Histogram != nil:
				v += float64(m.GetHistogram().GetSampleCount())
			}
		}
	}
	return v, found
}

func metGather(t *testing.T, g prometheus.Gatherer) []*dto.MetricFamily {
	t.Helper()
	fams, err := g.Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	return fams
}

// metLint fails the test for every problem testutil's linter (promtool check metrics) finds.
func metLint(t *testing.T, g prometheus.Gatherer) {
	t.Helper()
	problems, err := testutil.GatherAndLint(g)
	if err != nil {
		t.Fatalf("lint: %v", err)
	}
	for _, p := range problems {
		t.Errorf("lint: %s: %s", p.Metric, p.Text)
	}
}

// metScrape GETs url and parses the text exposition format.
func metScrape(t *testing.T, url string) []*dto.MetricFamily {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	req.Header.Set("Accept", "text/plain")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("scrape %s: %v", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("scrape %s: %s", url, resp.Status)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	byName, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("scrape %s: parse: %v", url, err)
	}
	fams := make([]*dto.MetricFamily, 0, len(byName))
	for _, f := range byName {
		fams = append(fams, f)
	}
	return fams
}

// TestMetricsPublisherAndConsumer publishes a known mix through a Publisher with metrics and
// consumes it with a Consumer with metrics, then reads both registries: publishes by path and
// outcome, confirm latencies, and the consumer's outcomes, failures and lateness
// observations (one per handled delivery, by path). Both pass the linter.
func TestMetricsPublisherAndConsumer(t *testing.T) {
	t.Parallel()
	env := brokertest.NewEnv(t)
	m := topoNeedManagement(t, env)
	spec := metSpec()
	if _, _, err := polApply(t, env, m, spec); err != nil {
		t.Fatalf("apply: %v", err)
	}
	reg := prometheus.NewRegistry()
	pub := newPublisher(t, env, spec, amqpdelay.Config{Metrics: reg})

	// One Publisher per Registerer: a second one is refused, and is free to register once the
	// first is closed.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cfg := amqpdelay.Config{Prefix: spec.Prefix, URL: env.URL, Metrics: reg}
	if p2, err := amqpdelay.NewPublisher(ctx, cfg); !errors.Is(err, amqpdelay.ErrInvalidConfig) {
		if p2 != nil {
			_ = p2.Close()
		}
		t.Fatalf("a second Publisher on the same registry: %v, want ErrInvalidConfig", err)
	}

	publish := func(exchange, key, id string, delay time.Duration) error {
		_, err := pub.Publish(ctx, exchange, key, amqp.Publishing{MessageId: id, Body: []byte(id)}, delay)
		return err
	}
	type pubCase struct {
		exchange, key, id string
		delay             time.Duration
	}
	ok := []pubCase{
		{"orders", "o.1", "ladder-1", 1500 * time.Millisecond},
		{"orders", "o.2", "ladder-2", 1700 * time.Millisecond},
		{"orders", "o.3", "fail-ladder-3", 1900 * time.Millisecond}, // the handler fails it: parked
		{"orders", "o.4", "bucket-1", time.Second},
		{"orders", "o.5", "bucket-2", time.Second},
		{"orders", "o.6", "direct-1", 0},
		{"orders", "o.7", "direct-2", 0},
	}
	for _, c := range ok {
		if err := publish(c.exchange, c.key, c.id, c.delay); err != nil {
			t.Fatalf("publish %s: %v", c.id, err)
		}
	}
	if err := publish("nowhere", "o.8", "invalid", time.Second); !errors.Is(err, amqpdelay.ErrUnknownTarget) {
		t.Fatalf("publish to an unknown target: %v", err)
	}
	if err := publish("orders", "unbound", "unroutable", 0); !errors.Is(err, amqpdelay.ErrUnroutable) {
		t.Fatalf("direct publish with no binding: %v", err)
	}
	fams := metGather(t, reg)
	for _, w := range []struct {
		path, outcome string
		n             float64
	}{{"ladder", "confirmed", 3}, {"bucket", "confirmed", 2}, {"direct", "confirmed", 2}, {"none", "invalid", 1}, {"direct", "unroutable", 1}} {
		if v, _ := metValue(fams, "rabbitdelay_publisher_publishes_total", map[string]string{"path": w.path, "outcome": w.outcome}); v != w.n {
			t.Errorf("publishes_total{path=%s,outcome=%s} = %v, want %v", w.path, w.outcome, v, w.n)
		}
	}
	if v, _ := metValue(fams, "rabbitdelay_publisher_publishes_total", nil); v != 9 {
		t.Errorf("publishes_total over every label = %v, want 9", v)
	}
	for path, n := range map[string]float64{"ladder": 3, "bucket": 2, "direct": 2} {
		if v, _ := metValue(fams, "rabbitdelay_publisher_confirm_duration_seconds", map[string]string{"path": path}); v != n {
			t.Errorf("confirm_duration_seconds{path=%s} count = %v, want %v", path, v, n)
		}
	}
	if v, found := metValue(fams, "rabbitdelay_publisher_publishes_in_flight", nil); !found || v != 0 {
		t.Errorf("publishes_in_flight = %v (found %v), want 0", v, found)
	}
	if v, found := metValue(fams, "rabbitdelay_publisher_plugin_available", nil); !found || v != 0 {
		t.Errorf("plugin_available = %v (found %v), want 0 (plugin off)", v, found)
	}
	metLint(t, reg)

	creg := prometheus.NewRegistry()
	var handled atomic.Int32
	c := newConsumer(t, cfg, "orders.work", func(ctx context.Context, d amqp.Delivery) error {
		if strings.HasPrefix(d.MessageId, "fail-") {
			return consumer.Permanent(fmt.Errorf("refused %s", d.MessageId))
		}
		handled.Add(1)
		return nil
	}, consumer.Options{Metrics: creg})
	runConsumer(t, c)
	count := func(outcome string) float64 {
		v, _ := metValue(metGather(t, creg), "rabbitdelay_consumer_messages_total", map[string]string{"queue": "orders.work", "outcome": outcome})
		return v
	}
	waitFor(t, 2*time.Minute, "6 deliveries handled and 1 parked", func() bool { return count("handled") == 6 && count("parked") == 1 })
	cfams := metGather(t, creg)
	if v, _ := metValue(cfams, "rabbitdelay_consumer_lateness_seconds", nil); v != float64(handled.Load()) || v != 6 {
		t.Errorf("lateness observations = %v, want the %d handled deliveries", v, handled.Load())
	}
	for path, n := range map[string]float64{"ladder": 2, "bucket": 2, "direct": 2} {
		if v, _ := metValue(cfams, "rabbitdelay_consumer_lateness_seconds", map[string]string{"queue": "orders.work", "path": path}); v != n {
			t.Errorf("lateness_seconds{path=%s} count = %v, want %v", path, v, n)
		}
	}
	if v, _ := metValue(cfams, "rabbitdelay_consumer_handler_failures_total", map[string]string{"queue": "orders.work"}); v != 1 {
		t.Errorf("handler_failures_total = %v, want 1", v)
	}
	for result, n := range map[string]float64{"ok": 6, "error": 1} {
		if v, _ := metValue(cfams, "rabbitdelay_consumer_handler_duration_seconds", map[string]string{"result": result}); v != n {
			t.Errorf("handler_duration_seconds{result=%s} count = %v, want %v", result, v, n)
		}
	}
	metLint(t, creg)

	// Closing the Publisher unregisters its metrics: another may use the registry.
	if err := pub.Close(); err != nil {
		t.Fatal(err)
	}
	p3, err := amqpdelay.NewPublisher(ctx, cfg)
	if err != nil {
		t.Fatalf("a Publisher on the registry of a closed one: %v", err)
	}
	_ = p3.Close()
}

// TestExporterScrape serves the exporter over HTTP and scrapes it after known operations:
// 5 messages waiting at ladder level 3, 2 in the 1 min bucket, a due message that its target
// routes to no queue (parked through the targets policy), and a consumer attached to a delay
// queue. The values, the per-queue option and the linter are checked.
func TestExporterScrape(t *testing.T) {
	t.Parallel()
	env := brokertest.NewEnv(t)
	m := topoNeedManagement(t, env)
	spec := metSpec()
	// A ready queue with two bindings is in the plan twice: one series still (two made every
	// scrape fail with 500, "collected before with the same name and label values").
	spec.ReadyQueues = append(spec.ReadyQueues, delayspec.ReadyQueue{Queue: "orders.work", Exchange: "orders", BindingKey: "x.#"})
	p, _, err := polApply(t, env, m, spec)
	if err != nil {
		t.Fatalf("apply: %v", err)
	}
	pub := newPublisher(t, env, spec)
	ctx := topoTestCtx(t, 2*time.Minute)
	// 0xF000 ms: one hop, in the queue of digit 15 at level 3, for 61.44 s.
	const levelThree = 0xF000 * time.Millisecond
	for i := range 5 {
		r, err := pub.Publish(ctx, "orders", "o.wait", amqp.Publishing{Body: []byte(fmt.Sprint(i))}, levelThree)
		if err != nil || r.Path != amqpdelay.PathLadder {
			t.Fatalf("publish: %v %v", r.Path, err)
		}
	}
	for i := range 2 {
		if r, err := pub.Publish(ctx, "orders", "o.wait", amqp.Publishing{Body: []byte(fmt.Sprint(i))}, time.Minute); err != nil || r.Path != amqpdelay.PathBucket {
			t.Fatalf("publish: %v %v", r.Path, err)
		}
	}
	if _, err := pub.Publish(ctx, "orders", "no.binding", amqp.Publishing{Body: []byte("lost?")}, 300*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	ch := env.Channel(t)
	consumed := p.Names.LadderQueue(1, 5) // not on the 300 ms message's way (0x12C: 1 at level 2, 2 at level 1)
	if _, err := ch.Consume(consumed, "", false, false, false, false, nil); err != nil {
		t.Fatalf("consume %s: %v", consumed, err)
	}

	e := exporter.New(m, p, exporter.Options{})
	h, err := exporter.Handler(e)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()
	type want struct {
		name   string
		labels map[string]string
		v      float64
	}
	wants := []want{
		{"rabbitdelay_up", nil, 1},
		{"rabbitdelay_delay_messages", map[string]string{"path": "ladder", "level": "3"}, 5},
		{"rabbitdelay_delay_messages", map[string]string{"path": "bucket", "bucket": "1m0s"}, 2},
		{"rabbitdelay_delay_messages", nil, 7},
		{"rabbitdelay_parking_messages", nil, 1},
		{"rabbitdelay_delay_queue_consumers", map[string]string{"path": "ladder", "level": "1"}, 1},
		{"rabbitdelay_delay_queue_consumers", nil, 1},
		{"rabbitdelay_delay_messages_dlx", nil, 0},
		{"rabbitdelay_missing_queues", nil, 0},
		{"rabbitdelay_ready_queue_messages", map[string]string{"queue": "orders.work"}, 0},
		{"rabbitdelay_revocation_stream_messages", map[string]string{"queue": p.Names.Revoked()}, 0},
	}
	var fams []*dto.MetricFamily
	var failed []string
	deadline := time.Now().Add(50 * time.Second) // the level 3 messages wait 61 s, the bucket ones 60 s; statistics lag 5 s
	for {
		fams = metScrape(t, srv.URL)
		failed = failed[:0]
		for _, w := range wants {
			if v, found := metValue(fams, w.name, w.labels); !found || v != w.v {
				failed = append(failed, fmt.Sprintf("%s%v = %v (found %v), want %v", w.name, w.labels, v, found, w.v))
			}
		}
		if len(failed) == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	for _, f := range failed {
		t.Error(f)
	}
	series := 0
	for _, f := range fams {
		if f.GetName() == "rabbitdelay_delay_messages" {
			series = len(f.GetMetric())
		}
	}
	if want := ttlbuckets.Ladder(spec.Ladder).WithDefaults().Levels() + len(spec.Buckets); series != want {
		t.Errorf("rabbitdelay_delay_messages has %d series, want one per level and bucket (%d)", series, want)
	}
	delayQueues := 0
	for _, q := range p.Queues {
		if q.IsDelay() {
			delayQueues++
		}
	}
	if v, _ := metValue(fams, "rabbitdelay_node_delay_queue_leaders", nil); v != float64(delayQueues) {
		t.Errorf("node_delay_queue_leaders over the nodes = %v, want every delay queue (%d)", v, delayQueues)
	}
	if v, found := metValue(fams, "rabbitdelay_node_running", nil); !found || v < 1 {
		t.Errorf("node_running = %v (found %v), want the broker's node running", v, found)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(e)
	metLint(t, reg)

	perQueue := exporter.New(m, p, exporter.Options{PerQueue: true})
	preg := prometheus.NewRegistry()
	preg.MustRegister(perQueue)
	pfams := metGather(t, preg)
	if v, _ := metValue(pfams, "rabbitdelay_delay_messages", map[string]string{"queue": p.Names.LadderQueue(3, 15)}); v != 5 {
		t.Errorf("per queue: delay_messages{queue=%s} = %v, want 5", p.Names.LadderQueue(3, 15), v)
	}
	if v, _ := metValue(pfams, "rabbitdelay_delay_queue_consumers", map[string]string{"queue": consumed}); v != 1 {
		t.Errorf("per queue: delay_queue_consumers{queue=%s} = %v, want 1", consumed, v)
	}
	metLint(t, preg)
}

// TestExporterUnroutableInDeadLetterState: without the targets policy (no alternate
// exchange), a due message that its target routes to no queue stays in its delay queue's
// dead-letter state, and the exporter reports it in rabbitdelay_delay_messages_dlx, summed per
// bucket and (Options.PerQueue) per queue.
func TestExporterUnroutableInDeadLetterState(t *testing.T) {
	t.Parallel()
	env := brokertest.NewEnv(t)
	m := topoNeedManagement(t, env)
	spec := metSpec()
	declareTopology(t, env, spec) // AMQP only: no policies
	p, err := admin.NewPlan(spec)
	if err != nil {
		t.Fatal(err)
	}
	pub := newPublisher(t, env, spec)
	ctx := topoTestCtx(t, 2*time.Minute)
	if r, err := pub.Publish(ctx, "orders", "no.binding", amqp.Publishing{Body: []byte("stuck")}, time.Second); err != nil || r.Path != amqpdelay.PathBucket {
		t.Fatalf("publish: %v %v", r.Path, err)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(exporter.New(m, p, exporter.Options{}))
	waitFor(t, 90*time.Second, "the due message in the 1 s bucket's messages_dlx", func() bool {
		v, _ := metValue(metGather(t, reg), "rabbitdelay_delay_messages_dlx", map[string]string{"path": "bucket", "bucket": "1s"})
		return v == 1
	})
	fams := metGather(t, reg)
	if v, _ := metValue(fams, "rabbitdelay_parking_messages", nil); v != 0 {
		t.Errorf("parking_messages = %v, want 0 (no targets policy, so no alternate exchange)", v)
	}
	if v, _ := metValue(fams, "rabbitdelay_policy_problems", map[string]string{"breaks": string(admin.BreaksStalls), "severity": "error"}); v < 1 {
		t.Errorf("policy_problems{breaks=stalls} = %v, want at least 1 (the target has no alternate exchange)", v)
	}
	// Per queue: the same message in the 1 s bucket queue's series.
	preg := prometheus.NewRegistry()
	preg.MustRegister(exporter.New(m, p, exporter.Options{PerQueue: true}))
	if v, _ := metValue(metGather(t, preg), "rabbitdelay_delay_messages_dlx", map[string]string{"queue": p.Names.BucketQueue(1000)}); v != 1 {
		t.Errorf("per queue: delay_messages_dlx{queue=%s} = %v, want 1", p.Names.BucketQueue(1000), v)
	}
}

// TestMetricsFaultsAndOutcomes drives the outcomes TestMetricsPublisherAndConsumer does not,
// on a real broker, and reads the values: a nacked publish (a queue full with overflow
// reject-publish), publishes lost when the broker closes the Publisher's connection under
// load (with its disconnects and reconnects), a revocation (the Publisher's
// revocations_total, the stream's size in the exporter, the Consumer's revoked outcome), and
// the Consumer's retried and duplicate outcomes and its reconnection. Every publish's outcome
// label is the one OutcomeOf gives its error, and the lateness observations are as many as the
// handled deliveries.
func TestMetricsFaultsAndOutcomes(t *testing.T) {
	t.Parallel()
	env := brokertest.NewEnv(t)
	m := topoNeedManagement(t, env)
	spec := metSpec()
	p, _, err := polApply(t, env, m, spec)
	if err != nil {
		t.Fatalf("apply: %v", err)
	}
	ch := env.Channel(t)
	// full holds one message and refuses more (basic.nack); sink takes the load of the
	// connection-loss rounds.
	if _, err := ch.QueueDeclare("full", true, false, false, false, amqp.Table{"x-max-length": 1, "x-overflow": "reject-publish"}); err != nil {
		t.Fatal(err)
	}
	if _, err := ch.QueueDeclare("sink", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	for q, key := range map[string]string{"full": "full.#", "sink": "sink.#"} {
		if err := ch.QueueBind(q, key, "orders", false, nil); err != nil {
			t.Fatal(err)
		}
	}
	reg := prometheus.NewRegistry()
	pub := newPublisher(t, env, spec, amqpdelay.Config{Metrics: reg, ConnectionName: "met-pub", ReconnectMin: 100 * time.Millisecond, ReconnectMax: time.Second})
	ctx := topoTestCtx(t, 5*time.Minute)
	pubValue := func(name string, labels map[string]string) float64 {
		v, _ := metValue(metGather(t, reg), name, labels)
		return v
	}

	// Nacked: the second message for full.
	for i, want := range []error{nil, amqpdelay.ErrNacked} {
		if _, err := pub.Publish(ctx, "orders", "full.x", amqp.Publishing{Body: []byte("full")}, 0); !errors.Is(err, want) && !(want == nil && err == nil) {
			t.Fatalf("publish %d to the full queue: %v, want %v", i, err, want)
		}
	}
	if v := pubValue("rabbitdelay_publisher_publishes_total", map[string]string{"path": "direct", "outcome": "nacked"}); v != 1 {
		t.Errorf("publishes_total{path=direct,outcome=nacked} = %v, want 1", v)
	}

	// Lost: the broker closes the Publisher's connection while 4 goroutines publish; the
	// publishes in flight then have no answer (ErrConnectionLost). Rounds until one was lost.
	outcomes := map[string]float64{"confirmed": 1, "nacked": 1}
	var mu sync.Mutex
	closes := 0
	for closes < 5 && outcomes["lost"] == 0 {
		stop := make(chan struct{})
		var wg sync.WaitGroup
		var sent atomic.Int32
		for range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					select {
					case <-stop:
						return
					default:
					}
					pctx, cancel := context.WithTimeout(ctx, time.Minute)
					_, err := pub.Publish(pctx, "orders", "sink.x", amqp.Publishing{Body: []byte("load")}, 0)
					cancel()
					sent.Add(1)
					mu.Lock()
					outcomes[publishOutcome(err)]++
					mu.Unlock()
				}
			}()
		}
		waitFor(t, time.Minute, "publishes under way", func() bool { return sent.Load() > 20 })
		closeConnection(t, env, "met-pub")
		closes++
		waitFor(t, time.Minute, "the Publisher reconnected", func() bool {
			return pubValue("rabbitdelay_publisher_reconnects_total", nil) == float64(closes)
		})
		waitFor(t, time.Minute, "publishes after the reconnection", func() bool {
			n := sent.Load()
			time.Sleep(100 * time.Millisecond)
			return sent.Load() > n
		})
		close(stop)
		wg.Wait()
	}
	t.Logf("%d connection closes; publish outcomes %v", closes, outcomes)
	if outcomes["lost"] == 0 {
		t.Errorf("no publish was lost in %d connection closes under load", closes)
	}
	fams := metGather(t, reg)
	var total float64
	for outcome, n := range outcomes {
		total += n
		if v, _ := metValue(fams, "rabbitdelay_publisher_publishes_total", map[string]string{"path": "direct", "outcome": outcome}); v != n {
			t.Errorf("publishes_total{path=direct,outcome=%s} = %v, want %v (the outcome Config.Metrics documents for each call's error)", outcome, v, n)
		}
	}
	if v, _ := metValue(fams, "rabbitdelay_publisher_publishes_total", nil); v != total {
		t.Errorf("publishes_total over every label = %v, want %v", v, total)
	}
	if v, _ := metValue(fams, "rabbitdelay_publisher_confirm_duration_seconds", nil); v != outcomes["confirmed"] {
		t.Errorf("confirm_duration_seconds count = %v, want the %v confirmed publishes", v, outcomes["confirmed"])
	}
	for name, want := range map[string]float64{"rabbitdelay_publisher_disconnects_total": float64(closes),
		"rabbitdelay_publisher_reconnects_total": float64(closes), "rabbitdelay_publisher_publishes_in_flight": 0} {
		if v, found := metValue(fams, name, nil); !found || v != want {
			t.Errorf("%s = %v (found %v), want %v", name, v, found, want)
		}
	}

	// A revocation before any reader of the stream writes its fences there: the stream
	// holds the one record, and the exporter says so.
	if err := pub.Revoke(ctx, "never-published"); err != nil {
		t.Fatalf("revoke: %v", err)
	}
	if v := pubValue("rabbitdelay_revocations_total", map[string]string{"outcome": "confirmed"}); v != 1 {
		t.Errorf("revocations_total{outcome=confirmed} = %v, want 1", v)
	}
	ereg := prometheus.NewRegistry()
	ereg.MustRegister(exporter.New(m, p, exporter.Options{}))
	var streamMessages float64
	var found bool
	deadline := time.Now().Add(time.Minute) // statistics lag up to 5 s
	for {
		streamMessages, found = metValue(metGather(t, ereg), "rabbitdelay_revocation_stream_messages", map[string]string{"queue": p.Names.Revoked()})
		if streamMessages == 1 || time.Now().After(deadline) {
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	if streamMessages != 1 {
		t.Errorf("revocation_stream_messages = %v (found %v), want 1 (one record)", streamMessages, found)
	}

	// The Consumer: a retried message, a duplicate, a revoked one, then a reconnection.
	creg := prometheus.NewRegistry()
	cfg := amqpdelay.Config{Prefix: spec.Prefix}
	cfg.URL = env.URL
	var handled atomic.Int32
	var failedOnce atomic.Bool
	c := newConsumer(t, cfg, "orders.work", func(ctx context.Context, d amqp.Delivery) error {
		if d.MessageId == "retry" && failedOnce.CompareAndSwap(false, true) {
			return errors.New("the first attempt fails")
		}
		handled.Add(1)
		return nil
	}, consumer.Options{
		Metrics:        creg,
		ConnectionName: "met-con",
		Concurrency:    1,
		Backoff:        consumer.Backoff{MaxAttempts: 3, Initial: 200 * time.Millisecond, Max: 10 * time.Second, NoJitter: true},
		ReconnectMin:   100 * time.Millisecond,
		ReconnectMax:   time.Second,
	})
	runConsumer(t, c)
	cvalue := func(name string, labels map[string]string) float64 {
		v, _ := metValue(metGather(t, creg), name, labels)
		return v
	}
	outcome := func(o string) float64 {
		return cvalue("rabbitdelay_consumer_messages_total", map[string]string{"queue": "orders.work", "outcome": o})
	}
	publish := func(id string, delay time.Duration) {
		t.Helper()
		if _, err := pub.Publish(ctx, "orders", "o."+id, amqp.Publishing{MessageId: id, Body: []byte(id)}, delay); err != nil {
			t.Fatalf("publish %s: %v", id, err)
		}
	}
	publish("rev", 6*time.Second)
	if err := pub.Revoke(ctx, "rev"); err != nil {
		t.Fatalf("revoke: %v", err)
	}
	if v := pubValue("rabbitdelay_revocations_total", map[string]string{"outcome": "confirmed"}); v != 2 {
		t.Errorf("revocations_total{outcome=confirmed} = %v, want 2", v)
	}
	publish("retry", 0)
	publish("dup", 0)
	publish("dup", 0)
	publish("bucket", time.Second)
	publish("ladder", 1500*time.Millisecond)
	waitFor(t, 2*time.Minute, "4 handled, 1 retried, 1 duplicate, 1 revoked", func() bool {
		return outcome("handled") == 4 && outcome("retried") == 1 && outcome("duplicate") == 1 && outcome("revoked") == 1
	})
	closeConnection(t, env, "met-con")
	waitFor(t, time.Minute, "the Consumer reconnected", func() bool {
		return cvalue("rabbitdelay_consumer_reconnects_total", map[string]string{"queue": "orders.work"}) == 1
	})
	publish("after", 0)
	waitFor(t, time.Minute, "the delivery after the reconnection handled", func() bool { return outcome("handled") == 5 })
	cfams := metGather(t, creg)
	for o, want := range map[string]float64{"handled": 5, "retried": 1, "duplicate": 1, "revoked": 1, "parked": 0} {
		if v, _ := metValue(cfams, "rabbitdelay_consumer_messages_total", map[string]string{"queue": "orders.work", "outcome": o}); v != want {
			t.Errorf("consumer messages_total{outcome=%s} = %v, want %v", o, v, want)
		}
	}
	if v, _ := metValue(cfams, "rabbitdelay_consumer_lateness_seconds", nil); v != float64(handled.Load()) || v != 5 {
		t.Errorf("lateness observations = %v, want the %d handled deliveries", v, handled.Load())
	}
	for path, want := range map[string]float64{"bucket": 1, "ladder": 1} {
		if v, _ := metValue(cfams, "rabbitdelay_consumer_lateness_seconds", map[string]string{"path": path}); v < want {
			t.Errorf("lateness_seconds{path=%s} count = %v, want at least %v", path, v, want)
		}
	}
	if v, _ := metValue(cfams, "rabbitdelay_consumer_handler_failures_total", nil); v != 1 {
		t.Errorf("handler_failures_total = %v, want 1", v)
	}
	for result, want := range map[string]float64{"ok": 5, "error": 1} {
		if v, _ := metValue(cfams, "rabbitdelay_consumer_handler_duration_seconds", map[string]string{"result": result}); v != want {
			t.Errorf("handler_duration_seconds{result=%s} count = %v, want %v", result, v, want)
		}
	}
	metLint(t, reg)
	metLint(t, creg)
}

// recordingRegisterer registers on a registry and keeps the collectors, so that a test can
// read every descriptor (a vector with no series yet gathers nothing).
type recordingRegisterer struct {
	*prometheus.Registry
	collectors []prometheus.Collector
}

func (r *recordingRegisterer) Register(c prometheus.Collector) error {
	r.collectors = append(r.collectors, c)
	return r.Registry.Register(c)
}

func (r *recordingRegisterer) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		if err := r.Register(c); err != nil {
			panic(err)
		}
	}
}

// descLabels matches the name and variable labels in a Desc's String.
var descLabels = regexp.MustCompile(`fqName: "([^"]+)".*variableLabels: \{([^}]*)\}`)

// metricLabels returns each metric name the collectors describe with its variable labels
// (histograms: also le, and the _bucket, _sum and _count series).
func metricLabels(t *testing.T, cs ...prometheus.Collector) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	for _, c := range cs {
		ch := make(chan *prometheus.Desc, 64)
		go func() { c.Describe(ch); close(ch) }()
		for d := range ch {
			m := descLabels.FindStringSubmatch(d.String())
			if m == nil {
				t.Fatalf("descriptor %s: no name and labels", d)
			}
			var labels []string
			if m[2] != "" {
				labels = strings.Split(m[2], ",")
			}
			out[m[1]] = labels
			for _, suffix := range []string{"_bucket", "_sum", "_count"} {
				out[m[1]+suffix] = append(slices.Clone(labels), "le")
			}
		}
	}
	return out
}

// TestGrafanaDashboard reads docs/grafana/rabbitdelay.json as Grafana's import would: valid
// JSON, the data source a dashboard variable of type datasource (query prometheus) that every
// panel and query uses, unique panel ids, and panels for lateness, waiting, stuck messages and
// publish outcomes; every rabbitdelay_ metric a query names is one the Publisher, the Consumer
// or the exporter describes, and every label a query groups or filters by is one of its labels.
func TestGrafanaDashboard(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile("../docs/grafana/rabbitdelay.json")
	if err != nil {
		t.Fatal(err)
	}
	type target struct {
		Datasource map[string]string `json:"datasource"`
		Expr       string            `json:"expr"`
	}
	var d struct {
		UID        string `json:"uid"`
		Title      string `json:"title"`
		Templating struct {
			List []struct {
				Name, Type string
				Query      any
			} `json:"list"`
		} `json:"templating"`
		Panels []struct {
			ID         int                       `json:"id"`
			Type       string                    `json:"type"`
			Title      string                    `json:"title"`
			Datasource map[string]string         `json:"datasource"`
			GridPos    *struct{ X, Y, W, H int } `json:"gridPos"`
			Targets    []target                  `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(raw, &d); err != nil {
		t.Fatalf("the dashboard is not valid JSON: %v", err)
	}
	if d.UID == "" || d.Title == "" {
		t.Errorf("uid %q, title %q: want both", d.UID, d.Title)
	}
	hasVar := false
	for _, v := range d.Templating.List {
		hasVar = hasVar || (v.Name == "datasource" && v.Type == "datasource" && v.Query == "prometheus")
	}
	if !hasVar {
		t.Errorf("no dashboard variable datasource of type datasource (query prometheus): %+v", d.Templating.List)
	}

	// The names and labels of every metric, from the collectors themselves.
	env := brokertest.NewEnv(t)
	spec := metSpec()
	declareTopology(t, env, spec)
	preg := &recordingRegisterer{Registry: prometheus.NewRegistry()}
	newPublisher(t, env, spec, amqpdelay.Config{Metrics: preg})
	creg := &recordingRegisterer{Registry: prometheus.NewRegistry()}
	cfg := amqpdelay.Config{Prefix: spec.Prefix}
	cfg.URL = env.URL
	newConsumer(t, cfg, "orders.work", func(context.Context, amqp.Delivery) error { return nil }, consumer.Options{Metrics: creg})
	p, err := admin.NewPlan(spec)
	if err != nil {
		t.Fatal(err)
	}
	known := metricLabels(t, append(append(preg.collectors, creg.collectors...), exporter.New(nil, p, exporter.Options{}))...)

	ids := map[int]bool{}
	metricRef := regexp.MustCompile(`\b(rabbitdelay_[a-z_]+)(\{[^}]*\})?`)
	grouping := regexp.MustCompile(`\bby \(([^)]*)\)`)
	var all string
	for _, pn := range d.Panels {
		if ids[pn.ID] {
			t.Errorf("panel id %d used twice", pn.ID)
		}
		ids[pn.ID] = true
		if pn.GridPos == nil {
			t.Errorf("panel %q has no gridPos", pn.Title)
		}
		if pn.Type == "row" {
			continue
		}
		if pn.Datasource["uid"] != "${datasource}" || pn.Datasource["type"] != "prometheus" {
			t.Errorf("panel %q: data source %v, want the variable ${datasource}", pn.Title, pn.Datasource)
		}
		if len(pn.Targets) == 0 {
			t.Errorf("panel %q has no query", pn.Title)
		}
		for _, tg := range pn.Targets {
			all += tg.Expr + "\n"
			if tg.Datasource["uid"] != "${datasource}" {
				t.Errorf("panel %q: a query's data source %v, want the variable ${datasource}", pn.Title, tg.Datasource)
			}
			var used []string // the metrics of this query
			for _, m := range metricRef.FindAllStringSubmatch(tg.Expr, -1) {
				labels, ok := known[m[1]]
				if !ok {
					t.Errorf("panel %q: %s is no metric of rabbitdelay's", pn.Title, m[1])
					continue
				}
				used = append(used, m[1])
				for _, sel := range strings.Split(strings.Trim(m[2], "{}"), ",") {
					if name, _, ok := strings.Cut(sel, "="); ok && !slices.Contains(labels, strings.TrimSpace(name)) {
						t.Errorf("panel %q: %s has no label %s", pn.Title, m[1], name)
					}
				}
			}
			for _, g := range grouping.FindAllStringSubmatch(tg.Expr, -1) {
				for _, l := range strings.Split(g[1], ",") {
					l = strings.TrimSpace(l)
					for _, name := range used {
						if !slices.Contains(known[name], l) {
							t.Errorf("panel %q: groups by %s, which %s does not have", pn.Title, l, name)
						}
					}
				}
			}
		}
	}
	for what, expr := range map[string]string{
		"lateness":         "rabbitdelay_consumer_lateness_seconds_bucket",
		"waiting messages": "rabbitdelay_delay_messages{",
		"stuck messages":   "rabbitdelay_delay_messages_dlx",
		"parking":          "rabbitdelay_parking_messages",
		"publish outcomes": "sum by (outcome) (rate(rabbitdelay_publisher_publishes_total",
	} {
		if !strings.Contains(all, expr) {
			t.Errorf("no panel shows %s (%s)", what, expr)
		}
	}
}

// publishOutcome is the outcome label of rabbitdelay_publisher_publishes_total that
// amqpdelay.Config.Metrics documents for a Publish call that returned err.
func publishOutcome(err error) string {
	switch {
	case err == nil:
		return "confirmed"
	case errors.Is(err, amqpdelay.ErrNacked):
		return "nacked"
	case errors.Is(err, amqpdelay.ErrUnroutable):
		return "unroutable"
	case errors.Is(err, amqpdelay.ErrInvalidInput), errors.Is(err, amqpdelay.ErrUnknownTarget), errors.Is(err, amqpdelay.ErrDelayTooLong),
		errors.Is(err, amqpdelay.ErrPluginUnavailable):
		return "invalid"
	case errors.Is(err, amqpdelay.ErrAccessRefused), errors.Is(err, amqpdelay.ErrExchangeNotFound):
		return "refused"
	case errors.Is(err, amqpdelay.ErrConnectionLost):
		return "lost"
	case errors.Is(err, amqpdelay.ErrClosed):
		return "closed"
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return "canceled"
	}
	return "failed"
}
