package delayspec

import (
	"cmp"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/delaykit/rabbitdelay/ttlbuckets"
)

// DefaultPrefix is the name prefix used when Spec.Prefix is empty.
const DefaultPrefix = "rabbitdelay"

// ErrInvalidSpec is wrapped by every error about a specification's values (see [Spec.Validate]).
var ErrInvalidSpec = errors.New("topology: invalid specification")

// PluginMode says whether the topology includes the x-delayed-message plugin exchange.
type PluginMode string

// Plugin modes.
const (
	// PluginAuto, the default, declares the plugin exchange when the broker has the plugin.
	PluginAuto PluginMode = "auto"
	// PluginOff never declares the plugin exchange.
	PluginOff PluginMode = "off"
	// PluginOn declares it and fails when the broker does not have the plugin.
	PluginOn PluginMode = "on"
)

// QueueType is the type of every delay, parking and ready queue the topology declares.
type QueueType string

// Queue types.
const (
	// Quorum queues (the default) are replicated and dead-letter at least once
	// (https://www.rabbitmq.com/docs/quorum-queues#dead-lettering).
	Quorum QueueType = "quorum"
	// Classic queues dead-letter at most once (a broker crash can lose a message); not
	// replicated.
	Classic QueueType = "classic"
)

// Target is a target exchange: where a delayed message is finally routed, with the routing key
// it was published with.
type Target struct {
	Name string // the exchange name
	// Type is "" when the exchange must already exist, or the type to declare it with,
	// durable: direct, fanout, topic or headers.
	Type string
}

// String gives the target in its flag form: "name" or "name:type".
func (t Target) String() string {
	if t.Type == "" {
		return t.Name
	}
	return t.Name + ":" + t.Type
}

// ReadyQueue is a queue the topology declares and binds to an exchange (normally a target),
// so a plain AMQP consumer has somewhere to read due messages.
type ReadyQueue struct {
	Queue      string
	Exchange   string
	BindingKey string // a pattern for topic exchanges
}

// String gives the ready queue in its flag form: "queue=exchange:bindingkey".
func (r ReadyQueue) String() string { return r.Queue + "=" + r.Exchange + ":" + r.BindingKey }

// Targets is a list of targets, as AMQPDELAY_TARGETS and repeated --target flags give it.
type Targets []Target

// Decode sets *ts from a comma-separated list of "name" or "name:type"; an empty list sets
// nil. The error names the entry that is wrong.
func (ts *Targets) Decode(s string) error {
	*ts = nil
	for _, part := range splitList(s) {
		name, typ, hasType := strings.Cut(part, ":")
		if name == "" {
			return fmt.Errorf("target %q: empty exchange name (want name or name:type, e.g. orders:topic)", part)
		}
		if hasType && !exchangeType(typ) {
			return fmt.Errorf("target %q: exchange type %q: want direct, fanout, topic or headers", shorten(part), typ)
		}
		*ts = append(*ts, Target{Name: name, Type: typ})
	}
	return nil
}

func exchangeType(t string) bool {
	return slices.Contains([]string{"direct", "fanout", "topic", "headers"}, t)
}

// Delays is a list of bucket delays, as AMQPDELAY_BUCKETS and repeated --bucket flags give it.
type Delays []time.Duration

// Decode sets *ds from a comma-separated list of Go durations such as "30s,5m"; an empty list
// sets nil. The error names the entry that is wrong.
func (ds *Delays) Decode(s string) error {
	*ds = nil
	for _, part := range splitList(s) {
		d, err := time.ParseDuration(part)
		if err != nil {
			return fmt.Errorf("bucket %q: not a duration (want e.g. 30s, 5m, 1h30m)", part)
		}
		*ds = append(*ds, d)
	}
	return nil
}

// ReadyQueues is a list of ready queues, as AMQPDELAY_READY_QUEUES and repeated --ready-queue
// flags give it.
type ReadyQueues []ReadyQueue

