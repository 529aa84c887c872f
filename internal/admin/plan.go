package admin

import (
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strings"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/delaykit/rabbitdelay/internal/delayspec"
	"github.com/delaykit/rabbitdelay/ttlbuckets"
)

// Role says what part of the delay topology an exchange, queue or binding plays.
type Role string

// Roles.
const (
	// RoleDispatch is the dispatch exchange D and its bindings to the targets.
	RoleDispatch Role = "dispatch"
	// RoleUnroutable is D's alternate exchange, the targets' alternate exchange
	// (<prefix>.due-unroutable), and their bindings to the parking queue.
	RoleUnroutable Role = "unroutable"
	// RoleParking is the parking queue: due messages that no target took.
	RoleParking Role = "parking"
	// RoleLadder is a ladder exchange, ladder queue, or one of their bindings.
	RoleLadder Role = "ladder"
	// RoleBucket is the bucket exchange, a bucket queue, or a bucket binding.
	RoleBucket Role = "bucket"
	// RolePlugin is the x-delayed-message exchange and its binding to D.
	RolePlugin Role = "plugin"
	// RoleTarget is a target exchange declared by the topology (a target given as name:type).
	RoleTarget Role = "target"
	// RoleReady is a ready queue and its binding.
	RoleReady Role = "ready"
	// RoleSpec is the spec stream (delayspec.Names.SpecStream), whose last record is the spec
	// Apply declared.
	RoleSpec Role = "spec"
)

// Exchange is one exchange of a [Plan]. Every exchange is durable, not auto-delete and not
// internal.
type Exchange struct {
	// Name is the exchange name.
	Name string `json:"name"`
	// Type is headers, fanout, direct, topic or x-delayed-message.
	Type string `json:"type"`
	// Args are the exchange arguments (alternate-exchange, x-delayed-type), or nil.
	Args amqp.Table `json:"arguments,omitempty"`
	// Role is the exchange's part in the topology.
	Role Role `json:"role"`
	// Level is the ladder level of a RoleLadder exchange (a level's headers exchange, its
	// last-hop exchange, or the entry exchange of one of its queues: see Type and the name),
	// -1 otherwise.
	Level int `json:"level"`
	// Shard is the shard of the ladder a ladder exchange with Level >= 0 belongs to (0 to
	// Spec.Shards-1; see [Spec.Shards]), 0 for other exchanges.
	Shard int `json:"shard,omitempty"`
}

// Queue is one queue of a [Plan]. Every queue is durable, not exclusive and not auto-delete,
// and never has x-expires (an unused queue would be deleted with the messages it holds).
type Queue struct {
	// Name is the queue name.
	Name string `json:"name"`
	// Args are the queue arguments (x-queue-type, x-message-ttl, x-dead-letter-exchange,
	// x-dead-letter-strategy, x-overflow), or nil.
	Args amqp.Table `json:"arguments,omitempty"`
	// Role is RoleLadder, RoleBucket (the delay queues), RoleParking or RoleReady.
	Role Role `json:"role"`
	// Level and Digit place a ladder queue; both are -1 for other queues.
	Level int `json:"level"`
	Digit int `json:"digit"`
	// LastHop marks a ladder's last-hop queue ([Names.LadderLastHopQueueShard]): the TTL of the
	// queue of the same Level and Digit, dead-lettering into the dispatch exchange.
	LastHop bool `json:"last_hop,omitempty"`
	// FirstHop marks a first-hop queue of the top-first and top-split orders ([Names.LadderFirstHopQueueShard]):
	// the TTL of the level's queue of its digit, dead-lettering into level 0's exchange.
	FirstHop bool `json:"first_hop,omitempty"`
	// Shard is the shard of the ladder a ladder queue belongs to (0 to Spec.Shards-1), 0 for
	// other queues.
	Shard int `json:"shard,omitempty"`
	// Slot places the queue's leader when the ladder has shards (Spec.Shards > 1): Apply
	// declares it through connection Slot mod len(ApplyOptions.Nodes), so that the shards of
	// one ladder queue (slots i, i+1, ..., i+Shards-1 for the i-th ladder queue) get their
	// leaders on different nodes. -1 for queues placed by the policy's leader locator (every
	// queue of a topology with one ladder) or declared through Apply's own connection.
	Slot int `json:"slot"`
	// TTL is the x-message-ttl of a delay queue in milliseconds, 0 for other queues.
	TTL int64 `json:"ttl_ms,omitempty"`
	// DeadLetterExchange is where a delay queue dead-letters expired messages, "" for others.
	DeadLetterExchange string `json:"dead_letter_exchange,omitempty"`
}

