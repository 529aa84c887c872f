package admin

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"sort"
	"strings"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/delaykit/rabbitdelay/internal/delayspec"
	"github.com/delaykit/rabbitdelay/internal/pluginprobe"
	"github.com/delaykit/rabbitdelay/internal/route"
	"github.com/delaykit/rabbitdelay/ttlbuckets"
)

// Role says what part of the delay topology an exchange, queue or binding plays.
type Role string

// Roles.
const (
	RoleDispatch Role = "dispatch" // the dispatch exchange D and its bindings to the targets
	// RoleUnroutable is D's and the targets' alternate exchanges and their bindings to parking.
	RoleUnroutable Role = "unroutable"
	RoleParking    Role = "parking" // the parking queue: due messages no target took
	RoleLadder     Role = "ladder"  // a ladder exchange, queue or binding
	RoleBucket     Role = "bucket"  // the bucket exchange, a bucket queue or binding
	RolePlugin     Role = "plugin"  // the x-delayed-message exchange and its binding to D
	RoleTarget     Role = "target"  // a target exchange given as name:type
	RoleReady      Role = "ready"   // a ready queue and its binding
	RoleSpec       Role = "spec"    // the spec stream, whose last record is the applied spec
)

// Exchange is one exchange of a [Plan]: durable, not auto-delete, not internal.
type Exchange struct {
	Name string `json:"name"`
	// Type is headers, fanout, direct, topic or x-delayed-message.
	Type  string     `json:"type"`
	Args  amqp.Table `json:"arguments,omitempty"` // alternate-exchange, x-delayed-type, or nil
	Role  Role       `json:"role"`
	Level int        `json:"level"` // ladder level of a RoleLadder exchange, -1 otherwise
	// Shard is the ladder shard (0 to Spec.Shards-1) of a ladder exchange, 0 otherwise.
	Shard int `json:"shard,omitempty"`
}

// Queue is one queue of a [Plan]: durable, not exclusive, not auto-delete, and never with
// x-expires (an unused queue would be deleted with its messages).
type Queue struct {
	Name  string     `json:"name"`
	Args  amqp.Table `json:"arguments,omitempty"`
	Role  Role       `json:"role"`
	Level int        `json:"level"` // Level and Digit place a ladder queue; -1 for other queues
	Digit int        `json:"digit"`
	// LastHop marks a last-hop queue ([Names.LadderLastHopQueueShard]), dead-lettering into D.
	LastHop bool `json:"last_hop,omitempty"`
	// FirstHop marks a first-hop queue ([Names.LadderFirstHopQueueShard]), dead-lettering into
	// level 0's exchange.
	FirstHop bool `json:"first_hop,omitempty"`
	Shard    int  `json:"shard,omitempty"` // ladder shard of a ladder queue, 0 otherwise
	// Slot places the leader with Spec.Shards > 1: Apply declares the queue through
	// ApplyOptions.Nodes[Slot mod len(Nodes)], so the shards of one ladder queue (consecutive
	// slots) lead from different nodes; -1 otherwise.
	Slot int   `json:"slot"`
	TTL  int64 `json:"ttl_ms,omitempty"` // a delay queue's x-message-ttl in ms, 0 otherwise
	// DeadLetterExchange is where a delay queue dead-letters, "" otherwise.
	DeadLetterExchange string `json:"dead_letter_exchange,omitempty"`
}

// IsDelay reports whether q is a ladder or bucket queue, which must never have a consumer.
func (q Queue) IsDelay() bool { return q.Role == RoleLadder || q.Role == RoleBucket }

// Destination types of a [Binding], as RabbitMQ's definitions JSON spells them.
const (
	DestQueue    = "queue"
	DestExchange = "exchange"
)

// Binding is one binding of a [Plan], to a queue or (https://www.rabbitmq.com/docs/e2e) an
// exchange.
type Binding struct {
	Source          string     `json:"source"`
	Destination     string     `json:"destination"`
	DestinationType string     `json:"destination_type"` // DestQueue or DestExchange
	RoutingKey      string     `json:"routing_key"`
	Args            amqp.Table `json:"arguments,omitempty"` // integers as int64
	Role            Role       `json:"role"`
	// Tier orders declarations: a binding of tier n routes into an exchange whose bindings
	// are all of tier < n, so it never routes into one not bound yet.
	Tier int `json:"tier"`
}

