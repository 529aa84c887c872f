//go:build integration && bench

package integration

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/delaykit/rabbitdelay/amqpdelay"
	"github.com/delaykit/rabbitdelay/integration/brokertest"
	"github.com/delaykit/rabbitdelay/internal/admin"
	"github.com/delaykit/rabbitdelay/internal/delayspec"
	"github.com/delaykit/rabbitdelay/internal/route"
	"github.com/delaykit/rabbitdelay/ttlbuckets"
)

// delayCase is one way of delaying messages that a benchmark measures: a ladder (unit, radix,
// order, queue type), the buckets, or the plugin. Its topology is declared with admin.Apply,
// except for the experiments (variant != ""), which the benchmark declares itself; messages are
// always published with amqpdelay.Publisher.
type delayCase struct {
	name   string
	ladder ttlbuckets.Ladder
	qtype  delayspec.QueueType
	// buckets are declared too; path is the path every positive delay must take.
	buckets []time.Duration
	path    amqpdelay.Path
	// variant names an experiment that admin.Apply cannot declare (see declareVariant):
	//   "classic2":    classic queues with x-queue-version 2 on every level;
	//   "top-classic": classic (version 2) queues on the top level, qtype on the others.
	variant string
	// readyClassic declares the ready queue as a classic queue (an experiment: where does the
	// drain's limit sit?).
	readyClassic bool
	// ladderShards is delayspec.Spec.Shards (0: one ladder). On a cluster (AMQP_URLS lists its nodes)
	// apply places the shards through a connection per node.
	ladderShards int
}

func ladderOf(unit time.Duration, radix int, order ttlbuckets.Order) ttlbuckets.Ladder {
	return ttlbuckets.Ladder{Unit: unit, Radix: radix, Order: order}.WithDefaults()
}

// defaultLadderCase is the library's default: radix 16, 1 ms, top-split, quorum queues.
func defaultLadderCase(name string) delayCase {
	return delayCase{name: name, ladder: ttlbuckets.Ladder{}.WithDefaults(), qtype: delayspec.Quorum, path: amqpdelay.PathLadder}
}

func ladderCase(name string, unit time.Duration, radix int, order ttlbuckets.Order, qt delayspec.QueueType, variant string) delayCase {
	return delayCase{name: name, ladder: ladderOf(unit, radix, order), qtype: qt, path: amqpdelay.PathLadder, variant: variant}
}

const (
	sf  = ttlbuckets.ShortestFirst
	lf  = ttlbuckets.LongestFirst
	ms1 = time.Millisecond
)

