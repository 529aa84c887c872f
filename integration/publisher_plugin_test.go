//go:build integration

package integration

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/delaykit/rabbitdelay/amqpdelay"
	"github.com/delaykit/rabbitdelay/integration/brokertest"
	"github.com/delaykit/rabbitdelay/internal/admin"
	"github.com/delaykit/rabbitdelay/internal/delayspec"
	"github.com/delaykit/rabbitdelay/internal/pluginprobe"
	"github.com/delaykit/rabbitdelay/internal/route"
	"github.com/delaykit/rabbitdelay/plugin"
)

func dialer(url string) pluginprobe.Dialer {
	return func(ctx context.Context) (*amqp.Connection, error) {
		return amqp.DialConfig(url, amqp.Config{Dial: amqp.DefaultDial(10 * time.Second)})
	}
}

// TestPublisherWithoutPlugin: on a broker without the delayed-message plugin, Auto and
// PreferPlugin never pick it, and PluginOnly fails with an error that says the plugin is
// missing. The probes work on connections of their own: on RabbitMQ 3.x the failed declare
// of the unknown exchange type closes the whole connection.
func TestPublisherWithoutPlugin(t *testing.T) {
	t.Parallel()
	env := brokertest.NewEnv(t)
	ctx := pubCtx(t)
	has, err := pluginprobe.Probe(ctx, dialer(env.URL), env.Prefix+".plugin-probe")
	if err != nil {
		t.Fatalf("pluginprobe.Probe: %v", err)
	}
	if has {
		t.Skip("this broker has the delayed-message plugin; TestPublisherPluginPath covers it")
	}
	target := env.Name("orders")
	spec := testSpec(env, delayspec.Target{Name: target, Type: "direct"})
	spec.Plugin = delayspec.PluginAuto
	declareTopology(t, env, spec)
	if ok, err := pluginprobe.ExchangeExists(ctx, dialer(env.URL), spec.Names().PluginExchange()); err != nil || ok {
		t.Fatalf("ExchangeExists(plugin exchange) = %v, %v; want false, nil", ok, err)
	}
	if ok, err := pluginprobe.ExchangeExists(ctx, dialer(env.URL), spec.Names().Dispatch()); err != nil || !ok {
		t.Fatalf("ExchangeExists(dispatch) = %v, %v; want true, nil", ok, err)
	}
	q := env.Name("ready")
	declareReadyQueue(t, env, q, target, "k")
	got := consumeQueue(t, env, q)
	for _, s := range []amqpdelay.Strategy{amqpdelay.Auto, amqpdelay.PreferPlugin} {
		p := newPublisher(t, env, spec, amqpdelay.Config{Strategy: s})
		if p.PluginAvailable() {
			t.Errorf("%v: PluginAvailable() = true on a broker without the plugin", s)
		}
		// Not a whole ms: Auto would take the plugin if it could.
		r, err := p.Publish(ctx, target, "k", textMsg(s.String()), 700*time.Millisecond+1)
		if err != nil {
			t.Fatalf("%v: %v", s, err)
		}
		if r.Path != amqpdelay.PathLadder || !r.Rounded || r.Delay != 701*time.Millisecond {
			t.Errorf("%v: receipt %+v, want the ladder rounded up to 701ms", s, r)
		}
		checkOnTime(t, nextDelivery(t, got, 5*time.Second))
	}
	cfg := amqpdelay.Config{Prefix: spec.Prefix, Strategy: amqpdelay.PluginOnly}
	cfg.URL = env.URL
	p, err := amqpdelay.NewPublisher(ctx, cfg)
	if err == nil {
		p.Close()
		t.Fatal("PluginOnly on a broker without the plugin: NewPublisher succeeded")
	}
	if !errors.Is(err, amqpdelay.ErrPluginUnavailable) || !strings.Contains(err.Error(), plugin.PluginName) {
		t.Errorf("PluginOnly: err = %v, want ErrPluginUnavailable naming %s", err, plugin.PluginName)
	}
}

