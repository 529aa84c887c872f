package delayspec

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/kelseyhightower/envconfig"

	"github.com/delaykit/rabbitdelay/internal/amqpconn"
	"github.com/delaykit/rabbitdelay/ttlbuckets"
)

// EnvPrefix is the prefix of every environment variable that configures rabbitdelay
// (AMQPDELAY_URL, AMQPDELAY_PREFIX, ...). The rabbitdelay CLI and the amqpdelay client read the same
// variables; their names are a public contract.
const EnvPrefix = "AMQPDELAY"

// Env is the AMQPDELAY_* variables, one field per variable, as [ReadEnv] reads them: the
// connection ([Env.Conn]) and the [Spec] ([Env.Spec]). The envconfig tags are the variables' full names. Each field's type parses and checks
// its value (a Decode method, also used for the rabbitdelay CLI's flags), so a value that cannot
// be right is refused naming its variable or flag. A variable that is set but empty counts as
// unset: the field keeps its zero value, which means the default.
type Env struct {
	// URL is the broker URL or address list ([amqpconn.Config.URL]); default
	// amqp://guest:guest@localhost:5672/.
	URL string `envconfig:"AMQPDELAY_URL"`
	// TLSCA is a PEM file of CA certificates (amqps:// only).
	TLSCA string `envconfig:"AMQPDELAY_TLS_CA"`
	// TLSCert is a PEM client certificate (amqps:// only; with TLSKey).
	TLSCert string `envconfig:"AMQPDELAY_TLS_CERT"`
	// TLSKey is the PEM key of TLSCert.
	TLSKey string `envconfig:"AMQPDELAY_TLS_KEY"`
	// Prefix is [Spec.Prefix].
	Prefix string `envconfig:"AMQPDELAY_PREFIX"`
	// Targets is [Spec.Targets]: comma-separated name or name:type.
	Targets Targets `envconfig:"AMQPDELAY_TARGETS"`
	// Buckets is [Spec.Buckets]: comma-separated durations.
	Buckets Delays `envconfig:"AMQPDELAY_BUCKETS"`
	// LadderUnit is the ladder's Unit.
	LadderUnit LadderUnit `envconfig:"AMQPDELAY_LADDER_UNIT"`
	// LadderRadix is the ladder's Radix.
	LadderRadix LadderRadix `envconfig:"AMQPDELAY_LADDER_RADIX"`
	// LadderMax is the ladder's Max.
	LadderMax LadderMax `envconfig:"AMQPDELAY_LADDER_MAX"`
	// LadderOrder is the ladder's Order.
	LadderOrder LadderOrder `envconfig:"AMQPDELAY_LADDER_ORDER"`
	// Plugin is [Spec.Plugin].
	Plugin PluginMode `envconfig:"AMQPDELAY_PLUGIN"`
	// QueueType is [Spec.QueueType].
	QueueType QueueType `envconfig:"AMQPDELAY_QUEUE_TYPE"`
	// ReadyQueues is [Spec.ReadyQueues]: comma-separated queue=exchange:bindingkey.
	ReadyQueues ReadyQueues `envconfig:"AMQPDELAY_READY_QUEUES"`
	// ReadyDeliveryLimit is [Spec.ReadyDeliveryLimit].
	ReadyDeliveryLimit DeliveryLimit `envconfig:"AMQPDELAY_READY_DELIVERY_LIMIT"`
	// PolicyPriority is [Spec.PolicyPriority].
	PolicyPriority PolicyPriority `envconfig:"AMQPDELAY_POLICY_PRIORITY"`
	// Shards is [Spec.Shards].
	Shards Shards `envconfig:"AMQPDELAY_SHARDS"`
}

// Conn returns the connection settings e holds.
func (e Env) Conn() amqpconn.Config {
	return amqpconn.Config{URL: e.URL, TLSCA: e.TLSCA, TLSCert: e.TLSCert, TLSKey: e.TLSKey}
}