// burstCatalogue is every ladder case BenchmarkBurst knows by name (-burst-cases).
var burstCatalogue = []delayCase{
	ladderCase("shortest", ms1, 16, sf, delayspec.Quorum, ""),
	ladderCase("longest", ms1, 16, lf, delayspec.Quorum, ""),
	ladderCase("top", ms1, 16, ttlbuckets.TopFirst, delayspec.Quorum, ""),
	ladderCase("split", ms1, 16, ttlbuckets.TopSplit, delayspec.Quorum, ""),
	ladderCase("classic-shortest", ms1, 16, sf, delayspec.Classic, ""),
	ladderCase("classic-longest", ms1, 16, lf, delayspec.Classic, ""),
	ladderCase("classic2-shortest", ms1, 16, sf, delayspec.Classic, "classic2"),
	ladderCase("topclassic-shortest", ms1, 16, sf, delayspec.Quorum, "top-classic"),
	ladderCase("r32-shortest", ms1, 32, sf, delayspec.Quorum, ""),
	ladderCase("r64-shortest", ms1, 64, sf, delayspec.Quorum, ""),
	ladderCase("r64-longest", ms1, 64, lf, delayspec.Quorum, ""),
	ladderCase("r4-shortest", ms1, 4, sf, delayspec.Quorum, ""),
	ladderCase("u10ms-shortest", 10*ms1, 16, sf, delayspec.Quorum, ""),
	ladderCase("u10ms-longest", 10*ms1, 16, lf, delayspec.Quorum, ""),
	ladderCase("amo-shortest", ms1, 16, sf, delayspec.Quorum, "amo"),
	ladderCase("shard3x4-shortest", ms1, 16, sf, delayspec.Quorum, "shard3x4"),
	ladderCase("shard3x8-shortest", ms1, 16, sf, delayspec.Quorum, "shard3x8"),
	// The radix-16 1 ms ladder, shortest-first, in three shards (AMQPDELAY_SHARDS=3), spread over a cluster's nodes
	// when AMQP_URLS lists them: what the shards give a burst's last hop.
	withShards(ladderCase("shards3-shortest", ms1, 16, sf, delayspec.Quorum, ""), 3),
	// The radix-16 1 ms ladder, shortest-first, cut to the levels a 1-10 s delay uses (4 instead of 8): what the
	// levels a message only passes through (digit 0, exchange to exchange) cost.
	withMax(ladderCase("max65s-shortest", ms1, 16, sf, delayspec.Quorum, ""), 65535*ms1),
	// One hop: what a burst's last hop can do on this broker (see declareOneHop).
	{name: "onehop", variant: "onehop"},
	// One hop whose messages already carry 5 x-death entries, as a ladder message does on its
	// last hop: what those headers cost the dead-lettering.
	{name: "onehop-xdeath", variant: "onehop-xdeath"},
	// The bucket path itself, its TTL taken from each message (see declareBucketBurst): one
	// hop through the bucket exchange, a bucket queue and the dispatch exchange.
	{name: "bucket", variant: "bucket-burst"},
	withReadyClassic(ladderCase("shortest-readyclassic", ms1, 16, sf, delayspec.Quorum, "")),
	withReadyClassic(ladderCase("classic2-shortest-readyclassic", ms1, 16, sf, delayspec.Classic, "classic2")),
}

// benchShardHeader spreads a sharded level's messages over its shards (variant "shardLxS").
const benchShardHeader = "bench-shard"

// shards is S of a "shardLxS" variant, else 1.
func (c delayCase) shards() int {
	var lv, s int
	if _, err := fmt.Sscanf(c.variant, "shard%dx%d", &lv, &s); err == nil && s > 1 {
		return s
	}
	return 1
}

func withReadyClassic(c delayCase) delayCase { c.readyClassic = true; return c }

func withShards(c delayCase, n int) delayCase { c.ladderShards = n; return c }

func withMax(c delayCase, max time.Duration) delayCase {
	c.ladder.Max = max
	c.ladder = c.ladder.WithDefaults()
	return c
}

func burstCaseNames() []string {
	var names []string
	for _, c := range burstCatalogue {
		names = append(names, c.name)
	}
	return names
}

func casesFromFlag(tb testing.TB, list string) []delayCase {
	var out []delayCase
	for _, name := range strings.Split(list, ",") {
		if name = strings.TrimSpace(name); name == "" {
			continue
		}
		found := false
		for _, c := range burstCatalogue {
			if c.name == name {
				out, found = append(out, c), true
			}
		}
		if !found {
			tb.Fatalf("unknown case %q; known: %s", name, strings.Join(burstCaseNames(), ", "))
		}
	}
	return out
}

// setup is a declared case: where to consume and how to publish.
type setup struct {
	broker  *brokertest.Broker // nil for a plugin broker other than AMQP_URL's
	vhost   string
	url     string // AMQP URL of the case's vhost
	ready   string // the ready queue to consume
	publish publishFunc
	// cfg is the configuration of the Publisher behind publish (zero for raw and foreign-plugin
	// cases): a benchmark that needs a Publisher with other options starts its own.
	cfg amqpdelay.Config
}

// queues lists the queues of the case's vhost that hold the most messages (for traces).
func (s setup) queues(k int) string {
	if s.broker == nil {
		return " (no management API)"
	}
	return topQueues(s.broker, s.vhost, k)
}

