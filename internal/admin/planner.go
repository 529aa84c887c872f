package admin

import (
	"fmt"
	"slices"
	"sort"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/delaykit/rabbitdelay/internal/delayspec"
	"github.com/delaykit/rabbitdelay/internal/route"
	"github.com/delaykit/rabbitdelay/ttlbuckets"
)

// planner builds a [Plan] from the spec (targets without the retry exchange) and the ladder.
type planner struct {
	p       *Plan
	s       delayspec.Spec
	n       delayspec.Names
	levels  int
	radix1  int                  // the ladder's radix - 1: queues per level
	dist    []int                // how far each level is from D, in levels
	order   []int                // the levels, nearest to D first: their downstream exists when they are declared
	byLevel [][]route.DelayQueue // the ladder's delay queues by level
	buckets []route.DelayQueue
}

func newPlanner(p *Plan, s delayspec.Spec, buckets ttlbuckets.Buckets) *planner {
	ladder := p.Ladder
	b := &planner{p: p, s: s, n: p.Names, levels: ladder.Levels(), radix1: ladder.WithDefaults().Radix - 1}
	b.dist = make([]int, b.levels)
	b.order = make([]int, b.levels)
	for l := range b.levels {
		d, cur := 1, l
		for next, ok := route.Next(ladder, cur); ok; next, ok = route.Next(ladder, cur) {
			d, cur = d+1, next
		}
		b.dist[l], b.order[l] = d, l
	}
	sort.SliceStable(b.order, func(i, j int) bool { return b.dist[b.order[i]] < b.dist[b.order[j]] })
	b.byLevel = make([][]route.DelayQueue, b.levels)
	for _, q := range route.DelayQueues(ladder, buckets) {
		if q.Kind == route.LadderKind {
			b.byLevel[q.Level] = append(b.byLevel[q.Level], q)
		} else {
			b.buckets = append(b.buckets, q)
		}
	}
	return b
}

func (b *planner) hasNext(l int) bool {
	_, ok := route.Next(b.p.Ladder, l)
	return ok
}

func (b *planner) nextExchange(l, k int) string {
	if next, ok := route.Next(b.p.Ladder, l); ok {
		return b.n.LadderExchangeShard(next, k)
	}
	return b.n.Dispatch()
}

// slot is the Slot of digit d's queue of level l in shard k, in block 0 (ladder), 1 (last-hop)
// or 2 (first-hop): the i-th queue of shard k gets slot i+k; -1 with one ladder.
func (b *planner) slot(block, l, d, k int) int {
	if b.s.Shards <= 1 {
		return -1
	}
	return (block*b.levels+l)*b.radix1 + d - 1 + k
}

// addExchanges plans every exchange but the entry ones, and lists p.Existing.
func (b *planner) addExchanges() {
	p, s, n := b.p, b.s, b.n
	p.Exchanges = append(p.Exchanges,
		Exchange{Name: n.Unroutable(), Type: amqp.ExchangeFanout, Role: RoleUnroutable, Level: -1},
		Exchange{Name: n.DueUnroutable(), Type: amqp.ExchangeHeaders, Role: RoleUnroutable, Level: -1},
		Exchange{Name: n.Dispatch(), Type: amqp.ExchangeHeaders, Args: amqp.Table{"alternate-exchange": n.Unroutable()}, Role: RoleDispatch, Level: -1},
	)
	declared := map[string]bool{}
	existing := func(name string) {
		if !declared[name] && !slices.Contains(p.Existing, name) {
			p.Existing = append(p.Existing, name)
		}
	}
	for _, t := range s.Targets {
		if t.Type != "" {
			p.Exchanges = append(p.Exchanges, Exchange{Name: t.Name, Type: t.Type, Role: RoleTarget, Level: -1})
			declared[t.Name] = true
		} else {
			existing(t.Name)
		}
	}
	for _, r := range s.ReadyQueues {
		existing(r.Exchange)
	}
	for k := range s.Shards {
		for _, l := range b.order {
			p.Exchanges = append(p.Exchanges, Exchange{Name: n.LadderExchangeShard(l, k), Type: amqp.ExchangeHeaders, Role: RoleLadder, Level: l, Shard: k})
			if b.hasNext(l) {
				p.Exchanges = append(p.Exchanges, Exchange{Name: n.LadderLastHopExchangeShard(l, k), Type: amqp.ExchangeHeaders, Role: RoleLadder, Level: l, Shard: k})
			}
		}
	}
	if len(b.buckets) > 0 {
		p.Exchanges = append(p.Exchanges, Exchange{Name: n.BucketExchange(), Type: amqp.ExchangeHeaders, Role: RoleBucket, Level: -1})
	}
	if s.Plugin != delayspec.PluginOff {
		p.Exchanges = append(p.Exchanges, Exchange{Name: n.PluginExchange(), Type: PluginExchangeType,
			Args: amqp.Table{"x-delayed-type": amqp.ExchangeHeaders}, Role: RolePlugin, Level: -1})
	}
}