// Decode sets *rs from a comma-separated list of queue=exchange:bindingkey (the key may be
// empty); an empty list sets nil. The error names the entry that is wrong.
func (rs *ReadyQueues) Decode(s string) error {
	*rs = nil
	for _, part := range splitList(s) {
		q, rest, ok := strings.Cut(part, "=")
		ex, key, ok2 := strings.Cut(rest, ":")
		if !ok || !ok2 || q == "" || ex == "" {
			return fmt.Errorf("ready queue %q: want queue=exchange:bindingkey, e.g. orders.timeouts=orders:order.timeout.#", shorten(part))
		}
		*rs = append(*rs, ReadyQueue{Queue: q, Exchange: ex, BindingKey: key})
	}
	return nil
}

// Decode sets *m from "off", "auto" or "on"; "" sets "" (auto).
func (m *PluginMode) Decode(s string) error {
	return decodeOneOf(m, s, "want off, auto (the default) or on", PluginAuto, PluginOff, PluginOn)
}

// Decode sets *q from "quorum" or "classic"; "" sets "" (quorum).
func (q *QueueType) Decode(s string) error {
	return decodeOneOf(q, s, "want quorum (the default) or classic", Quorum, Classic)
}

// decodeOneOf sets *dst to s when s is "" or one of ok, else returns want.
func decodeOneOf[T ~string](dst *T, s, want string, ok ...T) error {
	if s != "" && !slices.Contains(ok, T(s)) {
		return errors.New(want)
	}
	*dst = T(s)
	return nil
}