// declare gives case c a vhost of its own with c's delay topology, the target topic exchange
// benchTarget and a ready quorum queue benchReady bound to it with "#" (quorum in every case, so
// the cases differ only in their delay queues), and a Publisher (closed when tb ends) whose
// publishes must take c.path.
func declare(tb testing.TB, c delayCase) setup {
	tb.Helper()
	if c.variant == "onehop" || c.variant == "onehop-xdeath" {
		return declareOneHop(tb, c.variant == "onehop-xdeath")
	}
	if c.variant == "bucket-burst" {
		return declareBucketBurst(tb)
	}
	env := brokertest.NewEnv(tb)
	if env.VHost == "/" {
		tb.Skip("the benchmarks need the management API (AMQP_MANAGEMENT_URL): every case works in a vhost of its own")
	}
	spec := delayspec.Spec{
		Prefix:    env.Prefix,
		Targets:   delayspec.Targets{{Name: benchTarget, Type: "topic"}},
		Buckets:   c.buckets,
		Ladder:    c.ladder,
		Plugin:    delayspec.PluginOff,
		QueueType: c.qtype,
		Shards:    c.ladderShards,
	}
	// Declaring hundreds of quorum queues (radix 64: 378) takes minutes on a busy 2-core machine.
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	conn := env.Dial(tb)
	if c.variant != "" {
		declareVariant(tb, conn, spec, c.variant)
	} else {
		plan, err := admin.NewPlan(spec)
		if err != nil {
			tb.Fatalf("plan: %v", err)
		}
		var nodes []*amqp.Connection
		if c.ladderShards > 1 {
			for _, u := range strings.Split(os.Getenv("AMQP_URLS"), ",") {
				if u = strings.TrimSpace(u); u == "" {
					continue
				}
				nc, err := amqp.DialConfig(brokertest.WithVHost(u, env.VHost), amqp.Config{Dial: amqp.DefaultDial(30 * time.Second)})
				if err != nil {
					tb.Fatalf("dial a node to place the shards: %v", err)
				}
				defer nc.Close()
				nodes = append(nodes, nc)
			}
		}
		if _, err := admin.Apply(ctx, conn, plan, admin.ApplyOptions{Nodes: nodes}); err != nil {
			tb.Fatalf("apply: %v", err)
		}
	}
	if c.readyClassic {
		declareReadyClassic(tb, conn, benchTarget, benchReady)
	} else {
		declareReady(tb, conn, benchTarget, benchReady)
	}
	strategy := amqpdelay.LadderOnly
	if c.path == amqpdelay.PathBucket {
		strategy = amqpdelay.Auto
	}
	pctx, pcancel := context.WithTimeout(context.Background(), time.Minute)
	defer pcancel()
	cfg := amqpdelay.Config{URL: env.URL, Prefix: spec.Prefix}
	pub := newBenchPublisher(tb, pctx, cfg, strategy, c.path, c.shards())
	return setup{broker: env.Broker, vhost: env.VHost, url: env.URL, ready: benchReady, publish: pub, cfg: cfg}
}

// declareReady declares queue (quorum) and binds it to exchange with "#".
func declareReady(tb testing.TB, conn *amqp.Connection, exchange, queue string) {
	tb.Helper()
	ch, err := conn.Channel()
	if err != nil {
		tb.Fatalf("channel: %v", err)
	}
	defer ch.Close()
	if _, err := ch.QueueDeclare(queue, true, false, false, false, amqp.Table{"x-queue-type": "quorum"}); err != nil {
		tb.Fatalf("declare ready queue %s: %v", queue, err)
	}
	if err := ch.QueueBind(queue, "#", exchange, false, nil); err != nil {
		tb.Fatalf("bind ready queue %s: %v", queue, err)
	}
}