func (b *planner) addQueues() {
	p, s, n := b.p, b.s, b.n
	p.Queues = append(p.Queues, Queue{Name: n.Parking(), Args: plainArgs(s.QueueType), Role: RoleParking, Level: -1, Digit: -1, Slot: -1})
	p.Queues = append(p.Queues, Queue{Name: n.Revoked(), Args: amqp.Table{"x-queue-type": "stream", "x-max-age": revokedMaxAge(s)},
		Role: RoleRevoked, Level: -1, Digit: -1, Slot: -1})
	p.Queues = append(p.Queues, Queue{Name: n.SpecStream(), Args: delayspec.SpecStreamArgs(), Role: RoleSpec, Level: -1, Digit: -1, Slot: -1})
	for _, r := range s.ReadyQueues {
		p.Queues = append(p.Queues, Queue{Name: r.Queue, Args: readyArgs(s, n), Role: RoleReady, Level: -1, Digit: -1, Slot: -1})
	}
	// Block 0: the levels' queues; 1: last-hop queues, dead-lettering into D, of the levels
	// that do not already; 2 (top-first and top-split orders): first-hop queues of the levels
	// above 0, dead-lettering into level 0's exchange.
	firstHops := p.Ladder.Order == ttlbuckets.TopFirst || p.Ladder.Order == ttlbuckets.TopSplit
	for block := range 3 {
		for k := range s.Shards {
			for _, l := range b.order {
				if block == 1 && !b.hasNext(l) || block == 2 && (!firstHops || l == 0) {
					continue
				}
				for _, q := range b.byLevel[l] {
					name, dlx := n.LadderQueueShard(l, q.Digit, k), b.nextExchange(l, k)
					switch block {
					case 1:
						name, dlx = n.LadderLastHopQueueShard(l, q.Digit, k), n.Dispatch()
					case 2:
						name, dlx = n.LadderFirstHopQueueShard(l, q.Digit, k), n.LadderExchangeShard(0, k)
					}
					p.Queues = append(p.Queues, Queue{Name: name, Args: delayArgs(s.QueueType, q.TTL, dlx), Role: RoleLadder, Level: l,
						Digit: q.Digit, LastHop: block == 1, FirstHop: block == 2, Shard: k, Slot: b.slot(block, l, q.Digit, k), TTL: q.TTL,
						DeadLetterExchange: dlx})
				}
			}
		}
	}
	for _, q := range b.buckets {
		p.Queues = append(p.Queues, Queue{Name: n.BucketQueue(q.TTL), Args: delayArgs(s.QueueType, q.TTL, n.Dispatch()),
			Role: RoleBucket, Level: -1, Digit: -1, Slot: -1, TTL: q.TTL, DeadLetterExchange: n.Dispatch()})
	}
}

// addEntryExchanges plans a fanout exchange per ladder queue, bound to it alone, for a
// message's first hop, with the tier of the level's bindings into the queue.
func (b *planner) addEntryExchanges() {
	p := b.p
	for _, q := range p.Queues {
		if q.Role != RoleLadder {
			continue
		}
		x := b.n.LadderEntryExchange(q.Name)
		tier := b.dist[q.Level]
		switch {
		case q.LastHop:
			tier = 1
		case q.FirstHop:
			tier = b.dist[0]
		}
		p.Exchanges = append(p.Exchanges, Exchange{Name: x, Type: amqp.ExchangeFanout, Role: RoleLadder, Level: q.Level, Shard: q.Shard})
		p.Bindings = append(p.Bindings, Binding{Source: x, Destination: q.Name, DestinationType: DestQueue, Role: RoleLadder, Tier: tier})
	}
}

// addBindings plans every binding but the ladder's and the entry exchanges'.
func (b *planner) addBindings() {
	p, s, n := b.p, b.s, b.n
	p.Bindings = append(p.Bindings, Binding{Source: n.Unroutable(), Destination: n.Parking(), DestinationType: DestQueue, Role: RoleUnroutable})
	for _, t := range s.Targets {
		p.Bindings = append(p.Bindings, Binding{Source: n.DueUnroutable(), Destination: n.Parking(), DestinationType: DestQueue,
			Args: amqp.Table{"x-match": "all", route.TargetHeader: t.Name}, Role: RoleUnroutable})
	}
	for _, t := range s.Targets {
		p.Bindings = append(p.Bindings, Binding{Source: n.Dispatch(), Destination: t.Name, DestinationType: DestExchange,
			Args: amqp.Table{"x-match": "all", route.TargetHeader: t.Name}, Role: RoleDispatch})
	}
	for _, r := range s.ReadyQueues {
		p.Bindings = append(p.Bindings, Binding{Source: r.Exchange, Destination: r.Queue, DestinationType: DestQueue,
			RoutingKey: r.BindingKey, Role: RoleReady})
	}
	for _, q := range b.buckets {
		p.Bindings = append(p.Bindings, Binding{Source: n.BucketExchange(), Destination: n.BucketQueue(q.TTL), DestinationType: DestQueue,
			Args: amqp.Table{"x-match": "all", route.BucketHeader: q.TTL}, Role: RoleBucket, Tier: 1})
	}
	if s.Plugin != delayspec.PluginOff {
		p.Bindings = append(p.Bindings, Binding{Source: n.PluginExchange(), Destination: n.Dispatch(), DestinationType: DestExchange,
			Args: amqp.Table{"x-match": "all"}, Role: RolePlugin, Tier: 1})
	}
}

