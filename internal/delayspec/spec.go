package delayspec

import (
	"errors"
	"fmt"
	"regexp"
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
	// PluginAuto declares the plugin exchange when the broker has the plugin, and skips it
	// otherwise. The default.
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
	// (x-dead-letter-strategy: at-least-once, which needs x-overflow: reject-publish):
	// https://www.rabbitmq.com/docs/quorum-queues#dead-lettering
	Quorum QueueType = "quorum"
	// Classic queues dead-letter at most once: a broker crash during dead-lettering can lose a
	// message. Faster, not replicated.
	Classic QueueType = "classic"
)

// Target is a target exchange: where a delayed message is finally routed, with the routing key
// it was published with.
type Target struct {
	// Name is the exchange name.
	Name string
	// Type is "" when the exchange must already exist (apply fails otherwise), or the exchange
	// type to declare it with, durable: direct, fanout, topic or headers.
	Type string
}

// String gives the target in its flag form: "name" or "name:type".
func (t Target) String() string {
	if t.Type == "" {
		return t.Name
	}
	return t.Name + ":" + t.Type
}

// ReadyQueue is a queue the topology declares and binds to a target exchange, so a plain AMQP
// consumer has somewhere to read delayed messages once they are due.
type ReadyQueue struct {
	// Queue is the queue name.
	Queue string
	// Exchange is the exchange to bind it to (normally a target).
	Exchange string
	// BindingKey is the binding's routing key (a pattern for topic exchanges).
	BindingKey string
}

// String gives the ready queue in its flag form: "queue=exchange:bindingkey".
func (r ReadyQueue) String() string { return r.Queue + "=" + r.Exchange + ":" + r.BindingKey }

// Targets is a list of targets, as AMQPDELAY_TARGETS and repeated --target flags give it.
type Targets []Target

// Decode sets *ts from a comma-separated list of "name" or "name:type" (an envconfig.Decoder);
// an empty list sets nil. The error names the entry that is wrong.
func (ts *Targets) Decode(s string) error {
	*ts = nil
	for _, part := range splitList(s) {
		t, err := parseTarget(part)
		if err != nil {
			return err
		}
		*ts = append(*ts, t)
	}
	return nil
}

// parseTarget parses "name" or "name:type".
func parseTarget(s string) (Target, error) {
	name, typ, hasType := strings.Cut(s, ":")
	if name == "" {
		return Target{}, fmt.Errorf("target %q: empty exchange name (want name or name:type, e.g. orders:topic)", s)
	}
	switch typ {
	case "direct", "fanout", "topic", "headers":
	default:
		if hasType {
			return Target{}, fmt.Errorf("target %q: exchange type %q: want direct, fanout, topic or headers", shorten(s), typ)
		}
	}
	return Target{Name: name, Type: typ}, nil
}

// Delays is a list of bucket delays, as AMQPDELAY_BUCKETS and repeated --bucket flags give it.
type Delays []time.Duration

// Decode sets *ds from a comma-separated list of Go durations such as "30s,5m,1h" (an
// envconfig.Decoder); an empty list sets nil. The error names the entry that is wrong.
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

// Decode sets *rs from a comma-separated list of queue=exchange:bindingkey (an
// envconfig.Decoder; the binding key may be empty); an empty list sets nil. The error names
// the entry that is wrong.
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

// Decode sets *m from "off", "auto" or "on" (an envconfig.Decoder); "" sets "" (auto).
func (m *PluginMode) Decode(s string) error {
	switch PluginMode(s) {
	case "", PluginAuto, PluginOff, PluginOn:
		*m = PluginMode(s)
		return nil
	}
	return errors.New("want off, auto (the default) or on")
}

// Decode sets *q from "quorum" or "classic" (an envconfig.Decoder); "" sets "" (quorum).
func (q *QueueType) Decode(s string) error {
	switch QueueType(s) {
	case "", Quorum, Classic:
		*q = QueueType(s)
		return nil
	}
	return errors.New("want quorum (the default) or classic")
}