// Spec returns the specification e holds; zero fields mean the defaults.
func (e Env) Spec() Spec {
	return Spec{
		Prefix:  e.Prefix,
		Targets: e.Targets,
		Buckets: e.Buckets,
		Ladder: ttlbuckets.Ladder{Unit: time.Duration(e.LadderUnit), Radix: int(e.LadderRadix),
			Max: time.Duration(e.LadderMax), Order: ttlbuckets.Order(e.LadderOrder)},
		Plugin:             e.Plugin,
		QueueType:          e.QueueType,
		ReadyQueues:        e.ReadyQueues,
		ReadyDeliveryLimit: int(e.ReadyDeliveryLimit),
		PolicyPriority:     int(e.PolicyPriority),
		Shards:             int(e.Shards),
	}
}

// ReadEnv fills dst, a pointer to [Env] or to a struct that embeds it and adds variables of
// its own (as the rabbitdelay CLI does), from the environment with envconfig. It is the one
// reader of the AMQPDELAY_* variables. A value that its field's type refuses is returned as a
// [*ValueError] naming the variable (envconfig stops at the first one; the error never quotes
// AMQPDELAY_URL); what depends on several values is left to [Spec.Validate]. Other errors (dst
// not a pointer to a struct) wrap ErrInvalidSpec.
func ReadEnv(dst any) error {
	// No prefix: the tags are the full names.
	err := envconfig.Process("", dst)
	var pe *envconfig.ParseError
	if errors.As(err, &pe) {
		return &ValueError{Name: pe.KeyName, Value: pe.Value, Err: pe.Err}
	}
	if err != nil {
		return fmt.Errorf("%w: reading the %s_* variables: %w", ErrInvalidSpec, EnvPrefix, err)
	}
	return nil
}

// ValueError is a setting whose value does not parse, or cannot be right whatever the other
// settings are, named as the user wrote it: an environment variable ("AMQPDELAY_LADDER_RADIX")
// or a flag with its dashes ("--radix"). Its message reads
// `AMQPDELAY_LADDER_RADIX="7": want 2, 4, 8, 16, 32 or 64` or `--radix 7: want ...`. It wraps
// ErrInvalidSpec and Err. No setting that holds a URL produces one.
type ValueError struct {
	// Name is the variable, or the flag with its leading "--".
	Name string
	// Value is the value given.
	Value string
	// Err says what is wrong and what to write instead.
	Err error
}

// Error gives the name, the value and what is wrong with it.
func (e *ValueError) Error() string {
	if strings.HasPrefix(e.Name, "-") {
		v := shorten(e.Value)
		if v == "" || strings.ContainsAny(v, " \t\n\"'\\$`") {
			v = strconv.Quote(v)
		}
		return e.Name + " " + v + ": " + e.Err.Error()
	}
	return fmt.Sprintf("%s=%q: %v", e.Name, shorten(e.Value), e.Err)
}

// Unwrap returns ErrInvalidSpec and Err.
func (e *ValueError) Unwrap() []error { return []error{ErrInvalidSpec, e.Err} }

// LadderUnit is a ladder's unit (AMQPDELAY_LADDER_UNIT, --unit).
type LadderUnit time.Duration

// Decode sets *u from a Go duration that is a whole number of milliseconds, at least 1ms
// (an envconfig.Decoder); "" sets 0 (the default, 1ms). An explicit zero is refused: it is a
// mistake, not a request for the default.
func (u *LadderUnit) Decode(s string) error {
	if s == "" {
		*u = 0
		return nil
	}
	d, err := parseDuration(s, "a whole number of milliseconds, at least 1ms, e.g. 1ms or 10ms")
	if err == nil && (d <= 0 || d%time.Millisecond != 0) {
		err = errors.New("want a whole number of milliseconds, at least 1ms, e.g. 1ms or 10ms (leave it unset for the default, 1ms)")
	}
	if err != nil {
		return err
	}
	*u = LadderUnit(d)
	return nil
}

// LadderMax is a ladder's largest delay (AMQPDELAY_LADDER_MAX, --max-delay).
type LadderMax time.Duration

// Decode sets *m from a positive Go duration such as 24h or 720h (an envconfig.Decoder); ""
// sets 0 (the default, 2^32-1 ms). Whether it fits the ladder's unit and radix is checked by
// [Spec.Validate].
func (m *LadderMax) Decode(s string) error {
	if s == "" {
		*m = 0
		return nil
	}
	d, err := parseDuration(s, "at least one ladder unit, e.g. 24h or 720h")
	if err == nil && d <= 0 {
		err = errors.New("want at least one ladder unit, e.g. 24h or 720h (leave it unset for the default, 2^32-1 ms)")
	}
	if err != nil {
		return err
	}
	*m = LadderMax(d)
	return nil
}

