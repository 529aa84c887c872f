//go:build integration

package integration

import (
	"context"
	"errors"
	neturl "net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/delaykit/rabbitdelay/amqpdelay"
	"github.com/delaykit/rabbitdelay/integration/brokertest"
	"github.com/delaykit/rabbitdelay/internal/admin"
	"github.com/delaykit/rabbitdelay/internal/delayspec"
	"github.com/delaykit/rabbitdelay/internal/pluginprobe"
	"github.com/delaykit/rabbitdelay/ttlbuckets"
)

// testLadder keeps each test's queue count down: radix 16, 1 ms unit, maximum 65,535 ms
// (16^4-1): 4 levels, 60 queues and 45 last-hop queues.
//
// Its order is shortest-first: the default, top-split, adds 45 first-hop quorum queues to every
// test's topology, which make test cannot afford in every test. The routes of every order are
// tested in ladder_route_test.go, and the default order's room for dead-letter headers in
// TestPublisherDeadLetterHeaderLimit.
func testLadder() ttlbuckets.Ladder {
	return ttlbuckets.Ladder{Unit: time.Millisecond, Radix: 16, Max: 65535 * time.Millisecond, Order: ttlbuckets.ShortestFirst}
}

// testSpec is a specification with the test ladder, quorum queues, no plugin and the given
// targets (declared as topic exchanges when they have no type).
func testSpec(env *brokertest.Env, targets ...delayspec.Target) delayspec.Spec {
	return delayspec.Spec{
		Prefix:    env.Prefix,
		Targets:   targets,
		Ladder:    testLadder(),
		Plugin:    delayspec.PluginOff,
		QueueType: delayspec.Quorum,
	}
}

// declareTopology declares spec's delay topology in env's vhost with admin.Apply, the code
// behind `rabbitdelay apply`.
func declareTopology(t testing.TB, env *brokertest.Env, spec delayspec.Spec) {
	t.Helper()
	declareTopologyAt(t, env.URL, spec)
}