// TestPublisherPluginPath runs where AMQP_PLUGIN_URL names a broker with the plugin: Auto and
// PreferPlugin pick per the path table (docs/how-it-works.md), and the messages arrive, none early.
func TestPublisherPluginPath(t *testing.T) {
	f := newPluginFixture(t)
	url, spec, target, got := f.env.URL, f.spec, f.target, f.got
	ctx := pubCtx(t)

	cases := []struct {
		strategy amqpdelay.Strategy
		d        time.Duration
		want     amqpdelay.Path
	}{
		{amqpdelay.Auto, 800 * time.Millisecond, amqpdelay.PathLadder},   // exact on the ladder
		{amqpdelay.Auto, 800*time.Millisecond + 1, amqpdelay.PathLadder}, // the plugin would round up to 801 ms too
		{amqpdelay.PreferPlugin, 900 * time.Millisecond, amqpdelay.PathPlugin},
		{amqpdelay.PluginOnly, time.Second, amqpdelay.PathPlugin},
		{amqpdelay.LadderOnly, 700*time.Millisecond + 1, amqpdelay.PathLadder},
	}
	for _, c := range cases {
		p := newPublisherURL(t, url, spec, amqpdelay.Config{Strategy: c.strategy})
		// LadderOnly never probes the plugin, so it reports it unavailable.
		if want := c.strategy != amqpdelay.LadderOnly; p.PluginAvailable() != want {
			t.Fatalf("%v: PluginAvailable() = %v with the plugin exchange declared, want %v", c.strategy, !want, want)
		}
		r, err := p.Publish(ctx, target, "k", textMsg(c.strategy.String()), c.d)
		if err != nil {
			t.Fatalf("%v %v: %v", c.strategy, c.d, err)
		}
		if r.Path != c.want {
			t.Errorf("%v %v: path %v, want %v", c.strategy, c.d, r.Path, c.want)
		}
		a := nextDelivery(t, got, 5*time.Second)
		checkOnTime(t, a)
		if string(a.d.Body) != c.strategy.String() || a.d.RoutingKey != "k" {
			t.Errorf("delivery %q key %q", a.d.Body, a.d.RoutingKey)
		}
	}
	// Beyond the ladder's maximum (65,535 ms) Auto takes the plugin; 30 days fits x-delay as
	// an int64 (2,592,000,000 ms): the message is accepted, not routed at once.
	p := newPublisherURL(t, url, spec)
	for _, d := range []time.Duration{70 * time.Second, 30 * 24 * time.Hour} {
		r, err := p.Publish(ctx, target, "k", textMsg("long"), d)
		if err != nil || r.Path != amqpdelay.PathPlugin {
			t.Errorf("Auto %v: %+v, %v; want the plugin", d, r, err)
		}
	}
	noDelivery(t, got, 2*time.Second)
	if _, err := p.Publish(ctx, target, "k", textMsg("x"), plugin.MaxDelay+time.Millisecond); !errors.Is(err, amqpdelay.ErrDelayTooLong) {
		t.Errorf("beyond 2^32-1 ms: err = %v, want ErrDelayTooLong", err)
	}
}

// pluginFixture is a topology with the plugin on (see newPluginFixture).
type pluginFixture struct {
	env    *brokertest.Env // the plugin's broker, vhost "/", the fixture's prefix
	spec   delayspec.Spec
	target string
	got    <-chan arrival // deliveries from the ready queue
}