// addLadderBindings plans each level's bindings: digit d to its queue, 0 to the next level (or
// D), and a last hop through the level's last-hop exchange, so the level's exchange, which
// tests every binding against every message, keeps radix + 1 bindings instead of 2 x radix - 1.
func (b *planner) addLadderBindings() {
	p, n := b.p, b.n
	for k := range b.s.Shards {
		for _, l := range b.order {
			h, x := route.DigitHeader(l), n.LadderExchangeShard(l, k)
			for _, q := range b.byLevel[l] {
				p.Bindings = append(p.Bindings, Binding{Source: x, Destination: n.LadderQueueShard(l, q.Digit, k), DestinationType: DestQueue,
					Args: amqp.Table{"x-match": "all", h: int64(q.Digit)}, Role: RoleLadder, Tier: b.dist[l]})
			}
			p.Bindings = append(p.Bindings, Binding{Source: x, Destination: b.nextExchange(l, k), DestinationType: DestExchange,
				Args: amqp.Table{"x-match": "all", h: int64(0)}, Role: RoleLadder, Tier: b.dist[l]})
			if !b.hasNext(l) {
				continue
			}
			lx := n.LadderLastHopExchangeShard(l, k)
			for _, q := range b.byLevel[l] {
				p.Bindings = append(p.Bindings, Binding{Source: lx, Destination: n.LadderLastHopQueueShard(l, q.Digit, k), DestinationType: DestQueue,
					Args: amqp.Table{"x-match": "all", h: route.LastHopValue(p.Ladder, q.Digit)}, Role: RoleLadder, Tier: 1})
			}
			p.Bindings = append(p.Bindings, Binding{Source: x, Destination: lx, DestinationType: DestExchange,
				Args: amqp.Table{"x-match": "all", route.LastLevelHeader: int64(l)}, Role: RoleLadder, Tier: b.dist[l]})
		}
	}
}

// addRetry adds the consumer package's retry routing, which sends a failed message back after
// a delay to the one queue Q it came from: the direct exchange <prefix>.retry (alternate
// exchange <prefix>.unroutable), D's binding to it, and a binding with key Q per ready queue
// Q (consumers bind other queues themselves: [Plan.ConsumerRetryBinding]).
func (p *Plan) addRetry() {
	n := p.Names
	retry := n.Retry()
	p.Exchanges = append(p.Exchanges,
		Exchange{Name: retry, Type: amqp.ExchangeDirect, Args: amqp.Table{"alternate-exchange": n.Unroutable()}, Role: RoleRetry, Level: -1},
	)
	for _, r := range p.Spec.ReadyQueues {
		p.Bindings = append(p.Bindings, Binding{Source: retry, Destination: r.Queue, DestinationType: DestQueue,
			RoutingKey: r.Queue, Role: RoleRetry})
	}
	p.Bindings = append(p.Bindings, Binding{Source: n.Dispatch(), Destination: retry, DestinationType: DestExchange,
		Args: amqp.Table{"x-match": "all", route.TargetHeader: retry}, Role: RoleRetry})
}

// ConsumerRetryBinding reports whether b is the binding a consumer makes for its queue Q when Q
// is not a ready queue: retry exchange to queue Q, key Q, no arguments. It routes only Q's own
// retries, so it is expected; any other binding from the retry exchange is unplanned.
func (p *Plan) ConsumerRetryBinding(b Binding) bool {
	return b.Source == p.Names.Retry() && b.DestinationType == DestQueue && b.RoutingKey == b.Destination && len(b.Args) == 0
}

// RoleRetry is the retry exchange and its bindings (see [Names.Retry]).
const RoleRetry Role = "retry"

// RoleRevoked is the revocation stream ([Names.Revoked]), where Publisher.Revoke records which
// delayed messages must not reach a handler (https://www.rabbitmq.com/docs/streams). Nothing is
// bound to it: records go through the default exchange.
const RoleRevoked Role = "revoked"

// revokedMaxAge is the stream's retention as a max-age value: whole hours, "<n>h".
func revokedMaxAge(s delayspec.Spec) string {
	return fmt.Sprintf("%dh", int64(s.RevocationRetention()/time.Hour))
}
