package admin

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/delaykit/rabbitdelay/internal/delayspec"
	"github.com/delaykit/rabbitdelay/internal/pluginprobe"
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