// declareReadyClassic declares queue as a classic queue (version 2) bound to exchange with "#".
func declareReadyClassic(tb testing.TB, conn *amqp.Connection, exchange, queue string) {
	tb.Helper()
	ch, err := conn.Channel()
	if err != nil {
		tb.Fatalf("channel: %v", err)
	}
	defer ch.Close()
	if _, err := ch.QueueDeclare(queue, true, false, false, false, amqp.Table{"x-queue-version": int64(2)}); err != nil {
		tb.Fatalf("declare ready queue %s: %v", queue, err)
	}
	if err := ch.QueueBind(queue, "#", exchange, false, nil); err != nil {
		tb.Fatalf("bind ready queue %s: %v", queue, err)
	}
}

// newBenchPublisher starts a Publisher for cfg and returns a publishFunc that sends message i through
// it to benchTarget and checks that it took path want (delays <= 0: the direct path).
func newBenchPublisher(tb testing.TB, ctx context.Context, cfg amqpdelay.Config, strategy amqpdelay.Strategy, want amqpdelay.Path, shards int) publishFunc {
	tb.Helper()
	cfg.Strategy = strategy
	p, err := amqpdelay.NewPublisher(ctx, cfg)
	if err != nil {
		tb.Fatalf("publisher: %v", err)
	}
	tb.Cleanup(func() { _ = p.Close() })
	return func(ctx context.Context, _, i int, delay time.Duration) (time.Time, error) {
		msg := benchPublishing(i)
		if shards > 1 {
			msg.Headers = amqp.Table{benchShardHeader: int64(i % shards)}
		}
		r, err := p.Publish(ctx, benchTarget, "bench.key", msg, delay)
		if err != nil {
			return time.Time{}, err
		}
		if w := want; delay <= 0 {
			w = amqpdelay.PathDirect
			if r.Path != w {
				return r.Due, fmt.Errorf("published by the %v path, want %v", r.Path, w)
			}
		} else if r.Path != want {
			return r.Due, fmt.Errorf("delay %v published by the %v path, want %v", delay, r.Path, want)
		}
		return r.Due, nil
	}
}