// String describes the binding: "source -> destination (queue) key=... {args}".
func (b Binding) String() string {
	s := b.Source + " -> " + b.Destination
	if b.DestinationType == DestExchange {
		s += " (exchange)"
	}
	if b.RoutingKey != "" {
		s += " key=" + b.RoutingKey
	}
	if len(b.Args) > 0 {
		s += " " + FormatArgs(b.Args)
	}
	return s
}

// Plan is the exact set of exchanges, queues and bindings that a [Spec] declares, each list
// in Apply's dependency-safe declaration order. Build one with [NewPlan]; do not modify it.
type Plan struct {
	Spec      delayspec.Spec    `json:"-"` // with its defaults filled in
	Names     delayspec.Names   `json:"-"`
	Ladder    ttlbuckets.Ladder `json:"-"` // with its defaults filled in
	Exchanges []Exchange        `json:"exchanges"`
	Queues    []Queue           `json:"queues"`
	Bindings  []Binding         `json:"bindings"` // by ascending Tier
	// Existing are exchanges the topology binds to but does not declare (targets without a
	// type, ready queues' other exchanges); Apply fails with ErrTargetMissing without them.
	Existing []string `json:"existing_exchanges"`
	// Policies are what Apply sets through the management API (package documentation).
	Policies []Policy `json:"policies"`
}

// Policy is one RabbitMQ policy of a [Plan] (https://www.rabbitmq.com/docs/policies), in the
// form of the management API and the definitions format.
type Policy struct {
	Name string `json:"name"`
	// Pattern (PCRE) matches the plan's own names, quoted and anchored.
	Pattern    string         `json:"pattern"`
	ApplyTo    string         `json:"apply-to"` // ApplyToQueues or ApplyToExchanges
	Priority   int            `json:"priority"` // Spec.PolicyPriority
	Definition map[string]any `json:"definition"`
	Role       Role           `json:"role"`
}

// Policy apply-to values.
const (
	ApplyToQueues    = "queues"
	ApplyToExchanges = "exchanges"
)

func exactPattern(names []string) string {
	q := make([]string, len(names))
	for i, n := range names {
		q[i] = regexp.QuoteMeta(n)
	}
	return "^(?:" + strings.Join(q, "|") + ")$"
}

// NewPlan returns the topology s describes, computed by packages ttlbuckets and route, with no
// I/O. The plugin exchange is included unless s.Plugin is PluginOff (see [Plan.ForPlugin]). It
// returns an error wrapping ErrInvalidSpec (every problem of [Spec.Validate]) when s is invalid.
func NewPlan(s delayspec.Spec) (*Plan, error) {
	s = s.WithDefaults()
	if err := s.Validate(); err != nil {
		return nil, err
	}
	ladder, buckets, err := s.LadderOrBuckets()
	if err != nil {
		return nil, err
	}
	n := s.Names()
	p := &Plan{Spec: s, Names: n, Ladder: ladder}
	// A target named like the retry exchange is that exchange, which addRetry plans.
	s.Targets = slices.DeleteFunc(slices.Clone(s.Targets), func(t delayspec.Target) bool { return t.Name == n.Retry() })
	b := newPlanner(p, s, buckets)
	b.addExchanges()
	b.addQueues()
	b.addEntryExchanges()
	b.addBindings()
	b.addLadderBindings()
	p.addRetry()
	slices.SortStableFunc(p.Bindings, func(a, b Binding) int { return cmp.Compare(a.Tier, b.Tier) })
	p.Policies = []Policy{
		{Name: n.DelayQueuesPolicy(), Pattern: n.DelayQueuesPattern(), ApplyTo: ApplyToQueues, Priority: s.PolicyPriority,
			Definition: policyDefinition(s.QueueType, s.Shards), Role: RoleLadder},
		{Name: n.TargetsPolicy(), Pattern: exactPattern(targetNames(s.Targets)), ApplyTo: ApplyToExchanges, Priority: s.PolicyPriority,
			Definition: map[string]any{"alternate-exchange": n.DueUnroutable()}, Role: RoleTarget},
		{Name: n.RevokedPolicy(), Pattern: exactPattern([]string{n.Revoked()}), ApplyTo: ApplyToQueues, Priority: s.PolicyPriority,
			Definition: map[string]any{"max-age": revokedMaxAge(s)}, Role: RoleRevoked},
	}
	return p, nil
}

