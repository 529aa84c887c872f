package admin

import (
	"encoding/json"
	"errors"
	"regexp"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/delaykit/rabbitdelay/internal/delayspec"
	"github.com/delaykit/rabbitdelay/internal/laddertest"
	"github.com/delaykit/rabbitdelay/internal/route"
	"github.com/delaykit/rabbitdelay/ttlbuckets"
)

func mustPlan(t testing.TB, s delayspec.Spec) *Plan {
	t.Helper()
	p, err := NewPlan(s)
	if err != nil {
		t.Fatalf("Plan(%+v): %v", s, err)
	}
	return p
}

func countRole[T any](xs []T, role func(T) Role, r Role) int {
	n := 0
	for _, x := range xs {
		if role(x) == r {
			n++
		}
	}
	return n
}

func TestPlanDefaultCounts(t *testing.T) {
	p := mustPlan(t, delayspec.Spec{Targets: delayspec.Targets{{Name: "orders"}}})
	exRole := func(e Exchange) Role { return e.Role }
	qRole := func(q Queue) Role { return q.Role }
	bRole := func(b Binding) Role { return b.Role }
	checks := []struct {
		what      string
		got, want int
	}{
		{"ladder exchanges (8 levels, the last-hop exchanges of levels 0-6, an entry exchange per ladder, last-hop and first-hop queue)", countRole(p.Exchanges, exRole, RoleLadder), 8 + 7 + 225 + 105},
		{"ladder queues (and last-hop queues on levels 0-6, first-hop queues on levels 1-7: the default order is top-split)", countRole(p.Queues, qRole, RoleLadder), 120 + 105 + 105},
		{"bucket queues", countRole(p.Queues, qRole, RoleBucket), 0},
		{"bucket exchanges", countRole(p.Exchanges, exRole, RoleBucket), 0},
		{"plugin exchanges (auto)", countRole(p.Exchanges, exRole, RolePlugin), 1},
		{"exchanges (ladder, unroutable, due-unroutable, dispatch, plugin, retry)", len(p.Exchanges), 8 + 7 + 225 + 105 + 3 + 1 + 1},
		{"queues (parking, revocation and spec streams, ladder)", len(p.Queues), 123 + 105 + 105},
		{"ladder bindings (digits, pass-through, to the last-hop exchanges, last-hop queues, entry exchanges)", countRole(p.Bindings, bRole, RoleLadder), 120 + 8 + 7 + 105 + 225 + 105},
		{"dispatch bindings", countRole(p.Bindings, bRole, RoleDispatch), 1},
		{"unroutable bindings (parking, and per target due-unroutable -> parking)", countRole(p.Bindings, bRole, RoleUnroutable), 2},
		{"retry bindings (D -> retry; no ready queue)", countRole(p.Bindings, bRole, RoleRetry), 1},
		{"bindings", len(p.Bindings), 240 + 225 + 105 + 1 + 2 + 1 + 1},
		{"policies", len(p.Policies), 3},
		{"existing", len(p.Existing), 1},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("%s: %d, want %d", c.what, c.got, c.want)
		}
	}
	d, ok := p.Exchange("rabbitdelay.dispatch")
	if !ok || d.Type != amqp.ExchangeHeaders || d.Args["alternate-exchange"] != "rabbitdelay.unroutable" {
		t.Errorf("dispatch exchange = %+v, want headers with alternate-exchange rabbitdelay.unroutable", d)
	}
	if u, ok := p.Exchange("rabbitdelay.unroutable"); !ok || u.Type != amqp.ExchangeFanout {
		t.Errorf("unroutable exchange = %+v, want fanout", u)
	}
	if pl, ok := p.Exchange("rabbitdelay.plugin"); !ok || pl.Type != "x-delayed-message" || pl.Args["x-delayed-type"] != "headers" {
		t.Errorf("plugin exchange = %+v", pl)
	}
	if p.Existing[0] != "orders" {
		t.Errorf("Existing = %v, want [orders]", p.Existing)
	}
}