// declareVariant declares spec's topology with amqp091 directly, following topology's naming
// rule and bindings, but with queue arguments admin.Apply does not offer: the experiments of
// BenchmarkBurst (see delayCase.variant). The Publisher works with it unchanged: it only needs
// the dispatch exchange and the entry exchanges to exist.
func declareVariant(tb testing.TB, conn *amqp.Connection, spec delayspec.Spec, variant string) {
	tb.Helper()
	ch, err := conn.Channel()
	if err != nil {
		tb.Fatalf("channel: %v", err)
	}
	defer ch.Close()
	names := spec.Names()
	must := func(what string, err error) {
		tb.Helper()
		if err != nil {
			tb.Fatalf("declare %s: %v", what, err)
		}
	}
	queueArgs := func(classic bool, ttl int64, dlx string) amqp.Table {
		if !classic && variant == "amo" {
			return amqp.Table{"x-queue-type": "quorum", "x-message-ttl": ttl, "x-dead-letter-exchange": dlx,
				"x-dead-letter-strategy": "at-most-once"}
		}
		if !classic {
			return amqp.Table{"x-queue-type": "quorum", "x-message-ttl": ttl, "x-dead-letter-exchange": dlx,
				"x-dead-letter-strategy": "at-least-once", "x-overflow": "reject-publish"}
		}
		return amqp.Table{"x-queue-version": int64(2), "x-message-ttl": ttl, "x-dead-letter-exchange": dlx}
	}
	must(names.Unroutable(), ch.ExchangeDeclare(names.Unroutable(), "fanout", true, false, false, false, nil))
	_, err = ch.QueueDeclare(names.Parking(), true, false, false, false, amqp.Table{"x-queue-type": "quorum"})
	must(names.Parking(), err)
	must(names.Parking(), ch.QueueBind(names.Parking(), "", names.Unroutable(), false, nil))
	must(names.Dispatch(), ch.ExchangeDeclare(names.Dispatch(), "headers", true, false, false, false, amqp.Table{"alternate-exchange": names.Unroutable()}))
	for _, t := range spec.Targets {
		must(t.Name, ch.ExchangeDeclare(t.Name, t.Type, true, false, false, false, nil))
		must("dispatch binding", ch.ExchangeBind(t.Name, "", names.Dispatch(), false, amqp.Table{"x-match": "all", route.TargetHeader: t.Name}))
	}
	l := spec.Ladder.WithDefaults()
	next := func(level int) string {
		if n, ok := route.Next(l, level); ok {
			return names.LadderExchange(n)
		}
		return names.Dispatch()
	}
	levels := l.Levels()
	for level := range levels {
		must(names.LadderExchange(level), ch.ExchangeDeclare(names.LadderExchange(level), "headers", true, false, false, false, nil))
	}
	_, err = ch.QueueDeclare(names.SpecStream(), true, false, false, false, delayspec.SpecStreamArgs())
	must(names.SpecStream(), err)
	for level := range levels {
		must("pass-through", ch.ExchangeBind(next(level), "", names.LadderExchange(level), false,
			amqp.Table{"x-match": "all", route.DigitHeader(level): int64(0)}))
	}
	for _, q := range route.Queues(l) {
		var classic bool
		shards := 1
		switch {
		case variant == "classic2":
			classic = true
		case variant == "top-classic":
			classic = q.Level == levels-1 || spec.QueueType == delayspec.Classic
		case variant == "amo":
		case strings.HasPrefix(variant, "shard"):
			// "shardLxS": the queues of level L sharded S ways on the benchShardHeader.
			var lv int
			if _, err := fmt.Sscanf(variant, "shard%dx%d", &lv, &shards); err != nil {
				tb.Fatalf("variant %q: %v", variant, err)
			}
			if q.Level != lv {
				shards = 1
			}
		default:
			tb.Fatalf("unknown variant %q", variant)
		}
		for k := range shards {
			name := names.LadderQueue(q.Level, q.Digit)
			args := amqp.Table{"x-match": "all", route.DigitHeader(q.Level): int64(q.Digit)}
			if shards > 1 {
				name += fmt.Sprintf(".s%d", k)
				args[benchShardHeader] = int64(k)
			}
			_, err := ch.QueueDeclare(name, true, false, false, false, queueArgs(classic, q.TTL, next(q.Level)))
			must(name, err)
			must(name, ch.QueueBind(name, "", names.LadderExchange(q.Level), false, args))
		}
	}
	if len(spec.Buckets) > 0 {
		tb.Fatalf("declareVariant does not declare buckets")
	}
	must("the spec record", delayspec.WriteRecord(context.Background(), conn, spec))
}