// policyDefinition is the delay-queue policy: only what the queues' arguments imply (quorum
// queues take a policy's overflow over their own), so it changes nothing but shadows lower
// policies. Quorum queues also get the balanced leader locator, except with shards, which Apply
// places itself (a policy's locator would win). Classic queues never get it: on 3.10 a policy
// with a key the queue type lacks does not apply at all (rabbit_queue_type:is_policy_applicable).
func policyDefinition(t delayspec.QueueType, shards int) map[string]any {
	d := map[string]any{"overflow": "reject-publish"}
	if t == delayspec.Quorum {
		d["dead-letter-strategy"] = "at-least-once"
		if shards <= 1 {
			d["queue-leader-locator"] = LeaderLocatorBalanced
		}
	}
	return d
}

// LeaderLocatorBalanced is the queue-leader-locator the delay-queue policy gives quorum queues:
// a new leader goes to the running member leading the fewest quorum queues, instead of the
// declaring client's node (rabbit_queue_location:leader_locator/1, 3.10.8 and 4.0.5).
const LeaderLocatorBalanced = "balanced"

// readyArgs are a ready queue's arguments: quorum ones get a delivery limit and dead-letter to
// <prefix>.unroutable, so a message returned too often is parked, not looped or dropped.
func readyArgs(s delayspec.Spec, n delayspec.Names) amqp.Table {
	a := plainArgs(s.QueueType)
	if s.QueueType == delayspec.Quorum && s.ReadyDeliveryLimit != delayspec.NoReadyDeliveryLimit {
		a["x-delivery-limit"] = int64(s.ReadyDeliveryLimit)
		a["x-dead-letter-exchange"] = n.Unroutable()
	}
	return a
}

// PluginExchangeType is the exchange type of the rabbitmq_delayed_message_exchange plugin.
const PluginExchangeType = "x-delayed-message"

// delayArgs are a delay queue's arguments: no dead-letter routing key (the message keeps its
// own), never x-expires; quorum at-least-once dead-lettering needs x-overflow reject-publish.
func delayArgs(t delayspec.QueueType, ttl int64, dlx string) amqp.Table {
	a := amqp.Table{"x-queue-type": string(t), "x-message-ttl": ttl, "x-dead-letter-exchange": dlx}
	if t == delayspec.Quorum {
		a["x-dead-letter-strategy"] = "at-least-once"
		a["x-overflow"] = "reject-publish"
	}
	return a
}

// plainArgs name the queue type, classic too: 4.x gives a queue without it the vhost's default.
func plainArgs(t delayspec.QueueType) amqp.Table {
	return amqp.Table{"x-queue-type": string(t)}
}

// HasPlugin reports whether p includes the plugin exchange.
func (p *Plan) HasPlugin() bool {
	return slices.ContainsFunc(p.Exchanges, func(e Exchange) bool { return e.Role == RolePlugin })
}

// WithoutPlugin returns a copy of p without the plugin exchange and its binding.
func (p *Plan) WithoutPlugin() *Plan {
	c := *p
	c.Exchanges = slices.DeleteFunc(slices.Clone(p.Exchanges), func(e Exchange) bool { return e.Role == RolePlugin })
	c.Bindings = slices.DeleteFunc(slices.Clone(p.Bindings), func(b Binding) bool { return b.Role == RolePlugin })
	return &c
}

// ForPlugin returns the plan to apply once [ProbePlugin] answered: p when available or with
// PluginOff; otherwise p without the plugin exchange (PluginAuto) or an error wrapping
// ErrPluginUnavailable (PluginOn).
func (p *Plan) ForPlugin(available bool) (*Plan, error) {
	switch {
	case p.Spec.Plugin == delayspec.PluginOff || available:
		return p, nil
	case p.Spec.Plugin == delayspec.PluginOn:
		return nil, fmt.Errorf("%w: plugin mode is on but declaring an exchange of type %s failed: enable rabbitmq_delayed_message_exchange on the broker, or use --plugin auto (or off)",
			ErrPluginUnavailable, PluginExchangeType)
	default:
		return p.WithoutPlugin(), nil
	}
}