// newPluginFixture declares, on the broker of AMQP_PLUGIN_URL (its default vhost, a unique
// prefix, deleted when t ends), the test ladder with the plugin on, a direct target exchange
// and a ready queue bound to it with key "k", consumed into got.
func newPluginFixture(t *testing.T) pluginFixture {
	t.Helper()
	url := brokertest.PluginURL(t)
	has, err := pluginprobe.Probe(pubCtx(t), dialer(url), "rabbitdelay-test.plugin-probe")
	if err != nil || !has {
		t.Fatalf("AMQP_PLUGIN_URL: pluginprobe.Probe = %v, %v; want true", has, err)
	}
	env := &brokertest.Env{URL: url, VHost: "/", Prefix: "rdt-plugin-" + strings.ReplaceAll(time.Now().Format("150405.000000"), ".", "")}
	target := env.Name("orders")
	spec := testSpec(env, delayspec.Target{Name: target, Type: "direct"})
	spec.Plugin = delayspec.PluginOn
	q := env.Name("ready")
	spec.ReadyQueues = delayspec.ReadyQueues{{Queue: q, Exchange: target, BindingKey: "k"}}
	declareTopologyAt(t, url, spec)
	t.Cleanup(func() { deleteTopologyAt(t, url, spec) })
	return pluginFixture{env: env, spec: spec, target: target, got: consumeQueueURL(t, url, q)}
}

// TestPublisherPluginExchangeDeleted: when the plugin exchange is deleted under a running
// Publisher, the publish that finds it gone (404) is not lost and not reported as of unknown
// outcome: PreferPlugin takes the ladder for it, PluginOnly fails with ErrPluginUnavailable,
// and once `rabbitdelay apply` declares the exchange again the Publisher finds it within about 5 s.
func TestPublisherPluginExchangeDeleted(t *testing.T) {
	f := newPluginFixture(t)
	url, spec, target, got := f.env.URL, f.spec, f.target, f.got
	ctx := pubCtx(t)
	prefer := newPublisherURL(t, url, spec, amqpdelay.Config{Strategy: amqpdelay.PreferPlugin})
	only := newPublisherURL(t, url, spec, amqpdelay.Config{Strategy: amqpdelay.PluginOnly})
	if r, err := prefer.Publish(ctx, target, "k", textMsg("before"), 300*time.Millisecond); err != nil || r.Path != amqpdelay.PathPlugin {
		t.Fatalf("before: %+v, %v; want the plugin path", r, err)
	}
	checkOnTime(t, nextDelivery(t, got, 5*time.Second))

	if err := f.env.Channel(t).ExchangeDelete(spec.Names().PluginExchange(), false, false); err != nil {
		t.Fatalf("delete the plugin exchange: %v", err)
	}

	r, err := prefer.Publish(ctx, target, "k", textMsg("after"), 300*time.Millisecond)
	if err != nil || r.Path != amqpdelay.PathLadder {
		t.Fatalf("PreferPlugin after the delete: %+v, %v; want the ladder path and no error", r, err)
	}
	if prefer.PluginAvailable() {
		t.Errorf("PluginAvailable() = true after a publish found the plugin exchange gone")
	}
	a := nextDelivery(t, got, 5*time.Second)
	checkOnTime(t, a)
	if string(a.d.Body) != "after" {
		t.Errorf("delivery %q, want \"after\"", a.d.Body)
	}
	if _, err := only.Publish(ctx, target, "k", textMsg("only"), 300*time.Millisecond); !errors.Is(err, amqpdelay.ErrPluginUnavailable) ||
		!strings.Contains(err.Error(), "rabbitdelay apply") {
		t.Errorf("PluginOnly after the delete: err = %v, want ErrPluginUnavailable saying to run rabbitdelay apply", err)
	}
	noDelivery(t, got, time.Second)

	declareTopologyAt(t, url, spec)         // `rabbitdelay apply` again
	deadline := time.Now().Add(time.Minute) // bounds a hang
	for {
		r, err := prefer.Publish(ctx, target, "k", textMsg("again"), 300*time.Millisecond)
		if err != nil {
			t.Fatalf("PreferPlugin after the re-apply: %v", err)
		}
		checkOnTime(t, nextDelivery(t, got, 5*time.Second))
		if r.Path == amqpdelay.PathPlugin {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the Publisher did not find the re-declared plugin exchange within a minute (last path %v)", r.Path)
		}
		time.Sleep(time.Second)
	}
	if !prefer.PluginAvailable() {
		t.Errorf("PluginAvailable() = false after the plugin path was taken again")
	}
}