func declareTopologyAt(t testing.TB, url string, spec delayspec.Spec) {
	t.Helper()
	plan, err := admin.NewPlan(spec)
	if err != nil {
		t.Fatalf("declareTopology: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	conn, err := amqp.DialConfig(url, amqp.Config{Dial: amqp.DefaultDial(10 * time.Second)})
	if err != nil {
		t.Fatalf("declareTopology: dial: %v", err)
	}
	defer conn.Close()
	if spec.WithDefaults().Plugin != delayspec.PluginOff {
		dial := func(ctx context.Context) (*amqp.Connection, error) {
			return amqp.DialConfig(url, amqp.Config{Dial: amqp.DefaultDial(10 * time.Second)})
		}
		has, err := pluginprobe.Probe(ctx, dial, "rabbitdelay-test.plugin-probe")
		if err != nil {
			t.Fatalf("declareTopology: probe plugin: %v", err)
		}
		if plan, err = plan.ForPlugin(has); err != nil {
			t.Fatalf("declareTopology: %v", err)
		}
	}
	if _, err := admin.Apply(ctx, conn, plan, admin.ApplyOptions{}); err != nil {
		t.Fatalf("declareTopology: apply: %v", err)
	}
}

// arrival is one delivery with the time the test's consumer got it.
type arrival struct {
	d  amqp.Delivery
	at time.Time
}

// consume starts a consumer on queue (auto-ack) and returns its deliveries with their arrival
// times. The consumer ends with the test.
func consumeQueue(t testing.TB, env *brokertest.Env, queue string) <-chan arrival {
	t.Helper()
	return consumeQueueURL(t, env.URL, queue)
}

func consumeQueueURL(t testing.TB, url, queue string) <-chan arrival {
	t.Helper()
	conn, err := amqp.DialConfig(url, amqp.Config{Dial: amqp.DefaultDial(10 * time.Second)})
	if err != nil {
		t.Fatalf("consume: dial: %v", err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	ch, err := conn.Channel()
	if err != nil {
		t.Fatalf("consume: channel: %v", err)
	}
	ds, err := ch.Consume(queue, "", true, false, false, false, nil)
	if err != nil {
		t.Fatalf("consume %s: %v", queue, err)
	}
	out := make(chan arrival, 1024)
	go func() {
		defer close(out)
		for d := range ds {
			out <- arrival{d: d, at: time.Now()}
		}
	}()
	return out
}

// maxLateness is how late a delivery may be before a test fails: it catches a message that is
// stuck (held in a queue, waiting on a hop that never ends), not slow delivery on a busy
// machine. How late messages are is a benchmark figure (bench_lateness_test.go).
const maxLateness = 30 * time.Second

// checkOnTime fails the test when r arrived before its due time (from the rabbitdelay-due
// header) or more than maxLateness after it, and returns its lateness.
func checkOnTime(t testing.TB, r arrival) time.Duration {
	t.Helper()
	due, ok := amqpdelay.Due(r.d)
	if !ok {
		t.Errorf("delivery %s has no due header: %v", r.d.MessageId, r.d.Headers)
		return 0
	}
	late := r.at.Sub(due)
	if late < 0 {
		t.Errorf("delivery %s arrived %v EARLY (due %s, arrival %s)", r.d.MessageId, -late,
			due.Format(time.StampMilli), r.at.Format(time.StampMilli))
	}
	if late > maxLateness {
		t.Errorf("delivery %s arrived %v late (more than %v)", r.d.MessageId, late, maxLateness)
	}
	return late
}

// nextDelivery waits for a delivery up to within (when it should have arrived) plus
// maxLateness (a busy machine delivers late; only a stuck message fails the test).
func nextDelivery(t testing.TB, c <-chan arrival, within time.Duration) arrival {
	t.Helper()
	within += maxLateness
	select {
	case r, ok := <-c:
		if !ok {
			t.Fatal("consumer closed")
		}
		return r
	case <-time.After(within):
		t.Fatalf("no delivery within %v", within)
	}
	panic("unreachable")
}

// none fails when a delivery arrives within d.
func noDelivery(t testing.TB, c <-chan arrival, d time.Duration) {
	t.Helper()
	select {
	case r := <-c:
		t.Fatalf("unexpected delivery %s (routing key %q)", r.d.MessageId, r.d.RoutingKey)
	case <-time.After(d):
	}
}

// management is the management API of env's broker, read for env's vhost, for
// amqpdelay.Config.Management.
func management(t testing.TB, env *brokertest.Env) amqpdelay.ManagementCheck {
	t.Helper()
	m, err := admin.NewManagement(env.Broker.ManagementURL, env.VHost)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// newPublisherURL opens a Publisher on url for spec and closes it with the test. cfg, when
// given (at most one), sets the Publisher's other fields; its URL and Prefix are replaced.
func newPublisherURL(t testing.TB, url string, spec delayspec.Spec, cfg ...amqpdelay.Config) *amqpdelay.Publisher {
	t.Helper()
	c := publisherConfig(t, url, spec, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p, err := amqpdelay.NewPublisher(ctx, c)
	if err != nil {
		t.Fatalf("NewPublisher: %v", err)
	}
	t.Cleanup(func() {
		if err := p.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return p
}

// publisherConfig is cfg[0] (or the zero Config) with url and spec's prefix.
func publisherConfig(t testing.TB, url string, spec delayspec.Spec, cfg []amqpdelay.Config) amqpdelay.Config {
	t.Helper()
	var c amqpdelay.Config
	switch len(cfg) {
	case 0:
	case 1:
		c = cfg[0]
	default:
		t.Fatalf("%d Configs given: want at most one", len(cfg))
	}
	c.URL, c.Prefix = url, spec.Prefix
	return c
}

// newPublisher is newPublisherURL with env's URL.
func newPublisher(t testing.TB, env *brokertest.Env, spec delayspec.Spec, cfg ...amqpdelay.Config) *amqpdelay.Publisher {
	t.Helper()
	return newPublisherURL(t, env.URL, spec, cfg...)
}

// declareReadyQueue declares a quorum queue bound to exchange with key.
func declareReadyQueue(t testing.TB, env *brokertest.Env, queue, exchange, key string) {
	t.Helper()
	ch := env.Channel(t)
	if _, err := ch.QueueDeclare(queue, true, false, false, false, amqp.Table{"x-queue-type": "quorum"}); err != nil {
		t.Fatalf("declare %s: %v", queue, err)
	}
	if err := ch.QueueBind(queue, key, exchange, false, nil); err != nil {
		t.Fatalf("bind %s: %v", queue, err)
	}
}

func pubCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func textMsg(s string) amqp.Publishing {
	return amqp.Publishing{ContentType: "text/plain", Body: []byte(s)}
}

// privateBroker is a RabbitMQ node of the test's own (scripts/broker with its own state
// directory), for tests that stop and start the broker.
type privateBroker struct {
	state string
	URL   string
	root  string
	// pluginsDir, when set, is passed to scripts/broker as BROKER_PLUGINS_DIR.
	pluginsDir string
	// Broker gives the management API (for queueStats).
	Broker *brokertest.Broker
}

var privateBrokerMu sync.Mutex

// startPrivateBroker starts a node of the test's own, stopped when the test ends. It skips
// (fails in CI) when Debian's rabbitmq-server is not installed.
func startPrivateBroker(t testing.TB) *privateBroker {
	t.Helper()
	return startPrivateBrokerWith(t, "")
}

// startPrivateBrokerWith is startPrivateBroker with the delayed-message plugin from
// pluginsDir (BROKER_PLUGINS_DIR) when pluginsDir is not "".
func startPrivateBrokerWith(t testing.TB, pluginsDir string) *privateBroker {
	t.Helper()
	if v := os.Getenv("BROKER_VERSION"); (v == "" || v == "3") && !fileExists("/usr/lib/rabbitmq/bin/rabbitmq-server") {
		if brokertest.InCI() {
			t.Fatalf("rabbitmq-server is not installed and CI=true: a private broker is needed to stop and start")
		}
		t.Skip("rabbitmq-server is not installed: this test starts and stops a broker of its own (apt-get install rabbitmq-server)")
	}
	_, file, _, _ := runtime.Caller(0)
	root := filepath.Dir(filepath.Dir(file))
	b := &privateBroker{state: t.TempDir(), root: root, pluginsDir: pluginsDir}
	// Registered first: a failed "up" may have started a node, and "down" stops only what
	// "up" recorded.
	t.Cleanup(func() {
		start := time.Now()
		defer func() { t.Logf("private broker stopped in %v", time.Since(start)) }()
		if out, err := b.script(t, "down"); err != nil {
			t.Errorf("scripts/broker down: %v\n%s", err, out)
		}
	})
	// Two nodes booting at once on 2 cores is slow; one at a time.
	privateBrokerMu.Lock()
	start := time.Now()
	out, err := b.script(t, "up")
	privateBrokerMu.Unlock()
	t.Logf("private broker started in %v: %s", time.Since(start), strings.TrimSpace(lastLine(out)))
	if err != nil {
		t.Fatalf("scripts/broker up: %v\n%s", err, out)
	}
	url, err := b.script(t, "url")
	if err != nil {
		t.Fatalf("scripts/broker url: %v", err)
	}
	b.URL = strings.TrimSpace(url)
	mgmt, _ := b.script(t, "mgmt-url")
	b.Broker = &brokertest.Broker{URL: b.URL, ManagementURL: strings.TrimSpace(mgmt)}
	return b
}

func (b *privateBroker) script(t testing.TB, args ...string) (string, error) {
	// A bound on a hang: under a load average of 30 on 2 cores, "up" took over 7 minutes.
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(b.root, "scripts", "broker"), args...)
	env := []string{"BROKER_STATE=" + b.state, "BROKER_DOCKER=0"}
	if b.pluginsDir != "" {
		env = append(env, "BROKER_PLUGINS_DIR="+b.pluginsDir)
	}
	for _, kv := range os.Environ() {
		// The suite's BROKER_VERSION stays: the private node runs the RabbitMQ version the
		// suite targets (scripts/broker also reads the major version from RABBITMQ_VERSION).
		if strings.HasPrefix(kv, "AMQP_URL=") || strings.HasPrefix(kv, "AMQP_MANAGEMENT_URL=") ||
			strings.HasPrefix(kv, "BROKER_") && !strings.HasPrefix(kv, "BROKER_VERSION=") && !strings.HasPrefix(kv, "BROKER_CACHE=") {
			continue
		}
		env = append(env, kv)
	}
	cmd.Env = env
	out, err := cmd.CombinedOutput()
	if err != nil && errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return string(out), ctx.Err()
	}
	return string(out), err
}

// stopApp stops the RabbitMQ application (connections drop, data stays); startApp starts it
// again and waits until it accepts connections.
func (b *privateBroker) stopApp(t testing.TB) {
	t.Helper()
	start := time.Now()
	defer func() { t.Logf("stop_app took %v", time.Since(start)) }()
	if out, err := b.script(t, "stop-app"); err != nil {
		t.Fatalf("scripts/broker stop-app: %v\n%s", err, out)
	}
}

func (b *privateBroker) startApp(t testing.TB) {
	t.Helper()
	start := time.Now()
	defer func() { t.Logf("start_app took %v", time.Since(start)) }()
	if out, err := b.script(t, "start-app"); err != nil {
		t.Fatalf("scripts/broker start-app: %v\n%s", err, out)
	}
}

// queueStats returns the management API's message counts of every queue in env's vhost
// whose counts are not all zero: name -> {"messages": n, "messages_dlx": n}. The management
// API refreshes these every 5 s (collect_statistics_interval).
func queueStats(t testing.TB, env *brokertest.Env) map[string]map[string]int {
	t.Helper()
	var qs []map[string]any
	if err := env.Broker.Management("GET", "api/queues/"+neturl.PathEscape(env.VHost), nil, &qs); err != nil {
		t.Fatalf("management API: list queues: %v", err)
	}
	out := map[string]map[string]int{}
	for _, q := range qs {
		name, _ := q["name"].(string)
		m := map[string]int{}
		for _, k := range []string{"messages", "messages_dlx"} {
			if v, ok := q[k].(float64); ok && v != 0 {
				m[k] = int(v)
			}
		}
		if len(m) > 0 {
			out[name] = m
		}
	}
	return out
}

// waitStats polls queueStats until cond holds or within passes.
func waitStats(t testing.TB, env *brokertest.Env, within time.Duration, cond func(map[string]map[string]int) bool) map[string]map[string]int {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		s := queueStats(t, env)
		if cond(s) || time.Now().After(deadline) {
			return s
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// resilientConsumer consumes queue on url and keeps reconnecting (every 100 ms) until the
// test ends, for tests that restart the broker. It acknowledges each delivery after handing it
// on: with automatic acknowledgement a delivery the broker sent as it stopped was settled and
// gone, though the client never read it. A redelivery of a message already handed on (its ack
// was lost with the connection) is acknowledged and dropped, as at-least-once allows.
func resilientConsumer(t testing.TB, url, queue string) <-chan arrival {
	t.Helper()
	out := make(chan arrival, 1024)
	seen := map[string]bool{}
	stop := make(chan struct{})
	done := make(chan struct{})
	t.Cleanup(func() { close(stop); <-done })
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			default:
			}
			conn, err := amqp.DialConfig(url, amqp.Config{Dial: amqp.DefaultDial(2 * time.Second)})
			if err != nil {
				time.Sleep(100 * time.Millisecond)
				continue
			}
			ch, err := conn.Channel()
			var ds <-chan amqp.Delivery
			if err == nil {
				ds, err = ch.Consume(queue, "", false, false, false, false, nil)
			}
			if err != nil {
				_ = conn.Close()
				time.Sleep(100 * time.Millisecond)
				continue
			}
		loop:
			for {
				select {
				case <-stop:
					_ = conn.Close()
					return
				case d, ok := <-ds:
					if !ok {
						break loop
					}
					key := d.MessageId + "\x00" + string(d.Body)
					if !(d.Redelivered && seen[key]) {
						seen[key] = true
						out <- arrival{d: d, at: time.Now()}
					}
					_ = d.Ack(false)
				}
			}
			_ = conn.Close()
		}
	}()
	return out
}

// directFixture is where most publisher tests start: the test's own vhost, a direct target
// exchange and the test ladder declared with admin.Apply, a ready queue bound to the target
// with key "k" and consumed, and a Publisher.
type directFixture struct {
	env    *brokertest.Env
	target string
	spec   delayspec.Spec
	q      string
	got    <-chan arrival
	p      *amqpdelay.Publisher
	ctx    context.Context
}

// newDirectFixture declares a direct target "orders" with a ready queue bound by "k", consumes
// it, and starts a Publisher with cfg (see newPublisherURL).
func newDirectFixture(t *testing.T, cfg ...amqpdelay.Config) directFixture {
	t.Helper()
	f := declareDirectFixture(t)
	f.got = consumeQueue(t, f.env, f.q)
	f.p = newPublisher(t, f.env, f.spec, cfg...)
	f.ctx = pubCtx(t)
	return f
}

// declareDirectFixture declares what newDirectFixture does, and neither consumes nor starts a
// Publisher (got and p are nil; ctx is set).
func declareDirectFixture(t *testing.T) directFixture {
	t.Helper()
	f := directFixture{env: brokertest.NewEnv(t)}
	f.target = f.env.Name("orders")
	f.spec = testSpec(f.env, delayspec.Target{Name: f.target, Type: "direct"})
	declareTopology(t, f.env, f.spec)
	f.q = f.env.Name("ready")
	declareReadyQueue(t, f.env, f.q, f.target, "k")
	f.ctx = pubCtx(t)
	return f
}

// canary publishes from several goroutines until ended and counts the outcomes: a test runs it
// beside something that must not disturb the other publishes of a Publisher.
type canary struct {
	stop         chan struct{}
	wg           sync.WaitGroup
	sent, failed atomic.Int64
	first        atomic.Pointer[error]
}

// startCanary starts workers goroutines, each calling publish in a loop.
func startCanary(workers int, publish func() error) *canary {
	c := &canary{stop: make(chan struct{})}
	for range workers {
		c.wg.Add(1)
		go func() {
			defer c.wg.Done()
			for {
				select {
				case <-c.stop:
					return
				default:
				}
				if err := publish(); err != nil {
					c.failed.Add(1)
					c.first.CompareAndSwap(nil, &err)
				} else {
					c.sent.Add(1)
				}
			}
		}()
	}
	return c
}

// check ends the canary and fails t unless some publishes succeeded and none failed; what
// names what the canary ran beside.
func (c *canary) check(t *testing.T, what string) {
	t.Helper()
	close(c.stop)
	c.wg.Wait()
	var first error
	if e := c.first.Load(); e != nil {
		first = *e
	}
	if c.sent.Load() == 0 {
		t.Fatalf("no canary publish succeeded beside %s (%d failed; first: %v)", what, c.failed.Load(), first)
	}
	if n := c.failed.Load(); n > 0 {
		t.Errorf("%d of %d canary publishes failed beside %s (first: %v)", n, n+c.sent.Load(), what, first)
	}
}

// lastLine returns the last non-empty line of s.
func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if strings.Contains(lines[i], "ready:") {
			return lines[i]
		}
	}
	return lines[len(lines)-1]
}

func fileExists(name string) bool {
	_, err := os.Stat(name)
	return err == nil
}