// pluginSetup returns what declares a plugin case on the broker of AMQP_PLUGIN_URL, or nil
// (with a log line) when it is unset. When that is the broker of AMQP_URL (scripts/broker with
// BROKER_PLUGINS_DIR), the case gets a vhost of its own like every other case, and the broker's
// CPU is measured; on another broker its default vhost is used with a unique prefix, a target
// exchange and ready queue of the case's own, all deleted when the case ends.
func pluginSetup(b *testing.B) func(testing.TB) setup {
	b.Helper()
	u := os.Getenv("AMQP_PLUGIN_URL")
	if u == "" {
		b.Log("plugin case skipped: AMQP_PLUGIN_URL is not set")
		return nil
	}
	return func(tb testing.TB) setup {
		tb.Helper()
		prefix := fmt.Sprintf("rdbench-%d", time.Now().UnixNano())
		target, ready := prefix+".target", prefix+".ready"
		var br *brokertest.Broker
		vhost, u := "/", u
		if os.Getenv("AMQP_URL") == u && brokertest.Get(tb).ManagementURL != "" {
			env := brokertest.NewEnv(tb)
			br, vhost, u = env.Broker, env.VHost, env.URL
			target, ready = env.Name("target"), env.Name("ready")
			prefix = env.Prefix
		}
		spec := delayspec.Spec{
			Prefix:    prefix,
			Targets:   delayspec.Targets{{Name: target, Type: "topic"}},
			Plugin:    delayspec.PluginOn,
			QueueType: delayspec.Quorum,
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		conn, err := amqp.DialConfig(u, amqp.Config{Dial: amqp.DefaultDial(10 * time.Second)})
		if err != nil {
			tb.Fatalf("dial AMQP_PLUGIN_URL: %v", err)
		}
		tb.Cleanup(func() { _ = conn.Close() })
		plan, err := admin.NewPlan(spec)
		if err != nil {
			tb.Fatalf("plan: %v", err)
		}
		if _, err := admin.Apply(ctx, conn, plan, admin.ApplyOptions{}); err != nil {
			tb.Fatalf("apply (plugin): %v", err)
		}
		declareReady(tb, conn, target, ready)
		tb.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			ch, err := conn.Channel()
			if err == nil {
				_, _ = ch.QueueDelete(ready, false, false, false)
				_ = ch.ExchangeDelete(target, false, false)
				_ = ch.Close()
			}
			if _, err := admin.Teardown(ctx, conn, plan, admin.TeardownOptions{Force: true}); err != nil && !errors.Is(err, context.Canceled) {
				tb.Logf("teardown of the plugin case: %v", err)
			}
		})
		p, err := amqpdelay.NewPublisher(ctx, amqpdelay.Config{URL: u, Prefix: spec.Prefix, Strategy: amqpdelay.PluginOnly})
		if err != nil {
			tb.Fatalf("publisher (plugin): %v", err)
		}
		tb.Cleanup(func() { _ = p.Close() })
		pub := func(ctx context.Context, _, i int, delay time.Duration) (time.Time, error) {
			r, err := p.Publish(ctx, target, "bench.key", benchPublishing(i), delay)
			if err == nil && delay > 0 && r.Path != amqpdelay.PathPlugin {
				err = fmt.Errorf("delay %v published by the %v path, want plugin", delay, r.Path)
			}
			return r.Due, err
		}
		return setup{broker: br, vhost: vhost, url: u, ready: ready, publish: pub}
	}
}

func (c delayCase) String() string {
	return fmt.Sprintf("%s (unit %v, radix %d, %v, %s%s)", c.name, c.ladder.Unit, c.ladder.Radix, c.ladder.Order, c.qtype,
		map[bool]string{true: ", " + c.variant}[c.variant != ""])
}

// declareOneHop is BenchmarkBurst's case "onehop", the one-hop limit of a burst measured on the
// same broker: the bucket path's mechanism (one quorum queue with at-least-once dead-lettering
// to the target exchange, overflow reject-publish) holding the whole burst, each message
// published straight into that queue with a per-message expiration (the Expiration property,
// milliseconds) that ends at its due time. A bucket cannot hold a burst published over time (its
// TTL is the queue's), so this queue stands in for it; it dead-letters every message once, as a
// ladder's last hop does. Messages leave a quorum queue from its head only, so within the 1 s
// window a message may wait behind an earlier-published one due later in that window. With
// xdeath, every message is published with 5 x-death entries like those a ladder message has
// gathered by its last hop (queue names of the default ladder's length, reason expired).
func declareOneHop(tb testing.TB, xdeath bool) setup {
	tb.Helper()
	env := brokertest.NewEnv(tb)
	if env.VHost == "/" {
		tb.Skip("the benchmarks need the management API (AMQP_MANAGEMENT_URL): every case works in a vhost of its own")
	}
	chs := channels(tb, env.URL)
	if err := chs[0].ExchangeDeclare(benchTarget, "topic", true, false, false, false, nil); err != nil {
		tb.Fatalf("declare %s: %v", benchTarget, err)
	}
	declareReady(tb, env.Dial(tb), benchTarget, benchReady)
	q := env.Name("onehop")
	if _, err := chs[0].QueueDeclare(q, true, false, false, false, amqp.Table{"x-queue-type": "quorum",
		"x-dead-letter-exchange": benchTarget, "x-dead-letter-routing-key": "bench.key",
		"x-dead-letter-strategy": "at-least-once", "x-overflow": "reject-publish"}); err != nil {
		tb.Fatalf("declare %s: %v", q, err)
	}
	pub := func(ctx context.Context, w, i int, delay time.Duration) (time.Time, error) {
		now := time.Now()
		m := benchPublishing(i)
		if xdeath {
			m.Headers = amqp.Table{"x-death": ladderDeaths(5)}
		}
		if ms := delay.Milliseconds(); ms > 0 {
			m.Expiration = strconv.FormatInt(ms, 10)
		} else {
			m.Expiration = "0"
		}
		return now.Add(delay), publishConfirmed(ctx, chs[w], "", q, m)
	}
	return setup{broker: env.Broker, vhost: env.VHost, url: env.URL, ready: benchReady, publish: pub}
}