// TestPlanQueuesFromTTLBuckets checks that every delay queue's TTL is exactly what ttlbuckets
// computes and that every queue dead-letters to the exchange of route.Next (or D), for every
// hop order, quorum and classic; the top-first and top-split orders' first-hop queues (every
// digit of every level above 0, each with its entry exchange) have the TTL of their level's
// queue and dead-letter into level 0's exchange.
func TestPlanQueuesFromTTLBuckets(t *testing.T) {
	for _, order := range laddertest.Orders {
		for _, qt := range []delayspec.QueueType{delayspec.Quorum, delayspec.Classic} {
			t.Run(order.String()+"/"+string(qt), func(t *testing.T) {
				spec := delayspec.Spec{Targets: delayspec.Targets{{Name: "a"}, {Name: "b", Type: "topic"}}, Buckets: delayspec.Delays{30 * time.Second, time.Hour},
					Ladder: ttlbuckets.Ladder{Radix: 8, Order: order}, QueueType: qt, Plugin: delayspec.PluginOff}
				p := mustPlan(t, spec)
				l := p.Ladder
				n := p.Names
				b, _ := ttlbuckets.NewBuckets(spec.Buckets...)
				want := route.DelayQueues(l, b)
				var got []Queue
				firstHop := 0
				for _, q := range p.DelayQueues() {
					if q.FirstHop {
						firstHop++
						byName := n.LadderQueue(q.Level, q.Digit)
						base, ok := p.Queue(byName)
						x, hasEntry := p.Exchange(n.LadderEntryExchange(q.Name))
						if !ok || q.Level == 0 || q.Name != byName+".first" || q.TTL != base.TTL || q.DeadLetterExchange != n.LadderExchange(0) ||
							q.Args["x-dead-letter-exchange"] != n.LadderExchange(0) || q.Args["x-message-ttl"] != base.Args["x-message-ttl"] ||
							len(q.Args) != len(base.Args) || !hasEntry || x.Type != amqp.ExchangeFanout {
							t.Errorf("first-hop queue %+v (entry exchange %v), want %s's TTL dead-lettering into %s, with a fanout entry exchange", q, hasEntry, byName, n.LadderExchange(0))
						}
						continue
					}
					if q.LastHop {
						// Checked below: one per ladder queue of a level that does not end in D.
						byName := n.LadderQueue(q.Level, q.Digit)
						base, ok := p.Queue(byName)
						if _, more := route.Next(l, q.Level); !ok || !more || q.Name != byName+".last" || q.TTL != base.TTL ||
							q.DeadLetterExchange != n.Dispatch() || q.Args["x-dead-letter-exchange"] != n.Dispatch() ||
							q.Args["x-message-ttl"] != base.Args["x-message-ttl"] || len(q.Args) != len(base.Args) {
							t.Errorf("last-hop queue %+v, want %s's TTL dead-lettering into %s", q, byName, n.Dispatch())
						}
						continue
					}
					got = append(got, q)
				}
				wantFirst := 0
				if order == ttlbuckets.TopFirst || order == ttlbuckets.TopSplit {
					wantFirst = (l.Levels() - 1) * (l.Radix - 1)
				}
				if firstHop != wantFirst {
					t.Errorf("%d first-hop queues, want %d", firstHop, wantFirst)
				}
				lastHop := len(p.DelayQueues()) - len(got) - firstHop
				if want := (l.Levels() - 1) * (l.Radix - 1); lastHop != want {
					t.Errorf("%d last-hop queues, want %d", lastHop, want)
				}
				if len(got) != len(want) {
					t.Fatalf("%d delay queues, want %d", len(got), len(want))
				}
				byName := map[string]Queue{}
				for _, q := range got {
					byName[q.Name] = q
				}
				for _, w := range want {
					var name, dlx string
					if w.Kind == route.LadderKind {
						name = n.LadderQueue(w.Level, w.Digit)
						dlx = n.Dispatch()
						if next, ok := route.Next(l, w.Level); ok {
							dlx = n.LadderExchange(next)
						}
					} else {
						name, dlx = n.BucketQueue(w.TTL), n.Dispatch()
					}
					q, ok := byName[name]
					if !ok {
						t.Fatalf("queue %s missing", name)
					}
					if q.TTL != w.TTL || q.Args["x-message-ttl"] != w.TTL {
						t.Errorf("%s: TTL %d / arg %v, want %d (int64)", name, q.TTL, q.Args["x-message-ttl"], w.TTL)
					}
					if q.DeadLetterExchange != dlx || q.Args["x-dead-letter-exchange"] != dlx {
						t.Errorf("%s: dead-letters to %q / %v, want %q", name, q.DeadLetterExchange, q.Args["x-dead-letter-exchange"], dlx)
					}
					if _, has := q.Args["x-expires"]; has {
						t.Errorf("%s has x-expires", name)
					}
					if _, has := q.Args["x-dead-letter-routing-key"]; has {
						t.Errorf("%s has a dead-letter routing key: the message must keep its own", name)
					}
					if qt == delayspec.Quorum {
						if q.Args["x-queue-type"] != "quorum" || q.Args["x-dead-letter-strategy"] != "at-least-once" || q.Args["x-overflow"] != "reject-publish" {
							t.Errorf("%s: quorum args %v", name, q.Args)
						}
					} else if len(q.Args) != 3 || q.Args["x-queue-type"] != "classic" {
						t.Errorf("%s: classic args %v, want only the type, TTL and DLX", name, q.Args)
					}
				}
				// Each level: one binding per digit with an int64 header value, and the
				// pass-through for digit 0 to the same place the queues dead-letter to.
				for level := range l.Levels() {
					h := route.DigitHeader(level)
					ex := n.LadderExchange(level)
					next := n.Dispatch()
					if nl, ok := route.Next(l, level); ok {
						next = n.LadderExchange(nl)
					}
					// A level that does not end in D also binds its last-hop exchange on its level
					// in the last-level header, and that exchange binds digit + radix to the
					// level's last-hop queues.
					var digits []int64
					pass, toLast, lastHops, wantLastHops := 0, 0, 0, 0
					lx := n.LadderLastHopExchangeShard(level, 0)
					if _, more := route.Next(l, level); more {
						wantLastHops = l.Radix - 1
					}
					for _, bd := range p.Bindings {
						switch bd.Source {
						case ex:
						case lx:
							v, ok := bd.Args[h].(int64)
							if !ok || bd.Args["x-match"] != "all" || len(bd.Args) != 2 {
								t.Errorf("binding %s: args %v, want x-match all and int64 %s", bd, bd.Args, h)
							}
							lastHops++
							if d := int(v) - l.Radix; d < 1 || bd.Destination != n.LadderLastHopQueueShard(level, d, 0) || route.LastHopValue(l, d) != v {
								t.Errorf("binding %s: value %d goes to the wrong queue", bd, v)
							}
							continue
						default:
							continue
						}
						if bd.Destination == lx {
							toLast++
							if bd.DestinationType != DestExchange || bd.Args["x-match"] != "all" || bd.Args[route.LastLevelHeader] != int64(level) || len(bd.Args) != 2 {
								t.Errorf("binding %s: want -> %s on %s = %d", bd, lx, route.LastLevelHeader, level)
							}
							continue
						}
						v, ok := bd.Args[h].(int64)
						if !ok || bd.Args["x-match"] != "all" || len(bd.Args) != 2 {
							t.Errorf("binding %s: args %v, want x-match all and int64 %s", bd, bd.Args, h)
						}
						switch {
						case bd.DestinationType == DestExchange:
							pass++
							if bd.Destination != next || v != 0 {
								t.Errorf("pass-through %s: want -> %s on digit 0", bd, next)
							}
						default:
							digits = append(digits, v)
							if bd.Destination != n.LadderQueue(level, int(v)) {
								t.Errorf("binding %s: digit %d goes to the wrong queue", bd, v)
							}
						}
					}
					if wantToLast := min(wantLastHops, 1); pass != 1 || len(digits) != l.Radix-1 || lastHops != wantLastHops || toLast != wantToLast {
						t.Errorf("level %d: %d pass-through, %d digit, %d to the last-hop exchange, %d last-hop bindings; want 1, %d, %d and %d",
							level, pass, len(digits), toLast, lastHops, l.Radix-1, wantToLast, wantLastHops)
					}
				}
				for _, bd := range p.Bindings {
					if bd.Role == RoleBucket {
						ttl, ok := bd.Args[route.BucketHeader].(int64)
						if !ok || bd.Destination != n.BucketQueue(ttl) {
							t.Errorf("bucket binding %s", bd)
						}
					}
				}
			})
		}
	}
}