// splitList splits a comma-separated list, trimming spaces around each entry and dropping
// empty entries.
func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// Spec is what to declare: the delay topology for one prefix. Zero fields mean the documented
// defaults ([Spec.WithDefaults]). [ReadEnv] and [Env.Spec] fill it from the AMQPDELAY_*
// variables ([Env] names the variable of each field).
type Spec struct {
	// Prefix names every object (see [Names]); default "rabbitdelay". Letters, digits and
	// . _ - : only, at most 200 bytes, not starting with "amq." (reserved by RabbitMQ).
	Prefix string
	// Targets are the exchanges delayed messages are finally routed through. A name holds at
	// most 255 bytes (MaxNameLen) and must not be one of the topology's own names
	// ([Names.Reserved]: <prefix>.dispatch, .unroutable, .parking, .buckets, .plugin,
	// <prefix>.ladder.*, <prefix>.bucket.*); other names under the prefix are fine.
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
	// ReadyQueues are optional queues to declare and bind to targets. Queue name, exchange
	// name and binding key hold at most 255 bytes each (MaxNameLen); neither the queue nor the
	// exchange name may be one of the topology's own names ([Names.Reserved]).
	ReadyQueues ReadyQueues
	// ReadyDeliveryLimit is the x-delivery-limit of quorum ready queues: a message returned
	// (nack or reject with requeue, or its consumer gone) more often than this is dead-lettered
	// to <prefix>.unroutable and kept in the parking queue, with x-death reason delivery_limit,
	// instead of being redelivered forever (RabbitMQ 3.x) or dropped after 20 returns (4.x's
	// default limit). 0 means DefaultReadyDeliveryLimit; -1 ([NoReadyDeliveryLimit]) declares
	// ready queues without a limit and without a dead-letter exchange: use it when the ready
	// queues already exist, or are declared by their consumers, with plain arguments. Classic
	// ready queues have no delivery limit (RabbitMQ has none for them) and ignore it.
	ReadyDeliveryLimit int
	// PolicyPriority is the priority of the policies topology.Apply sets (see topology.Plan.Policies); 0 means
	// DefaultPolicyPriority. Only the highest-priority policy matching a queue or exchange
	// applies, so this must be above every other policy of the vhost that matches the
	// topology's queues or target exchanges.
	PolicyPriority int
	// Shards is how many shards of the ladder the topology has, 1 to [MaxShards]; 0 means 1
	// (one ladder, the default). Shard 0 is the ladder itself; shard k >= 1 is a full second
	// chain of level exchanges and queues ([Names.LadderQueueShard]) with the same TTLs, ending
	// in the same dispatch exchange. A Publisher sends each message into one shard (chosen from
	// its MessageId) for every hop, so a burst due at once leaves from Shards queues instead of
	// one; on a cluster, Apply places the shards of one queue on different nodes
	// (topology.ApplyOptions.Nodes). It multiplies the ladder's queues by Shards.
	Shards int
}

// MaxShards is the largest [Spec.Shards]: more shards than a cluster has nodes spread no
// further, and each shard adds the ladder's queues again.
const MaxShards = 16

// DefaultReadyDeliveryLimit is the default x-delivery-limit of quorum ready queues: RabbitMQ
// 4.x's own default for quorum queues (https://www.rabbitmq.com/docs/quorum-queues#poison-message-handling),
// made explicit so that 3.x behaves the same and the message is kept (parked), not dropped.
const DefaultReadyDeliveryLimit = 20

// NoReadyDeliveryLimit as Spec.ReadyDeliveryLimit declares quorum ready queues without
// x-delivery-limit and without a dead-letter exchange.
const NoReadyDeliveryLimit = -1

// DefaultPolicyPriority is the priority of the policies topology.Apply sets when Spec.PolicyPriority is
// 0: far above the small numbers (0-10, sometimes 100) policies are usually given. RabbitMQ
// applies only the highest-priority policy that matches an object
// (https://www.rabbitmq.com/docs/policies#priorities).
const DefaultPolicyPriority = 1000000