// TestPublisherPluginGoneOtherPathsUntouched: the 404 for a deleted plugin exchange closes the
// channel it came on, failing every publish still waiting for a confirm there. The plugin path
// has a channel of its own, so direct publishes in flight at that moment (on the Publisher's
// one other channel) still get their confirms.
func TestPublisherPluginGoneOtherPathsUntouched(t *testing.T) {
	f := newPluginFixture(t)
	ctx := pubCtx(t)
	p := newPublisherURL(t, f.env.URL, f.spec, amqpdelay.Config{Strategy: amqpdelay.PreferPlugin, Channels: 1})
	go func() {
		for range f.got { // keep the ready queue's consumer flowing
		}
	}()
	c := startCanary(4, func() error {
		_, err := p.Publish(ctx, f.target, "k", textMsg("direct"), 0)
		return err
	})
	time.Sleep(300 * time.Millisecond) // direct publishes in flight
	if err := f.env.Channel(t).ExchangeDelete(f.spec.Names().PluginExchange(), false, false); err != nil {
		t.Fatalf("delete the plugin exchange: %v", err)
	}
	for i := range 3 {
		if r, err := p.Publish(ctx, f.target, "k", textMsg("delayed"), 300*time.Millisecond); err != nil || r.Path != amqpdelay.PathLadder {
			t.Errorf("delayed publish %d after the delete: %+v, %v; want the ladder path and no error", i, r, err)
		}
	}
	time.Sleep(300 * time.Millisecond)
	c.check(t, "the plugin exchange's deletion")
}

// deleteTopologyAt deletes what declareTopologyAt declared (for brokers without a test vhost).
func deleteTopologyAt(t testing.TB, url string, spec delayspec.Spec) {
	conn, err := amqp.DialConfig(url, amqp.Config{Dial: amqp.DefaultDial(10 * time.Second)})
	if err != nil {
		t.Errorf("cleanup: %v", err)
		return
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		t.Errorf("cleanup: %v", err)
		return
	}
	spec = spec.WithDefaults()
	n := spec.Names()
	l, b, _ := spec.LadderOrBuckets()
	var queues []string
	for _, q := range route.Queues(l) {
		queues = append(queues, n.LadderQueue(q.Level, q.Digit))
	}
	for _, bk := range b.List() {
		queues = append(queues, n.BucketQueue(bk.TTL))
	}
	queues = append(queues, n.Parking())
	for _, r := range spec.ReadyQueues {
		queues = append(queues, r.Queue)
	}
	for _, q := range queues {
		_, _ = ch.QueueDelete(q, false, false, false)
	}
	exchanges := []string{n.Dispatch(), n.Unroutable(), n.BucketExchange(), n.PluginExchange()}
	for level := 0; level < l.Levels(); level++ {
		exchanges = append(exchanges, n.LadderExchange(level))
	}
	for _, tg := range spec.Targets {
		exchanges = append(exchanges, tg.Name)
	}
	for _, x := range exchanges {
		_ = ch.ExchangeDelete(x, false, false)
	}
}