// splitList splits a comma-separated list, trimming spaces and dropping empty entries.
func splitList(s string) []string {
	var out []string
	for p := range strings.SplitSeq(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// Spec is what to declare: the delay topology for one prefix. Zero fields mean the documented
// defaults ([Spec.WithDefaults]); [Env.Spec] fills it from the AMQPDELAY_* variables.
type Spec struct {
	// Prefix names every object (see [Names]); default "rabbitdelay". Letters, digits and
	// . _ - : only, at most 200 bytes, not starting with "amq." (reserved by RabbitMQ).
	Prefix string
	// Targets are the exchanges delayed messages are finally routed through: names of at most
	// MaxNameLen bytes, none of the topology's own ([Names.Reserved]).
	Targets Targets
	// Buckets are optional fixed delays, each with its own queue (whole milliseconds).
	Buckets Delays
	// Ladder is the ladder's unit, radix, maximum and order; zero fields take ttlbuckets'
	// defaults.
	Ladder ttlbuckets.Ladder
	// Plugin is off, auto (default) or on.
	Plugin PluginMode
	// QueueType is quorum (default) or classic.
	QueueType QueueType
	// ReadyQueues are optional queues to declare and bind; names and key of at most MaxNameLen
	// bytes, queue and exchange none of the topology's own ([Names.Reserved]).
	ReadyQueues ReadyQueues
	// ReadyDeliveryLimit is the x-delivery-limit of quorum ready queues: a message returned
	// more often is dead-lettered to the parking queue (x-death reason delivery_limit) instead
	// of being redelivered forever (3.x) or dropped after 20 returns (4.x's default). 0 means
	// DefaultReadyDeliveryLimit; [NoReadyDeliveryLimit] declares them with neither limit nor
	// dead-letter exchange, for ready queues that exist with plain arguments. Classic ready
	// queues have no delivery limit.
	ReadyDeliveryLimit int
	// PolicyPriority is the priority of the policies topology.Apply sets; 0 means
	// DefaultPolicyPriority. RabbitMQ applies only the highest-priority matching policy, so it
	// must be above every other policy matching the topology's queues or target exchanges.
	PolicyPriority int
	// Shards is how many shards of the ladder there are, 1 to [MaxShards]; 0 means 1. Shard
	// k >= 1 is a full second chain of level exchanges and queues ([Names.LadderQueueShard])
	// with the same TTLs into the same dispatch exchange. A Publisher keeps each message in one
	// shard (chosen from its MessageId), so a burst due at once leaves from Shards queues; Apply
	// places the shards of a queue on different nodes (topology.ApplyOptions.Nodes).
	Shards int
}

// MaxShards is the largest [Spec.Shards]: each shard adds the ladder's queues again.
const MaxShards = 16

// DefaultReadyDeliveryLimit is the default x-delivery-limit of quorum ready queues: RabbitMQ
// 4.x's own default (https://www.rabbitmq.com/docs/quorum-queues#poison-message-handling),
// explicit so that 3.x behaves the same and the message is parked, not dropped.
const DefaultReadyDeliveryLimit = 20

// NoReadyDeliveryLimit as Spec.ReadyDeliveryLimit declares quorum ready queues without
// x-delivery-limit and without a dead-letter exchange.
const NoReadyDeliveryLimit = -1

// DefaultPolicyPriority is the policies' priority when Spec.PolicyPriority is 0: far above the
// usual small numbers; RabbitMQ applies only the highest-priority policy that matches an object
// (https://www.rabbitmq.com/docs/policies#priorities).
const DefaultPolicyPriority = 1000000

// WithDefaults returns s with its zero fields replaced by the defaults.
func (s Spec) WithDefaults() Spec {
	s.Prefix = cmp.Or(s.Prefix, DefaultPrefix)
	s.Plugin = cmp.Or(s.Plugin, PluginAuto)
	s.QueueType = cmp.Or(s.QueueType, Quorum)
	s.Ladder = s.Ladder.WithDefaults()
	s.ReadyDeliveryLimit = cmp.Or(s.ReadyDeliveryLimit, DefaultReadyDeliveryLimit)
	s.PolicyPriority = cmp.Or(s.PolicyPriority, DefaultPolicyPriority)
	s.Shards = cmp.Or(s.Shards, 1)
	return s
}

var prefixRE = regexp.MustCompile(`^[A-Za-z0-9._:-]+$`)

// ValidatePrefix checks a prefix ("" means [DefaultPrefix]) as [Spec.Validate] does. The error
// wraps ErrInvalidSpec.
func ValidatePrefix(prefix string) error {
	prefix = cmp.Or(prefix, DefaultPrefix)
	switch {
	case !prefixRE.MatchString(prefix):
		return fmt.Errorf("%w: prefix %q: use only letters, digits and . _ - : (it starts every exchange and queue name)", ErrInvalidSpec, prefix)
	case len(prefix) > 200:
		return fmt.Errorf("%w: prefix is %d bytes: at most 200 (RabbitMQ names hold at most 255 bytes, and suffixes are added)", ErrInvalidSpec, len(prefix))
	case BrokerReserved(prefix):
		return fmt.Errorf("%w: prefix %q: names starting with \"amq.\" are reserved by RabbitMQ", ErrInvalidSpec, prefix)
	}
	return nil
}

// Validate checks s (with its defaults) without touching the network and returns every
// problem, joined; each wraps ErrInvalidSpec (ladder problems also ttlbuckets.ErrInvalidLadder,
// bucket problems ttlbuckets.ErrInvalidBuckets). It also refuses names longer than
// [MaxNameLen] (the broker would close the connection) and targets, ready queues and their
// exchanges named like the topology's own objects (apply would stop half-way on a conflict).
func (s Spec) Validate() error {
	s = s.WithDefaults()
	var errs []error
	add := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("%w: "+format, append([]any{ErrInvalidSpec}, args...)...))
	}
	if err := ValidatePrefix(s.Prefix); err != nil {
		errs = append(errs, err)
	}
	if len(s.Targets) == 0 {
		add("no target exchange: set AMQPDELAY_TARGETS (the rabbitdelay CLI also takes --target), e.g. orders, or orders:topic to declare it")
	}
	names := s.Names()
	s.checkTargets(names, add)
	if err := s.Ladder.Validate(); err != nil {
		errs = append(errs, fmt.Errorf("%w: ladder: %w", ErrInvalidSpec, err))
	}
	if _, err := ttlbuckets.NewBuckets(s.Buckets...); err != nil {
		errs = append(errs, fmt.Errorf("%w: buckets: %w", ErrInvalidSpec, err))
	}
	if !slices.Contains([]PluginMode{PluginAuto, PluginOff, PluginOn}, s.Plugin) {
		add("plugin mode %q: want off, auto or on", s.Plugin)
	}
	if s.QueueType != Quorum && s.QueueType != Classic {
		add("queue type %q: want quorum or classic", s.QueueType)
	}
	if s.ReadyDeliveryLimit < NoReadyDeliveryLimit {
		add("ready-queue delivery limit %d: want a positive number of returns, or -1 for none", s.ReadyDeliveryLimit)
	}
	if s.Shards < 1 || s.Shards > MaxShards {
		add("shards %d: want 1 (one ladder, the default) to %d shards of the ladder", s.Shards, MaxShards)
	}
	if s.PolicyPriority < 0 {
		add("policy priority %d: want a positive number (RabbitMQ applies the highest-priority policy)", s.PolicyPriority)
	}
	s.checkReadyQueues(names, add)
	return errors.Join(errs...)
}