// TestPlanDeclarationOrder checks the dependency-safe order: every binding's downstream
// (the exchange its queue dead-letters to, or its destination exchange) has all its own
// bindings in an earlier tier, and D's own bindings come first.
func TestPlanDeclarationOrder(t *testing.T) {
	for _, order := range []ttlbuckets.Order{ttlbuckets.ShortestFirst, ttlbuckets.LongestFirst} {
		p := mustPlan(t, delayspec.Spec{Targets: delayspec.Targets{{Name: "x", Type: "direct"}}, Buckets: delayspec.Delays{time.Second}, Ladder: ttlbuckets.Ladder{Order: order},
			ReadyQueues: delayspec.ReadyQueues{{Queue: "rq", Exchange: "x", BindingKey: "k"}}})
		tierOfSource := map[string]int{}
		for i, b := range p.Bindings {
			if i > 0 && b.Tier < p.Bindings[i-1].Tier {
				t.Fatalf("%s: bindings not by ascending tier at %d", order, i)
			}
			if t0, ok := tierOfSource[b.Source]; !ok || b.Tier > t0 {
				tierOfSource[b.Source] = b.Tier
			}
		}
		for _, b := range p.Bindings {
			down := b.Destination
			if b.DestinationType == DestQueue {
				q, _ := p.Queue(b.Destination)
				down = q.DeadLetterExchange
			}
			if down == "" || down == "x" || down == p.Names.Retry() { // targets: their bindings lead to queues only
				continue
			}
			if dt, ok := tierOfSource[down]; ok && dt >= b.Tier {
				t.Errorf("%s: binding %s (tier %d) routes towards %s whose bindings have tier %d", order, b, b.Tier, down, dt)
			}
		}
		// Exchanges: D before any ladder exchange, parking first among queues.
		if p.Exchanges[2].Name != p.Names.Dispatch() || p.Queues[0].Name != p.Names.Parking() {
			t.Errorf("%s: first exchanges %s, %s, %s; first queue %s", order, p.Exchanges[0].Name, p.Exchanges[1].Name, p.Exchanges[2].Name, p.Queues[0].Name)
		}
	}
}