// ForBroker returns the plan for a RabbitMQ of major version major (0: unknown, taken as 3):
// on 4.x, whose quorum queues default to a delivery limit of 20, the delay-queue policy of a
// quorum topology also sets delivery-limit -1 (none; 3.x refuses -1), so the parking queue
// keeps a message however often it is given back. p is not changed.
func (p *Plan) ForBroker(major int) *Plan {
	if major < 4 || p.Spec.QueueType != delayspec.Quorum {
		return p
	}
	c := *p
	c.Policies = slices.Clone(p.Policies)
	for i, pol := range c.Policies {
		if pol.Name == p.Names.DelayQueuesPolicy() {
			c.Policies[i].Definition = maps.Clone(pol.Definition)
			c.Policies[i].Definition["delivery-limit"] = -1
		}
	}
	return &c
}

// ServerMajor is the major version conn's server announces, or 0 when it does not say (or conn
// is nil).
func ServerMajor(conn *amqp.Connection) int {
	major, _, _ := ParseVersion(ServerVersion(conn))
	return major
}

// DelayQueues returns the plan's delay queues (ladder and bucket queues), in plan order.
func (p *Plan) DelayQueues() []Queue {
	return slices.DeleteFunc(slices.Clone(p.Queues), func(q Queue) bool { return !q.IsDelay() })
}

// Queue returns the plan's queue named name.
func (p *Plan) Queue(name string) (Queue, bool) {
	return find(p.Queues, func(q Queue) bool { return q.Name == name })
}

// Exchange returns the plan's exchange named name.
func (p *Plan) Exchange(name string) (Exchange, bool) {
	return find(p.Exchanges, func(e Exchange) bool { return e.Name == name })
}

// find returns the first of xs that match takes.
func find[T any](xs []T, match func(T) bool) (T, bool) {
	if i := slices.IndexFunc(xs, match); i >= 0 {
		return xs[i], true
	}
	var zero T
	return zero, false
}

// FormatArgs formats a table as {k=v, ...} with sorted keys, for tables and messages.
func FormatArgs(t amqp.Table) string {
	kv := make([]string, 0, len(t))
	for _, k := range slices.Sorted(maps.Keys(t)) {
		kv = append(kv, fmt.Sprintf("%s=%v", k, t[k]))
	}
	return "{" + strings.Join(kv, ", ") + "}"
}

// Definitions is the part of RabbitMQ's definitions format
// (https://www.rabbitmq.com/docs/definitions) that a topology needs.
type Definitions struct {
	VHosts    []DefVHost    `json:"vhosts"`
	Exchanges []DefExchange `json:"exchanges"`
	Queues    []DefQueue    `json:"queues"`
	Bindings  []DefBinding  `json:"bindings"`
	Policies  []DefPolicy   `json:"policies"`
}

// DefPolicy is a policy in definitions.
type DefPolicy struct {
	VHost      string         `json:"vhost"`
	Name       string         `json:"name"`
	Pattern    string         `json:"pattern"`
	ApplyTo    string         `json:"apply-to"`
	Definition map[string]any `json:"definition"`
	Priority   int            `json:"priority"`
}

// DefVHost is a vhost in definitions.
type DefVHost struct {
	Name string `json:"name"`
}

// DefExchange is an exchange in definitions.
type DefExchange struct {
	Name       string         `json:"name"`
	VHost      string         `json:"vhost"`
	Type       string         `json:"type"`
	Durable    bool           `json:"durable"`
	AutoDelete bool           `json:"auto_delete"`
	Internal   bool           `json:"internal"`
	Arguments  map[string]any `json:"arguments"`
}

// DefQueue is a queue in definitions.
type DefQueue struct {
	Name       string         `json:"name"`
	VHost      string         `json:"vhost"`
	Durable    bool           `json:"durable"`
	AutoDelete bool           `json:"auto_delete"`
	Arguments  map[string]any `json:"arguments"`
}