// checkTargets reports each problem of s.Targets through add.
func (s Spec) checkTargets(names Names, add func(format string, args ...any)) {
	seen := map[string]bool{}
	for _, t := range s.Targets {
		if t.Name == "" {
			add("target with an empty name")
			continue
		}
		if len(t.Name) > MaxNameLen {
			add("target %q is %d bytes: exchange names hold at most %d bytes", shorten(t.Name), len(t.Name), MaxNameLen)
		}
		if problem := NameProblem(t.Name); problem != "" {
			add("target %q %s: correct the name", shorten(t.Name), problem)
		}
		if names.Reserved(t.Name) && (t.Name != names.Retry() || t.Type != "") {
			add("target %q is a name of the topology's own objects (prefix %q; see delayspec.Names): "+
				"choose another prefix (--prefix, AMQPDELAY_PREFIX) or another target name", t.Name, s.Prefix)
		}
		if BrokerReserved(t.Name) && t.Type != "" {
			add("target %q: exchanges starting with \"amq.\" are RabbitMQ's own and cannot be declared; drop the :%s", t.Name, t.Type)
		}
		if seen[t.Name] {
			add("target %q is listed twice", t.Name)
		}
		seen[t.Name] = true
		if t.Type != "" && !exchangeType(t.Type) {
			add("target %q: exchange type %q: want direct, fanout, topic or headers", t.Name, t.Type)
		}
	}
}

// checkReadyQueues reports each problem of s.ReadyQueues through add.
func (s Spec) checkReadyQueues(names Names, add func(format string, args ...any)) {
	seenReady := map[ReadyQueue]bool{}
	for _, r := range s.ReadyQueues {
		rs := shorten(r.String())
		if seenReady[r] {
			add("ready queue %q is listed twice", rs)
		}
		seenReady[r] = true
		if r.Queue == "" || r.Exchange == "" {
			add("ready queue %q: want queue=exchange:bindingkey", rs)
		}
		if BrokerReserved(r.Queue) {
			add("ready queue %q: queue names starting with \"amq.\" are reserved by RabbitMQ", shorten(r.Queue))
		}
		for _, f := range []struct{ what, v string }{{"queue name", r.Queue}, {"exchange name", r.Exchange}, {"binding key", r.BindingKey}} {
			if len(f.v) > MaxNameLen {
				add("ready queue %q: the %s is %d bytes: at most %d", rs, f.what, len(f.v), MaxNameLen)
			}
			// A binding key may hold control characters, but queue.bind takes it as UTF-8
			// (else 501 FRAME_ERROR closes the connection).
			problem := NameProblem(f.v)
			if f.what == "binding key" && utf8.ValidString(f.v) {
				problem = ""
			}
			if problem != "" {
				add("ready queue %q: the %s %s: correct it", rs, f.what, problem)
			}
		}
		if names.Reserved(r.Queue) {
			add("ready queue %q is a name of the topology's own objects (prefix %q; see delayspec.Names): "+
				"choose another prefix (--prefix, AMQPDELAY_PREFIX) or another queue name", shorten(r.Queue), s.Prefix)
		}
		if names.Reserved(r.Exchange) {
			add("ready queue %q: exchange %q is one of the topology's own exchanges (prefix %q): "+
				"bind ready queues to a target or another exchange of yours", shorten(r.Queue), shorten(r.Exchange), s.Prefix)
		}
	}
}