// WithDefaults returns s with its zero fields replaced by the defaults.
func (s Spec) WithDefaults() Spec {
	if s.Prefix == "" {
		s.Prefix = DefaultPrefix
	}
	if s.Plugin == "" {
		s.Plugin = PluginAuto
	}
	if s.QueueType == "" {
		s.QueueType = Quorum
	}
	s.Ladder = s.Ladder.WithDefaults()
	if s.ReadyDeliveryLimit == 0 {
		s.ReadyDeliveryLimit = DefaultReadyDeliveryLimit
	}
	if s.PolicyPriority == 0 {
		s.PolicyPriority = DefaultPolicyPriority
	}
	if s.Shards == 0 {
		s.Shards = 1
	}
	return s
}

var prefixRE = regexp.MustCompile(`^[A-Za-z0-9._:-]+$`)

// ValidatePrefix checks a prefix ("" means [DefaultPrefix]) as [Spec.Validate] does: letters,
// digits and . _ - : only, at most 200 bytes, not starting with "amq." (reserved by RabbitMQ).
// The error wraps ErrInvalidSpec.
func ValidatePrefix(prefix string) error {
	if prefix == "" {
		prefix = DefaultPrefix
	}
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

// Validate checks s (after [Spec.WithDefaults]) without touching the network and returns every
// problem at once, joined; each wraps ErrInvalidSpec (ladder problems also wrap
// ttlbuckets.ErrInvalidLadder, bucket problems ttlbuckets.ErrInvalidBuckets). Besides the
// values' own ranges it rejects names RabbitMQ or the topology cannot take: target, ready-queue
// and ready-queue exchange names and binding keys longer than [MaxNameLen] bytes (AMQP short
// strings; the broker would close the connection), and targets, ready queues and ready-queue
// exchanges named like the topology's own objects ([Names.Reserved]: apply would stop half-way
// with a conflict on one of them).
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
	s.validateTargets(names, add)
	if err := s.Ladder.Validate(); err != nil {
		errs = append(errs, fmt.Errorf("%w: ladder: %w", ErrInvalidSpec, err))
	}
	if _, err := ttlbuckets.NewBuckets(s.Buckets...); err != nil {
		errs = append(errs, fmt.Errorf("%w: buckets: %w", ErrInvalidSpec, err))
	}
	switch s.Plugin {
	case PluginAuto, PluginOff, PluginOn:
	default:
		add("plugin mode %q: want off, auto or on", s.Plugin)
	}
	switch s.QueueType {
	case Quorum, Classic:
	default:
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
	s.validateReadyQueues(names, add)
	return errors.Join(errs...)
}

// problemFunc adds one problem of a [Spec.Validate], formatted as fmt.Errorf does.
type problemFunc func(format string, args ...any)

// validateTargets adds the problems of s's targets (s with its defaults).
func (s Spec) validateTargets(names Names, add problemFunc) {
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
		switch t.Type {
		case "", "direct", "fanout", "topic", "headers":
		default:
			add("target %q: exchange type %q: want direct, fanout, topic or headers", t.Name, t.Type)
		}
	}
}