func TestPlanTargetsBucketsReadyPlugin(t *testing.T) {
	p := mustPlan(t, delayspec.Spec{Prefix: "app1", Targets: delayspec.Targets{{Name: "orders", Type: "topic"}, {Name: "billing"}},
		Buckets:     delayspec.Delays{5 * time.Second},
		ReadyQueues: delayspec.ReadyQueues{{Queue: "orders.t", Exchange: "orders", BindingKey: "order.#"}, {Queue: "b.t", Exchange: "other", BindingKey: ""}},
		Plugin:      delayspec.PluginOn, QueueType: delayspec.Classic})
	if e, ok := p.Exchange("orders"); !ok || e.Type != "topic" || e.Role != RoleTarget {
		t.Errorf("orders:topic not declared: %+v", e)
	}
	if _, ok := p.Exchange("billing"); ok {
		t.Error("billing has no type: it must not be declared")
	}
	if strings.Join(p.Existing, ",") != "billing,other" {
		t.Errorf("Existing = %v, want [billing other]", p.Existing)
	}
	var targets []string
	for _, b := range p.Bindings {
		if b.Role == RoleDispatch {
			targets = append(targets, b.Destination)
			if b.Source != "app1.dispatch" || b.DestinationType != DestExchange || b.Args[route.TargetHeader] != b.Destination || b.Args["x-match"] != "all" {
				t.Errorf("dispatch binding %s", b)
			}
		}
		if b.Role == RoleReady && b.Destination == "orders.t" && (b.Source != "orders" || b.RoutingKey != "order.#") {
			t.Errorf("ready binding %s", b)
		}
		if b.Role == RolePlugin && (b.Source != "app1.plugin" || b.Destination != "app1.dispatch" || len(b.Args) != 1) {
			t.Errorf("plugin binding %s: want app1.plugin -> app1.dispatch matching everything", b)
		}
	}
	if strings.Join(targets, ",") != "orders,billing" {
		t.Errorf("dispatch bindings to %v", targets)
	}
	for _, q := range p.Queues {
		if !strings.HasPrefix(q.Name, "app1.") && q.Role != RoleReady {
			t.Errorf("queue %s does not start with the prefix", q.Name)
		}
		if (q.Role == RoleParking || q.Role == RoleReady) && (len(q.Args) != 1 || q.Args["x-queue-type"] != "classic") {
			t.Errorf("classic %s: args %v, want only x-queue-type classic (a vhost's default type must not choose it)", q.Name, q.Args)
		}
	}
	if q, ok := p.Queue("app1.bucket.5000ms"); !ok || q.TTL != 5000 {
		t.Errorf("bucket queue: %+v", q)
	}
	// ForPlugin.
	if _, err := p.ForPlugin(false); !errors.Is(err, ErrPluginUnavailable) {
		t.Errorf("plugin on, unavailable: err %v, want ErrPluginUnavailable", err)
	}
	auto := mustPlan(t, delayspec.Spec{Targets: delayspec.Targets{{Name: "o"}}})
	if q, _ := auto.ForPlugin(false); q.HasPlugin() || len(q.Bindings) != len(auto.Bindings)-1 {
		t.Error("auto, unavailable: the plugin exchange and its binding must go")
	}
	if q, _ := auto.ForPlugin(true); !q.HasPlugin() {
		t.Error("auto, available: the plugin exchange must stay")
	}
	if !auto.HasPlugin() {
		t.Error("WithoutPlugin changed the original plan")
	}
	if off := mustPlan(t, delayspec.Spec{Targets: delayspec.Targets{{Name: "o"}}, Plugin: delayspec.PluginOff}); off.HasPlugin() {
		t.Error("plugin off: no plugin exchange")
	}
}