// NameProblem says what makes name unusable as an exchange or queue name, or "". RabbitMQ
// takes names as UTF-8 (https://www.rabbitmq.com/docs/exchanges#names): one that is not closes
// the connection (501 FRAME_ERROR); with a control character a name means two things on 3.10
// (exchange.declare drops CR and LF, basic.publish keeps them).
func NameProblem(name string) string {
	if !utf8.ValidString(name) {
		return "is not valid UTF-8"
	}
	if i := strings.IndexFunc(name, unicode.IsControl); i >= 0 {
		return fmt.Sprintf("holds a control character (%U at byte %d)", []rune(name[i:])[0], i)
	}
	return ""
}

// MaxNameLen is the longest exchange name, queue name or routing/binding key in bytes: an AMQP
// 0-9-1 shortstr (https://www.rabbitmq.com/amqp-0-9-1-reference#domain.exchange-name).
const MaxNameLen = 255

// shorten cuts a name for an error message to at most 80 bytes, never inside a character.
func shorten(name string) string {
	if len(name) <= 80 {
		return name
	}
	head, tail := 60, len(name)-17
	for head > 0 && !utf8.RuneStart(name[head]) {
		head--
	}
	for tail < len(name) && !utf8.RuneStart(name[tail]) {
		tail++
	}
	return name[:head] + "..." + name[tail:]
}

// HasTarget reports whether name is one of s's targets.
func (s Spec) HasTarget(name string) bool {
	return slices.ContainsFunc(s.Targets, func(t Target) bool { return t.Name == name })
}

// revocationMargin is room, beyond the longest delay, for lateness, retries and clock skew.
const revocationMargin = 24 * time.Hour

// MaxDelay returns the longest delay any path of s can carry: the ladder's maximum, the
// longest bucket, and unless Plugin is off the plugin's 2^32-1 ms.
func (s Spec) MaxDelay() time.Duration {
	s = s.WithDefaults()
	m := s.Ladder.Max
	for _, b := range s.Buckets {
		m = max(m, b)
	}
	if s.Plugin != PluginOff {
		m = max(m, ttlbuckets.DefaultMax)
	}
	return m
}

// RevocationRetention is how long a revocation is kept, in the stream (x-max-age) and in a
// reader's memory: [Spec.MaxDelay] plus 24 h, rounded up to whole hours, so no copy is
// delivered after its revocation is forgotten. The default topology's is 1,218 h.
func (s Spec) RevocationRetention() time.Duration {
	return (s.MaxDelay() + revocationMargin + time.Hour - 1).Truncate(time.Hour)
}

// LadderOrBuckets returns the spec's ladder (with defaults) and its buckets, or the buckets'
// error wrapped with ErrInvalidSpec.
func (s Spec) LadderOrBuckets() (ttlbuckets.Ladder, ttlbuckets.Buckets, error) {
	s = s.WithDefaults()
	b, err := ttlbuckets.NewBuckets(s.Buckets...)
	if err != nil {
		return s.Ladder, ttlbuckets.Buckets{}, fmt.Errorf("%w: buckets: %w", ErrInvalidSpec, err)
	}
	return s.Ladder, b, nil
}