// declareBucketBurst is BenchmarkBurst's case "bucket": the bucket path as rabbitdelay apply builds it
// (the default topology with a 1 h bucket: bucket exchange, bucket quorum queue with
// at-least-once dead-lettering into the dispatch exchange, the dispatch exchange's binding to the
// target), each message published as the Publisher publishes a bucket message (its headers:
// bucket TTL, target, due time, copy tag; a UUID-long message id; to the bucket exchange with the
// routing key bench.key) plus a per-message expiration (Expiration, milliseconds) that ends at its
// due time. A bucket's TTL is its queue's, so a burst published over time would not fall due in
// one second; the per-message expiration, shorter than the queue's 1 h, decides instead (RabbitMQ
// expires a message at the lower of the two), and everything else is the bucket path's. Unlike
// "onehop", whose queue dead-letters straight to the target, its messages are routed by headers
// twice, as every bucket and ladder message is. The topology and ready queue are declare's for a
// 1 h bucket.
func declareBucketBurst(tb testing.TB) setup {
	tb.Helper()
	s := declare(tb, delayCase{name: "bucket-1h", ladder: ttlbuckets.Ladder{}.WithDefaults(), qtype: delayspec.Quorum,
		buckets: []time.Duration{time.Hour}, path: amqpdelay.PathBucket})
	chs := channels(tb, s.url)
	exchange := delayspec.Names{Prefix: s.cfg.Prefix}.BucketExchange()
	ttl := time.Hour.Milliseconds()
	s.publish = func(ctx context.Context, w, i int, delay time.Duration) (time.Time, error) {
		now := time.Now()
		due := now.Add(delay)
		m := benchPublishing(i)
		m.MessageId = fmt.Sprintf("%08x-0000-4000-8000-%012x", i, i)
		m.Headers = amqp.Table{route.BucketHeader: ttl, route.TargetHeader: benchTarget,
			route.DueHeader: due.UnixMilli(), amqpdelay.CopyHeader: fmt.Sprintf("%016x", i)}
		m.Expiration = strconv.FormatInt(max(0, (delay+time.Millisecond-1).Milliseconds()), 10) // never early
		return due, publishConfirmed(ctx, chs[w], exchange, "bench.key", m)
	}
	s.cfg = amqpdelay.Config{} // publish is raw amqp091-go, not the Publisher declare started
	return s
}

// ladderDeaths returns n x-death entries shaped like those RabbitMQ adds at each hop of the
// default ladder (queue rabbitdelay.ladder.LL.DD, reason expired, exchange, routing key,
// count 1, time, original-expiration absent: the ladder's TTL is the queue's).
func ladderDeaths(n int) []any {
	out := make([]any, n)
	for k := range n {
		out[k] = amqp.Table{
			"count":        int64(1),
			"reason":       "expired",
			"queue":        fmt.Sprintf("rabbitdelay.ladder.%02d.%02d", k, 1+k),
			"time":         time.Now().Truncate(time.Second),
			"exchange":     fmt.Sprintf("rabbitdelay.ladder.%02d", k),
			"routing-keys": []any{"bench.key"},
		}
	}
	return out
}