// IsDelay reports whether q is a delay queue (a ladder or bucket queue): a queue that must
// never have a consumer, because a consumer would take its messages before they are due.
func (q Queue) IsDelay() bool { return q.Role == RoleLadder || q.Role == RoleBucket }

// Destination types of a [Binding], as RabbitMQ's definitions JSON spells them.
const (
	DestQueue    = "queue"
	DestExchange = "exchange"
)

// Binding is one binding of a [Plan]: from the Source exchange to a queue or, for
// exchange-to-exchange bindings (https://www.rabbitmq.com/docs/e2e), to an exchange.
type Binding struct {
	// Source is the exchange the binding routes from.
	Source string `json:"source"`
	// Destination is the queue or exchange it routes to.
	Destination string `json:"destination"`
	// DestinationType is DestQueue or DestExchange.
	DestinationType string `json:"destination_type"`
	// RoutingKey is the binding key ("" for headers and fanout exchanges).
	RoutingKey string `json:"routing_key"`
	// Args are the binding arguments: for headers exchanges x-match and the header values
	// (integers as int64, see package ttlbuckets), or nil.
	Args amqp.Table `json:"arguments,omitempty"`
	// Role is the binding's part in the topology.
	Role Role `json:"role"`
	// Tier orders the bindings for declaration: tier 0 bindings lead out of the dispatch
	// exchange and its alternate exchange; a binding of tier n routes into an exchange whose
	// bindings are all of tier < n. Declaring by ascending tier means a binding never routes
	// into an exchange whose own bindings are not declared yet.
	Tier int `json:"tier"`
}

// String describes the binding: "source -> destination (queue) key=... {args}".
func (b Binding) String() string {
	var sb strings.Builder
	sb.WriteString(b.Source)
	sb.WriteString(" -> ")
	sb.WriteString(b.Destination)
	if b.DestinationType == DestExchange {
		sb.WriteString(" (exchange)")
	}
	if b.RoutingKey != "" {
		sb.WriteString(" key=")
		sb.WriteString(b.RoutingKey)
	}
	if len(b.Args) > 0 {
		sb.WriteString(" ")
		sb.WriteString(FormatArgs(b.Args))
	}
	return sb.String()
}

// Plan is the exact set of exchanges, queues and bindings that a [Spec] declares, each list
// in declaration order (the dependency-safe order Apply uses). Build one with [NewPlan];
// do not modify its tables.
type Plan struct {
	// Spec is the specification, with its defaults filled in.
	Spec delayspec.Spec `json:"-"`
	// Names is the naming rule of Spec.Prefix.
	Names delayspec.Names `json:"-"`
	// Ladder is Spec.Ladder with its defaults filled in.
	Ladder ttlbuckets.Ladder `json:"-"`
	// Exchanges are the exchanges to declare: D's alternate exchange, D, targets given as
	// name:type, the ladder levels' and last-hop exchanges, the bucket exchange,
	// the plugin exchange, and the entry exchange of every ladder and last-hop queue
	// ([Names.LadderEntryExchange]).
	Exchanges []Exchange `json:"exchanges"`
	// Queues are the queues to declare: parking, the revocation and spec streams, ready
	// queues, ladder queues, bucket queues.
	Queues []Queue `json:"queues"`
	// Bindings are the bindings to declare, by ascending Tier.
	Bindings []Binding `json:"bindings"`
	// Existing are exchanges the topology binds to but does not declare: targets given
	// without a type and the exchanges of ready queues that are not such targets. Apply
	// fails with ErrTargetMissing, before declaring anything, when one does not exist.
	Existing []string `json:"existing_exchanges"`
	// Policies are the policies Apply sets through the management API (AMQP cannot set
	// policies): [Names.DelayQueuesPolicy] on the delay queues and the parking queue, and
	// [Names.TargetsPolicy] on the target exchanges.
	Policies []Policy `json:"policies"`
}

// Policy is one RabbitMQ policy of a [Plan] (https://www.rabbitmq.com/docs/policies), in the
// form of the management API and the definitions format.
type Policy struct {
	// Name is the policy name.
	Name string `json:"name"`
	// Pattern is the regular expression (PCRE, matched against the whole name) selecting the
	// queues or exchanges: the plan's own names, quoted and anchored.
	Pattern string `json:"pattern"`
	// ApplyTo is "queues" or "exchanges".
	ApplyTo string `json:"apply-to"`
	// Priority is Spec.PolicyPriority.
	Priority int `json:"priority"`
	// Definition is the policy's keys and values.
	Definition map[string]any `json:"definition"`
	// Role is RoleLadder for the delay-queue policy and RoleTarget for the target policy.
	Role Role `json:"role"`
}