func TestPlanInvalidSpec(t *testing.T) {
	cases := []struct {
		name string
		spec delayspec.Spec
		want string
	}{
		{"no target", delayspec.Spec{}, "no target exchange"},
		{"radix 3", delayspec.Spec{Targets: delayspec.Targets{{Name: "o"}}, Ladder: ttlbuckets.Ladder{Radix: 3}}, "adix"},
		{"max beyond TTL limit", delayspec.Spec{Targets: delayspec.Targets{{Name: "o"}}, Ladder: ttlbuckets.Ladder{Max: 20 * 365 * 24 * time.Hour}}, "ax"},
		{"bad prefix", delayspec.Spec{Prefix: "a b/c", Targets: delayspec.Targets{{Name: "o"}}}, "prefix"},
		{"bucket not whole ms", delayspec.Spec{Targets: delayspec.Targets{{Name: "o"}}, Buckets: delayspec.Delays{1500 * time.Microsecond}}, "bucket"},
		{"bad queue type", delayspec.Spec{Targets: delayspec.Targets{{Name: "o"}}, QueueType: "stream"}, "queue type"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p, err := NewPlan(c.spec)
			if p != nil || !errors.Is(err, delayspec.ErrInvalidSpec) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("Plan() = %v, %v; want delayspec.ErrInvalidSpec mentioning %q", p, err, c.want)
			}
		})
	}
}

func BenchmarkPlanDefault(b *testing.B) {
	spec := delayspec.Spec{Targets: delayspec.Targets{{Name: "orders"}}}
	for b.Loop() {
		if _, err := NewPlan(spec); err != nil {
			b.Fatal(err)
		}
	}
}

func TestExportShape(t *testing.T) {
	p := mustPlan(t, delayspec.Spec{Targets: delayspec.Targets{{Name: "orders", Type: "topic"}, {Name: "billing"}}, Plugin: delayspec.PluginOff})
	out, err := Export(p, "v1")
	if err != nil {
		t.Fatal(err)
	}
	var d Definitions
	if err := json.Unmarshal(out, &d); err != nil {
		t.Fatal(err)
	}
	if len(d.Exchanges) != len(p.Exchanges) || len(d.Queues) != len(p.Queues) || len(d.Bindings) != len(p.Bindings) {
		t.Fatalf("export has %d/%d/%d objects, plan %d/%d/%d", len(d.Exchanges), len(d.Queues), len(d.Bindings), len(p.Exchanges), len(p.Queues), len(p.Bindings))
	}
	if len(d.VHosts) != 1 || d.VHosts[0].Name != "v1" {
		t.Errorf("vhosts %v", d.VHosts)
	}
	for _, e := range d.Exchanges {
		if e.Name == "billing" {
			t.Error("billing (no type) must not be exported")
		}
		if e.VHost != "v1" || !e.Durable || e.AutoDelete || e.Internal {
			t.Errorf("exchange %+v", e)
		}
	}
	// Integers are plain JSON numbers (imported as long), never strings or floats.
	if !strings.Contains(string(out), `"x-message-ttl": 2147483648,`) || !strings.Contains(string(out), `"rabbitdelay-digit-7": 15`) {
		t.Errorf("integer arguments not exported as JSON integers")
	}
}