// DefBinding is a binding in definitions.
type DefBinding struct {
	Source          string         `json:"source"`
	VHost           string         `json:"vhost"`
	Destination     string         `json:"destination"`
	DestinationType string         `json:"destination_type"`
	RoutingKey      string         `json:"routing_key"`
	Arguments       map[string]any `json:"arguments"`
}

// Definitions returns p as RabbitMQ definitions for vhost ("/" when empty): what Apply would
// declare, and the vhost (created by an import, without permissions). Exchanges of
// p.Existing must exist before an import.
func (p *Plan) Definitions(vhost string) Definitions {
	vhost = cmp.Or(vhost, "/")
	args := func(t map[string]any) map[string]any {
		if t == nil {
			return map[string]any{}
		}
		return t
	}
	d := Definitions{VHosts: []DefVHost{{Name: vhost}}, Exchanges: []DefExchange{}, Queues: []DefQueue{}, Bindings: []DefBinding{}, Policies: []DefPolicy{}}
	for _, pol := range p.Policies {
		d.Policies = append(d.Policies, DefPolicy{VHost: vhost, Name: pol.Name, Pattern: pol.Pattern, ApplyTo: pol.ApplyTo,
			Definition: pol.Definition, Priority: pol.Priority})
	}
	for _, e := range p.Exchanges {
		d.Exchanges = append(d.Exchanges, DefExchange{Name: e.Name, VHost: vhost, Type: e.Type, Durable: true, Arguments: args(e.Args)})
	}
	for _, q := range p.Queues {
		d.Queues = append(d.Queues, DefQueue{Name: q.Name, VHost: vhost, Durable: true, Arguments: args(q.Args)})
	}
	for _, b := range p.Bindings {
		d.Bindings = append(d.Bindings, DefBinding{Source: b.Source, VHost: vhost, Destination: b.Destination,
			DestinationType: b.DestinationType, RoutingKey: b.RoutingKey, Arguments: args(b.Args)})
	}
	return d
}

// Export returns [Plan.Definitions] as indented JSON. Integers are JSON numbers, which RabbitMQ
// imports as longs as Apply declares them, so Apply after an import changes nothing.
func Export(p *Plan, vhost string) ([]byte, error) {
	out, err := json.MarshalIndent(p.Definitions(vhost), "", "  ")
	if err != nil {
		return nil, fmt.Errorf("topology: export: %w", err)
	}
	return append(out, '\n'), nil
}

// ProbePlugin reports whether the broker has the delayed-message plugin, with
// [pluginprobe.Probe] on a connection of its own (dial opens it, ProbePlugin closes it): it
// declares and deletes a temporary x-delayed-message exchange "<prefix>.plugin-probe.<random>"
// (without the plugin 3.x closes the connection with 503, 4.x the channel with 406: both are
// false, nil). Errors are ErrAccessRefused (no configure permission) or the dial error; it
// returns when ctx ends.
func ProbePlugin(ctx context.Context, dial pluginprobe.Dialer, prefix string) (bool, error) {
	var rnd [4]byte
	_, _ = rand.Read(rnd[:])
	name := prefixOf(delayspec.Names{Prefix: prefix}) + ".plugin-probe." + hex.EncodeToString(rnd[:])
	ok, err := pluginprobe.Probe(ctx, dial, name)
	if err != nil && code(err) != 0 {
		return false, wrapBroker(err, fmt.Sprintf("plugin probe: declare exchange %q of type %s", name, PluginExchangeType))
	}
	if err != nil {
		return false, fmt.Errorf("topology: plugin probe: %w", err)
	}
	return ok, nil
}

// ProbePluginManagement reports whether the management API lists the plugin's exchange type;
// it declares nothing, so it suits read-only users.
func ProbePluginManagement(ctx context.Context, m *Management) (bool, error) {
	var raw struct {
		ExchangeTypes []struct{ Name string } `json:"exchange_types"`
	}
	if err := m.get(ctx, "api/overview", &raw); err != nil {
		return false, err
	}
	return slices.ContainsFunc(raw.ExchangeTypes, func(t struct{ Name string }) bool { return t.Name == PluginExchangeType }), nil
}

// prefixOf is n's prefix, delayspec.DefaultPrefix when empty.
func prefixOf(n delayspec.Names) string {
	return cmp.Or(n.Prefix, delayspec.DefaultPrefix)
}

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