// parseDuration parses a Go duration, with a message saying what to write instead.
func parseDuration(s, want string) (time.Duration, error) {
	d, err := time.ParseDuration(s)
	if err != nil {
		if strings.Trim(s, "0123456789.hmsuµn") == "" {
			return 0, errors.New("too long for a Go duration (at most about 2562047h)")
		}
		return 0, fmt.Errorf("not a duration: want %s", want)
	}
	return d, nil
}

// LadderRadix is a ladder's radix (AMQPDELAY_LADDER_RADIX, --radix).
type LadderRadix int

// Decode sets *r from a decimal integer, 2, 4, 8, 16, 32 or 64 (an envconfig.Decoder); "" sets
// 0 (the default, 16).
func (r *LadderRadix) Decode(s string) error {
	if s == "" {
		*r = 0
		return nil
	}
	n, err := strconv.Atoi(s)
	switch {
	case err != nil:
		return errors.New("not a decimal integer: want 2, 4, 8, 16, 32 or 64")
	case n == 0:
		return errors.New("want 2, 4, 8, 16, 32 or 64 (leave it unset for the default, 16)")
	case n < 2 || n > 64 || n&(n-1) != 0:
		return errors.New("want 2, 4, 8, 16, 32 or 64")
	}
	*r = LadderRadix(n)
	return nil
}

// LadderOrder is a ladder's hop order (AMQPDELAY_LADDER_ORDER, --order).
type LadderOrder ttlbuckets.Order

// Decode sets *o from "top-split", "shortest-first", "longest-first" or "top-first" (an
// envconfig.Decoder); "" sets top-split, the default.
func (o *LadderOrder) Decode(s string) error {
	v, err := ttlbuckets.ParseOrder(s)
	if err != nil {
		return errors.New("want top-split (the default), shortest-first, longest-first or top-first")
	}
	*o = LadderOrder(v)
	return nil
}

// DeliveryLimit is the x-delivery-limit of quorum ready queues
// (AMQPDELAY_READY_DELIVERY_LIMIT, --ready-delivery-limit; see [Spec.ReadyDeliveryLimit]).
type DeliveryLimit int

// Decode sets *l from a decimal integer, at least 1, or -1 for none (an envconfig.Decoder); ""
// sets 0 (the default, [DefaultReadyDeliveryLimit]). 0 is refused: leave it unset instead.
func (l *DeliveryLimit) Decode(s string) error {
	return decodeInt(s, (*int)(l), func(n int) bool { return n >= 1 || n == NoReadyDeliveryLimit },
		fmt.Sprintf("want a positive number of returns (default %d), or -1 for none", DefaultReadyDeliveryLimit))
}

// decodeInt sets *dst from a decimal integer that ok accepts, "" to 0 (the default); want says
// what to write instead.
func decodeInt(s string, dst *int, ok func(int) bool, want string) error {
	if s == "" {
		*dst = 0
		return nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || !ok(n) {
		return errors.New(want)
	}
	*dst = n
	return nil
}

// PolicyPriority is the priority of the topology's policies (AMQPDELAY_POLICY_PRIORITY,
// --policy-priority; see [Spec.PolicyPriority]).
type PolicyPriority int

// Decode sets *p from a positive decimal integer (an envconfig.Decoder); "" sets 0 (the
// default, [DefaultPolicyPriority]).
func (p *PolicyPriority) Decode(s string) error {
	return decodeInt(s, (*int)(p), func(n int) bool { return n > 0 },
		fmt.Sprintf("want a positive integer, above every other policy's priority (default %d)", DefaultPolicyPriority))
}

// Shards is the number of shards of the ladder (AMQPDELAY_SHARDS, --shards; see
// [Spec.Shards]).
type Shards int

// Decode sets *n from a decimal integer from 1 to [MaxShards] (an envconfig.Decoder); "" sets 0
// (the default: one ladder).
func (n *Shards) Decode(s string) error {
	return decodeInt(s, (*int)(n), func(v int) bool { return v >= 1 && v <= MaxShards },
		fmt.Sprintf("want 1 (one ladder, the default) to %d shards of the ladder", MaxShards))
}