func TestParseConflict(t *testing.T) {
	e := &amqp.Error{Code: amqp.PreconditionFailed, Reason: "PRECONDITION_FAILED - inequivalent arg 'x-message-ttl' for queue 'rabbitdelay.ladder.00.01' in vhost 'v': received the value '1' of type 'long' but current is the value '5000' of type 'long'"}
	c := parseConflict(e)
	if c == nil || c.Kind != "queue" || c.Name != "rabbitdelay.ladder.00.01" || c.Argument != "x-message-ttl" || c.Existing != "5000 (long)" || c.Wanted != "1 (long)" {
		t.Fatalf("parseConflict = %+v", c)
	}
	if !errors.Is(c, ErrConflict) {
		t.Error("not ErrConflict")
	}
	var ae *amqp.Error
	if !errors.As(c, &ae) || ae != e {
		t.Error("*amqp091.Error not reachable")
	}
	msg := c.Error()
	for _, want := range []string{"rabbitdelay.ladder.00.01", "x-message-ttl", "5000", "wants 1", "delete_queue"} {
		if !strings.Contains(msg, want) {
			t.Errorf("message %q lacks %q", msg, want)
		}
	}
	ex := parseConflict(&amqp.Error{Code: amqp.PreconditionFailed, Reason: "PRECONDITION_FAILED - inequivalent arg 'type' for exchange 'orders' in vhost '/': received 'headers' but current is 'topic'"})
	if ex == nil || ex.Kind != "exchange" || ex.Existing != "topic" || ex.Wanted != "headers" {
		t.Fatalf("exchange conflict = %+v", ex)
	}
	// RabbitMQ cuts reasons at 255 bytes: the values are then filled in from what was sent and
	// from the management API's view.
	cut := parseConflict(&amqp.Error{Code: amqp.PreconditionFailed, Reason: "PRECONDITION_FAILED - inequivalent arg 'x-dead-letter-exchange' for queue 'a-very-long-prefix.ladder.02.03' in vhost 'a-very-long-vhost': received the value 'a-very-long-prefix.ladder.03' of type 'lon..."})
	if cut == nil || cut.Name != "a-very-long-prefix.ladder.02.03" || cut.Argument != "x-dead-letter-exchange" || cut.Existing != unknownValue {
		t.Fatalf("cut conflict = %+v", cut)
	}
	cut.fill(amqp.Table{"x-dead-letter-exchange": "p.ladder.03"}, "", map[string]any{"x-message-ttl": 5})
	if cut.Wanted != "p.ladder.03" || cut.Existing != "none" {
		t.Errorf("filled conflict: wanted %q existing %q", cut.Wanted, cut.Existing)
	}
	if parseConflict(&amqp.Error{Code: amqp.NotFound, Reason: "NOT_FOUND"}) != nil {
		t.Error("404 parsed as a conflict")
	}
}