// Policy apply-to values.
const (
	ApplyToQueues    = "queues"
	ApplyToExchanges = "exchanges"
)

// exactPattern returns a PCRE pattern matching exactly the given names.
func exactPattern(names []string) string {
	q := make([]string, len(names))
	for i, n := range names {
		q[i] = regexp.QuoteMeta(n)
	}
	return "^(?:" + strings.Join(q, "|") + ")$"
}

// NewPlan returns the topology s describes, computed from packages ttlbuckets and route
// ([route.DelayQueues], [route.Next], [route.DigitHeader]). It does no I/O. The plugin
// exchange and its binding are included unless s.Plugin is PluginOff; use [Plan.ForPlugin]
// once the broker's answer is known. It returns an error wrapping
// ErrInvalidSpec (with every problem of [Spec.Validate]) when s is invalid.
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
	// A target named like the topology's retry exchange (the consumer package's Publisher
	// names it) is that exchange, which addRetry plans with its binding.
	s.Targets = slices.DeleteFunc(slices.Clone(s.Targets), func(t delayspec.Target) bool { return t.Name == n.Retry() })
	b := newPlanner(p, s, buckets)
	b.addExchanges()
	b.addQueues()
	b.addEntryExchanges()
	b.addBindings()
	b.addLadderBindings()
	p.addRetry() // retry.go: the consumer's way back to one queue
	sort.SliceStable(p.Bindings, func(i, j int) bool { return p.Bindings[i].Tier < p.Bindings[j].Tier })
	p.Policies = policiesOf(s, n) // see Plan.Policies and the package documentation's "Policies" section
	return p, nil
}

// policyDefinition is the definition of the delay-queue policy: only values the queues' own
// arguments already imply, so applying it changes nothing, and its priority shadows every
// lower-priority policy. overflow reject-publish is what quorum at-least-once dead-lettering
// needs (a quorum queue takes a policy's overflow over its argument); on a classic queue it
// makes an operator's length limit refuse publishes instead of dropping the oldest message.
//
// Quorum queues also get queue-leader-locator balanced, which a policy can add to a deployed
// topology (a new argument would meet 406). Classic queues never get it: on RabbitMQ 3.10 a
// policy with a key the queue type does not support does not apply at all
// (rabbit_queue_type:is_policy_applicable). With shards of the ladder (shards > 1) there is
// no locator: Apply places the queues itself ([Queue.Slot]), and a policy's locator would win
// over the declaring connection's node (rabbit_queue_location:leader_locator/1).
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

// LeaderLocatorBalanced is the queue-leader-locator value the delay-queue policy gives quorum
// queues ([Plan.Policies]): RabbitMQ places a new quorum queue's leader on the running member
// node that leads the fewest quorum queues (of every vhost) at that moment, or on a random
// running member once the cluster has queue_count_start_random_selection (1,000) queues or
// more. Without it, a new quorum queue's leader is the node the declaring client is connected
// to ("client-local", the default), so one apply would put every leader of the topology on one
// node. The policy value wins over an x-queue-leader-locator argument. Source:
// rabbit_queue_location (leader_locator/1, leader_node/6) in RabbitMQ 3.10.8 and 4.0.5, both
// of which accept "balanced" (3.10 maps the older "random" and "least-leaders" to it).
const LeaderLocatorBalanced = "balanced"

// readyArgs are the arguments of a ready queue: quorum ones get an explicit delivery limit and
// dead-letter to <prefix>.unroutable, so a message returned too often is parked, not
// redelivered forever (3.x) or dropped (4.x, whose default limit is 20).
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

func appendOnce(list []string, s string) []string {
	for _, x := range list {
		if x == s {
			return list
		}
	}
	return append(list, s)
}

// delayArgs are the arguments of a delay queue: its type, per-queue TTL and dead-letter
// exchange, no dead-letter routing key (the message keeps its own), never x-expires. Quorum
// queues add at-least-once dead-lettering, which needs x-overflow reject-publish
// (https://www.rabbitmq.com/docs/quorum-queues#dead-lettering).
func delayArgs(t delayspec.QueueType, ttl int64, dlx string) amqp.Table {
	a := amqp.Table{"x-queue-type": string(t), "x-message-ttl": ttl, "x-dead-letter-exchange": dlx}
	if t == delayspec.Quorum {
		a["x-dead-letter-strategy"] = "at-least-once"
		a["x-overflow"] = "reject-publish"
	}
	return a
}