// validateReadyQueues adds the problems of s's ready queues (s with its defaults).
func (s Spec) validateReadyQueues(names Names, add problemFunc) {
	seenReady := map[ReadyQueue]bool{}
	for _, r := range s.ReadyQueues {
		if seenReady[r] {
			add("ready queue %q is listed twice", shorten(r.String()))
		}
		seenReady[r] = true
		if r.Queue == "" || r.Exchange == "" {
			add("ready queue %q: want queue=exchange:bindingkey", shorten(r.String()))
		}
		if BrokerReserved(r.Queue) {
			add("ready queue %q: queue names starting with \"amq.\" are reserved by RabbitMQ", shorten(r.Queue))
		}
		for _, f := range []struct{ what, v string }{{"queue name", r.Queue}, {"exchange name", r.Exchange}, {"binding key", r.BindingKey}} {
			if len(f.v) > MaxNameLen {
				add("ready queue %q: the %s is %d bytes: at most %d", shorten(r.String()), f.what, len(f.v), MaxNameLen)
			}
			// A binding key may hold control characters, but queue.bind takes it as UTF-8 (RabbitMQ
			// closes the connection otherwise: 501 FRAME_ERROR).
			problem := NameProblem(f.v)
			if f.what == "binding key" && utf8.ValidString(f.v) {
				problem = ""
			}
			if problem != "" {
				add("ready queue %q: the %s %s: correct it", shorten(r.String()), f.what, problem)
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

// NameProblem says what makes name unusable as an exchange or queue name ("is not valid UTF-8",
// "holds a control character (U+000A at byte 6)"), or returns "" when nothing does.
// RabbitMQ takes these names as UTF-8 (https://www.rabbitmq.com/docs/exchanges#names): a
// declare with a name that is not UTF-8 closes the whole connection (501 FRAME_ERROR
// "Malformed UTF-8 in shortstr"). A control character makes the name mean two things on
// RabbitMQ 3.10: exchange.declare drops CR and LF from it, basic.publish keeps them.
func NameProblem(name string) string {
	if !utf8.ValidString(name) {
		return "is not valid UTF-8"
	}
	if i := strings.IndexFunc(name, unicode.IsControl); i >= 0 {
		return fmt.Sprintf("holds a control character (%U at byte %d)", []rune(name[i:])[0], i)
	}
	return ""
}

// MaxNameLen is the longest exchange name, queue name or routing/binding key in bytes: AMQP
// 0-9-1 sends them as a short string (shortstr), one length byte
// (https://www.rabbitmq.com/amqp-0-9-1-reference#domain.exchange-name).
const MaxNameLen = 255

// shorten cuts a name for an error message to at most 80 bytes (names may be longer than
// RabbitMQ allows).
func shorten(name string) string {
	if len(name) <= 80 {
		return name
	}
	head, tail := 60, len(name)-17
	for head > 0 && !utf8.RuneStart(name[head]) { // never in the middle of a character
		head--
	}
	for tail < len(name) && !utf8.RuneStart(name[tail]) {
		tail++
	}
	return name[:head] + "..." + name[tail:]
}

// HasTarget reports whether name is one of s's targets.
func (s Spec) HasTarget(name string) bool {
	for _, t := range s.Targets {
		if t.Name == name {
			return true
		}
	}
	return false
}

// revocationMargin is how much longer than the topology's longest delay the revocation stream
// keeps a record ([Spec.RevocationRetention]): room for a message's lateness, a consumer's
// retries and clocks that differ between hosts.
const revocationMargin = 24 * time.Hour

// MaxDelay returns the longest delay any path of s can carry: the ladder's maximum, the
// longest bucket, and with the plugin possible (Plugin not off) the plugin's 2^32-1 ms.
func (s Spec) MaxDelay() time.Duration {
	s = s.WithDefaults()
	m := s.Ladder.Max
	for _, b := range s.Buckets {
		m = max(m, b)
	}
	if s.Plugin != PluginOff {
		m = max(m, ttlbuckets.DefaultMax) // the plugin's x-delay ceiling, 2^32-1 ms
	}
	return m
}

// RevocationRetention is how long a revocation is kept, in the stream (its x-max-age) and in a
// reader's memory: [Spec.MaxDelay] plus 24 h (revocationMargin), rounded up to whole hours. A copy
// published before a revocation is due within MaxDelay of it, so it is never delivered after
// its revocation has been forgotten. The default topology's is 1,218 h (50.75 days).
func (s Spec) RevocationRetention() time.Duration {
	return (s.MaxDelay() + revocationMargin + time.Hour - 1).Truncate(time.Hour)
}

// LadderOrBuckets returns the spec's ladder (with defaults) and its buckets. It returns the
// buckets' error wrapped with ErrInvalidSpec when they are invalid.
func (s Spec) LadderOrBuckets() (ttlbuckets.Ladder, ttlbuckets.Buckets, error) {
	s = s.WithDefaults()
	b, err := ttlbuckets.NewBuckets(s.Buckets...)
	if err != nil {
		return s.Ladder, ttlbuckets.Buckets{}, fmt.Errorf("%w: buckets: %w", ErrInvalidSpec, err)
	}
	return s.Ladder, b, nil
}