// TestPlanPoliciesMatchExactlyOwnNames: the delay-queue policy's pattern matches every delay
// queue and the parking queue and nothing else (not a ready queue, not a name that only starts
// like one); the targets policy matches exactly the targets, regular-expression characters in
// names included.
func TestPlanPoliciesMatchExactlyOwnNames(t *testing.T) {
	p := mustPlan(t, delayspec.Spec{Prefix: "app1", Targets: delayspec.Targets{{Name: "orders", Type: "topic"}, {Name: "a.b*c"}},
		Buckets: delayspec.Delays{3 * time.Second}, ReadyQueues: delayspec.ReadyQueues{{Queue: "orders.timeouts", Exchange: "orders", BindingKey: "#"}}})
	byName := map[string]Policy{}
	for _, pol := range p.Policies {
		byName[pol.Name] = pol
		if pol.Priority != delayspec.DefaultPolicyPriority {
			t.Errorf("policy %s: priority %d, want %d", pol.Name, pol.Priority, delayspec.DefaultPolicyPriority)
		}
	}
	qp, ok := byName["app1.delay-queues"]
	if !ok || qp.ApplyTo != ApplyToQueues || qp.Definition["overflow"] != "reject-publish" || qp.Definition["dead-letter-strategy"] != "at-least-once" {
		t.Fatalf("delay-queue policy: %+v", qp)
	}
	re := regexp.MustCompile(qp.Pattern)
	for _, q := range p.Queues {
		if got, want := re.MatchString(q.Name), q.Role != RoleReady && q.Role != RoleRevoked && q.Role != RoleSpec; got != want {
			t.Errorf("queue %s (%s): policy matches %v, want %v", q.Name, q.Role, got, want)
		}
	}
	for _, other := range []string{"app1.parking2", "xapp1.parking", "app1.bucket.3000ms.x", "app1Xparking"} {
		if re.MatchString(other) {
			t.Errorf("delay-queue policy matches %q", other)
		}
	}
	tp, ok := byName["app1.targets"]
	if !ok || tp.ApplyTo != ApplyToExchanges || tp.Definition["alternate-exchange"] != "app1.due-unroutable" {
		t.Fatalf("targets policy: %+v", tp)
	}
	re = regexp.MustCompile(tp.Pattern)
	for name, want := range map[string]bool{"orders": true, "a.b*c": true, "a.bbbc": false, "orders2": false, "app1.dispatch": false} {
		if got := re.MatchString(name); got != want {
			t.Errorf("targets policy matches %q: %v, want %v", name, got, want)
		}
	}
	// Classic queues: no dead-letter strategy in the definition.
	c := mustPlan(t, delayspec.Spec{Targets: delayspec.Targets{{Name: "orders"}}, QueueType: delayspec.Classic})
	if _, ok := c.Policies[0].Definition["dead-letter-strategy"]; ok {
		t.Errorf("classic delay-queue policy: %v", c.Policies[0].Definition)
	}
}

// TestPlanReadyQueueArgs: quorum ready queues get the delivery limit (default 20, configurable)
// and dead-letter to the parking queue's exchange; -1 and classic queues get neither.
func TestPlanReadyQueueArgs(t *testing.T) {
	rq := delayspec.ReadyQueues{{Queue: "orders.timeouts", Exchange: "orders", BindingKey: "#"}}
	for _, tc := range []struct {
		name  string
		spec  delayspec.Spec
		limit any
		dlx   any
	}{
		{"default", delayspec.Spec{}, int64(20), "rabbitdelay.unroutable"},
		{"5", delayspec.Spec{ReadyDeliveryLimit: 5}, int64(5), "rabbitdelay.unroutable"},
		{"none", delayspec.Spec{ReadyDeliveryLimit: delayspec.NoReadyDeliveryLimit}, nil, nil},
		{"classic", delayspec.Spec{QueueType: delayspec.Classic}, nil, nil},
	} {
		tc.spec.Targets, tc.spec.ReadyQueues = delayspec.Targets{{Name: "orders"}}, rq
		p := mustPlan(t, tc.spec)
		q, _ := p.Queue("orders.timeouts")
		if q.Args["x-delivery-limit"] != tc.limit || q.Args["x-dead-letter-exchange"] != tc.dlx {
			t.Errorf("%s: ready queue args %v, want x-delivery-limit %v, x-dead-letter-exchange %v", tc.name, q.Args, tc.limit, tc.dlx)
		}
	}
	if err := (delayspec.Spec{Targets: delayspec.Targets{{Name: "orders"}}, ReadyDeliveryLimit: -2}).Validate(); !errors.Is(err, delayspec.ErrInvalidSpec) {
		t.Errorf("limit -2: %v, want ErrInvalidSpec", err)
	}
	for v, want := range map[string]delayspec.DeliveryLimit{"1": 1, "-1": -1, "20": 20, "0": 0, "-2": 0, "x": 0} {
		var got delayspec.DeliveryLimit
		err := got.Decode(v)
		if got != want || (want == 0) != (err != nil) {
			t.Errorf("DeliveryLimit.Decode(%q) = %d, %v", v, got, err)
		}
	}
}