// plainArgs are the arguments of parking and ready queues: their type. A classic queue names
// its type too: without x-queue-type, RabbitMQ 4.x gives a queue its vhost's default queue
// type, so a vhost defaulting to quorum would make every "classic" queue a quorum queue
// without the delay queues' dead-letter settings. An existing classic queue declared without
// the argument takes the declaration with it as equivalent (RabbitMQ 3.10 and 4.0).
func plainArgs(t delayspec.QueueType) amqp.Table {
	return amqp.Table{"x-queue-type": string(t)}
}

// HasPlugin reports whether p includes the plugin exchange.
func (p *Plan) HasPlugin() bool {
	for _, e := range p.Exchanges {
		if e.Role == RolePlugin {
			return true
		}
	}
	return false
}

// WithoutPlugin returns a copy of p without the plugin exchange and its binding.
func (p *Plan) WithoutPlugin() *Plan {
	c := *p
	c.Exchanges = nil
	for _, e := range p.Exchanges {
		if e.Role != RolePlugin {
			c.Exchanges = append(c.Exchanges, e)
		}
	}
	c.Bindings = nil
	for _, b := range p.Bindings {
		if b.Role != RolePlugin {
			c.Bindings = append(c.Bindings, b)
		}
	}
	return &c
}

// ForPlugin returns the plan to apply once it is known whether the broker has the
// delayed-message plugin (see [ProbePlugin]): with PluginAuto, p itself when available and p
// without the plugin exchange otherwise; with PluginOn, p when available and an error
// wrapping ErrPluginUnavailable otherwise; with PluginOff, p (which has no plugin exchange).
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

// ForBroker returns the plan to apply on a broker of RabbitMQ major version major (0:
// unknown, taken as 3). From 4.0 a quorum queue without a delivery limit has one of 20 (a
// message returned more often is dead-lettered, or dropped), so on 4.x the delay-queue policy of
// a quorum topology also sets delivery-limit -1 (none; 3.x refuses -1 and has no default): the
// parking queue keeps a parked message however often a reader gives it back. A ready queue is
// the application's and keeps its arguments ([Spec.ReadyDeliveryLimit]). p is not changed.
func (p *Plan) ForBroker(major int) *Plan {
	if major < 4 || p.Spec.QueueType != delayspec.Quorum {
		return p
	}
	c := *p
	c.Policies = make([]Policy, len(p.Policies))
	copy(c.Policies, p.Policies)
	for i, pol := range c.Policies {
		if pol.Name != p.Names.DelayQueuesPolicy() {
			continue
		}
		def := make(map[string]any, len(pol.Definition)+1)
		for k, v := range pol.Definition {
			def[k] = v
		}
		def["delivery-limit"] = -1
		c.Policies[i].Definition = def
	}
	return &c
}

// ServerMajor is the RabbitMQ major version conn's server announces (its "version"
// property, e.g. "4.0.5"), or 0 when it does not say (or conn is nil): the argument of
// [Plan.ForBroker].
func ServerMajor(conn *amqp.Connection) int {
	major, _, _ := ParseVersion(ServerVersion(conn))
	return major
}

// DelayQueues returns the plan's delay queues (ladder and bucket queues), in plan order.
func (p *Plan) DelayQueues() []Queue {
	var out []Queue
	for _, q := range p.Queues {
		if q.IsDelay() {
			out = append(out, q)
		}
	}
	return out
}

// Queue returns the plan's queue named name.
func (p *Plan) Queue(name string) (Queue, bool) {
	for _, q := range p.Queues {
		if q.Name == name {
			return q, true
		}
	}
	return Queue{}, false
}

// Exchange returns the plan's exchange named name.
func (p *Plan) Exchange(name string) (Exchange, bool) {
	for _, e := range p.Exchanges {
		if e.Name == name {
			return e, true
		}
	}
	return Exchange{}, false
}

// FormatArgs formats a table as {k=v, ...} with sorted keys, for tables and messages.
func FormatArgs(t amqp.Table) string {
	if len(t) == 0 {
		return "{}"
	}
	keys := make([]string, 0, len(t))
	for k := range t {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var sb strings.Builder
	sb.WriteByte('{')
	for i, k := range keys {
		if i > 0 {
			sb.WriteString(", ")
		}
		fmt.Fprintf(&sb, "%s=%v", k, t[k])
	}
	sb.WriteByte('}')
	return sb.String()
}