// TestApplyPluginExchangeOtherDelayedType: RabbitMQ accepts a redeclare of an
// x-delayed-message exchange whatever its x-delayed-type, so apply reads the existing
// exchange's arguments through the management API and reports the conflict (a plugin
// exchange of another type would route every plugin publish nowhere).
func TestApplyPluginExchangeOtherDelayedType(t *testing.T) {
	f := newPluginFixture(t)
	br := brokertest.Get(t)
	if br.URL != f.env.URL || br.ManagementURL == "" {
		t.Skip("needs the management API of the plugin's broker: run with AMQP_PLUGIN_URL equal to AMQP_URL (scripts/broker with BROKER_PLUGINS_DIR)")
	}
	ctx := pubCtx(t)
	conn := f.env.Dial(t)
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	spec := f.spec
	name := spec.Names().PluginExchange()
	if err := ch.ExchangeDelete(name, false, false); err != nil {
		t.Fatal(err)
	}
	if err := ch.ExchangeDeclare(name, plugin.ExchangeType, true, false, false, false, amqp.Table{"x-delayed-type": "direct"}); err != nil {
		t.Fatalf("declare the plugin exchange with x-delayed-type direct: %v", err)
	}
	m, err := admin.NewManagement(br.ManagementURL, "/")
	if err != nil {
		t.Fatal(err)
	}
	p, err := admin.NewPlan(spec)
	if err != nil {
		t.Fatal(err)
	}
	_, err = admin.Apply(ctx, conn, p, admin.ApplyOptions{Management: m})
	var c *admin.ConflictError
	if !errors.As(err, &c) || c.Name != name || c.Argument != "x-delayed-type" || c.Existing != "direct" || c.Wanted != "headers" {
		t.Fatalf("apply over a plugin exchange of x-delayed-type direct: err = %v; want a ConflictError on %s's x-delayed-type (direct, wanted headers)", err, name)
	}
}

// TestPublisherPluginBackAfterRestart: the plugin exchange is deleted while no publish uses it,
// the broker restarts, and `rabbitdelay apply` declares the exchange again: the reconnected
// Publisher, whose probe missed the exchange, keeps looking for it and takes the plugin path
// again within seconds. It needs the plugin on a broker of its own: set BROKER_PLUGINS_DIR.
func TestPublisherPluginBackAfterRestart(t *testing.T) {
	dir := os.Getenv("BROKER_PLUGINS_DIR")
	if dir == "" {
		t.Skip("needs BROKER_PLUGINS_DIR (a directory with the delayed-message plugin) to start a broker of its own with the plugin; see CONTRIBUTING.md, The delayed-message plugin")
	}
	b := startPrivateBrokerWith(t, dir)
	env := &brokertest.Env{Broker: b.Broker, URL: b.URL, VHost: "/", Prefix: "rdt-pluginback"}
	target := env.Name("orders")
	spec := testSpec(env, delayspec.Target{Name: target, Type: "direct"})
	spec.Plugin = delayspec.PluginOn
	q := env.Name("ready")
	spec.ReadyQueues = delayspec.ReadyQueues{{Queue: q, Exchange: target, BindingKey: "k"}}
	declareTopologyAt(t, b.URL, spec)
	ctx := pubCtx(t)
	p := newPublisherURL(t, b.URL, spec, amqpdelay.Config{Strategy: amqpdelay.PreferPlugin})
	if !p.PluginAvailable() {
		t.Fatal("PluginAvailable() = false on a broker with the plugin exchange")
	}
	if err := env.Channel(t).ExchangeDelete(spec.Names().PluginExchange(), false, false); err != nil {
		t.Fatal(err)
	}
	b.stopApp(t)
	b.startApp(t)
	// After the reconnection the Publisher's probe misses the exchange: the ladder.
	deadline := time.Now().Add(time.Minute)
	for {
		r, err := p.Publish(ctx, target, "k", textMsg("after restart"), 200*time.Millisecond)
		if err == nil && r.Path == amqpdelay.PathLadder {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after the restart: %+v, %v; want the ladder path", r, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	declareTopologyAt(t, b.URL, spec) // `rabbitdelay apply` again
	applied := time.Now()
	for {
		r, err := p.Publish(ctx, target, "k", textMsg("re-applied"), 200*time.Millisecond)
		if err != nil {
			t.Fatalf("after the re-apply: %v", err)
		}
		if r.Path == amqpdelay.PathPlugin {
			t.Logf("plugin path again %v after the re-apply", time.Since(applied).Round(time.Millisecond))
			break
		}
		if time.Since(applied) > time.Minute { // bounds a hang
			t.Fatalf("the Publisher did not find the re-declared plugin exchange within a minute after a restart (PluginAvailable %v)", p.PluginAvailable())
		}
		time.Sleep(500 * time.Millisecond)
	}
}