// TestPlanSpecStream: the plan declares the spec stream, whose last record publishers read, as
// a stream kept small; its name is reserved; the ladder has no fanout exchange but the entry
// exchanges (no marker exchanges).
func TestPlanSpecStream(t *testing.T) {
	n := delayspec.Names{Prefix: "app1"}
	p := mustPlan(t, delayspec.Spec{Prefix: "app1", Targets: delayspec.Targets{{Name: "orders"}}})
	q, ok := p.Queue(n.SpecStream())
	if !ok || q.Role != RoleSpec || q.Args["x-queue-type"] != "stream" || q.Args["x-max-length-bytes"] == nil || q.IsDelay() {
		t.Errorf("spec stream %q: %+v (found %v)", n.SpecStream(), q, ok)
	}
	if !n.Reserved(n.SpecStream()) || !n.Reserved("app1.due-unroutable") {
		t.Error("the spec stream and due-unroutable must be reserved names")
	}
	for _, e := range p.Exchanges {
		if e.Role == RoleLadder && e.Type == amqp.ExchangeFanout && !strings.HasSuffix(e.Name, ".entry") {
			t.Errorf("fanout ladder exchange %s is not an entry exchange", e.Name)
		}
	}
}

// TestRetryTarget: a target named like the topology's retry exchange, without a type, is that
// exchange (planned once, never "must already exist"); with a type it is refused.
func TestRetryTarget(t *testing.T) {
	s := delayspec.Spec{Prefix: "rt", Targets: delayspec.Targets{{Name: "orders"}, {Name: "rt.retry"}}}
	p, err := NewPlan(s)
	if err != nil {
		t.Fatalf("Plan: %v", err)
	}
	seen := map[string]int{}
	for _, b := range p.Bindings {
		seen[b.String()]++
	}
	for b, n := range seen {
		if n > 1 {
			t.Errorf("binding %s planned %d times", b, n)
		}
	}
	for _, e := range p.Existing {
		if e == "rt.retry" {
			t.Error("the retry exchange is listed as one that must already exist")
		}
	}
	if _, err := NewPlan(delayspec.Spec{Prefix: "rt", Targets: delayspec.Targets{{Name: "rt.retry", Type: "direct"}}}); err == nil {
		t.Error("a typed target named like the retry exchange was accepted")
	}
}

// TestPlanEntryExchanges: with and without copies, every ladder queue and last-hop queue has
// exactly one entry exchange, a fanout exchange of its level and copy named after it, whose one
// binding leads to that queue and no other; nothing else is bound from an entry exchange, and
// the entry marker of the ladder (and of the copies) is declared last with the other markers.
func TestPlanEntryExchanges(t *testing.T) {
	for _, shards := range []int{1, 3} {
		p := mustPlan(t, delayspec.Spec{Targets: delayspec.Targets{{Name: "orders"}}, Shards: shards})
		from := map[string][]Binding{}
		for _, b := range p.Bindings {
			from[b.Source] = append(from[b.Source], b)
		}
		entries := 0
		for _, q := range p.Queues {
			if q.Role != RoleLadder {
				continue
			}
			name := p.Names.LadderEntryExchange(q.Name)
			e, ok := p.Exchange(name)
			if !ok || e.Type != amqp.ExchangeFanout || e.Role != RoleLadder || e.Level != q.Level || e.Shard != q.Shard {
				t.Errorf("shards %d: entry exchange of %s = %+v (found %v), want a fanout ladder exchange of level %d, copy %d", shards, q.Name, e, ok, q.Level, q.Shard)
				continue
			}
			bs := from[name]
			if len(bs) != 1 || bs[0].Destination != q.Name || bs[0].DestinationType != DestQueue || len(bs[0].Args) != 0 {
				t.Errorf("shards %d: bindings from %s = %v, want one to the queue %s", shards, name, bs, q.Name)
			}
			entries++
		}
		if want := shards * (225 + 105); entries != want { // ladder, last-hop and first-hop queues
			t.Errorf("shards %d: %d entry exchanges, want %d", shards, entries, want)
		}
		for src := range from {
			if strings.HasSuffix(src, ".entry") {
				entries--
			}
		}
		if entries != 0 {
			t.Errorf("shards %d: %d more exchanges named *.entry with bindings than queues", shards, -entries)
		}
	}
	if got := (delayspec.Names{Prefix: "a"}).LadderEntryExchange((delayspec.Names{Prefix: "a"}).LadderLastHopQueueShard(5, 3, 2)); got != "a.ladder.05.03.s2.last.entry" {
		t.Errorf("entry exchange of a copy's last-hop queue = %q", got)
	}
}
