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

// EnvPrefix starts every variable that configures rabbitdelay (AMQPDELAY_URL, ...); the CLI and
// the clients read the same variables, whose names are a public contract.
const EnvPrefix = "AMQPDELAY"

// Env is the AMQPDELAY_* variables as [ReadEnv] reads them, one field per variable (its tag is
// the full name): the connection ([Env.Conn]) and the [Spec] field of the same name
// ([Env.Spec]; the Ladder* fields are Spec.Ladder's). Each field's type checks its value with a
// Decode method, which the CLI's flags use too. A variable set but empty counts as unset: the
// field keeps its zero value, the default.
type Env struct {
	URL                string         `envconfig:"AMQPDELAY_URL"`      // amqpconn.Config.URL
	TLSCA              string         `envconfig:"AMQPDELAY_TLS_CA"`   // PEM CA file (amqps:// only)
	TLSCert            string         `envconfig:"AMQPDELAY_TLS_CERT"` // PEM client certificate
	TLSKey             string         `envconfig:"AMQPDELAY_TLS_KEY"`  // PEM key of TLSCert
	Prefix             string         `envconfig:"AMQPDELAY_PREFIX"`
	Targets            Targets        `envconfig:"AMQPDELAY_TARGETS"` // comma-separated
	Buckets            Delays         `envconfig:"AMQPDELAY_BUCKETS"` // comma-separated
	LadderUnit         LadderUnit     `envconfig:"AMQPDELAY_LADDER_UNIT"`
	LadderRadix        LadderRadix    `envconfig:"AMQPDELAY_LADDER_RADIX"`
	LadderMax          LadderMax      `envconfig:"AMQPDELAY_LADDER_MAX"`
	LadderOrder        LadderOrder    `envconfig:"AMQPDELAY_LADDER_ORDER"`
	Plugin             PluginMode     `envconfig:"AMQPDELAY_PLUGIN"`
	QueueType          QueueType      `envconfig:"AMQPDELAY_QUEUE_TYPE"`
	ReadyQueues        ReadyQueues    `envconfig:"AMQPDELAY_READY_QUEUES"` // comma-separated
	ReadyDeliveryLimit DeliveryLimit  `envconfig:"AMQPDELAY_READY_DELIVERY_LIMIT"`
	PolicyPriority     PolicyPriority `envconfig:"AMQPDELAY_POLICY_PRIORITY"`
	Shards             Shards         `envconfig:"AMQPDELAY_SHARDS"`
}

// Conn returns the connection settings e holds.
func (e Env) Conn() amqpconn.Config {
	return amqpconn.Config{URL: e.URL, TLSCA: e.TLSCA, TLSCert: e.TLSCert, TLSKey: e.TLSKey}
}

// Spec returns the specification e holds; zero fields mean the defaults.
func (e Env) Spec() Spec {
	return Spec{Prefix: e.Prefix, Targets: e.Targets, Buckets: e.Buckets,
		Ladder: ttlbuckets.Ladder{Unit: time.Duration(e.LadderUnit), Radix: int(e.LadderRadix),
			Max: time.Duration(e.LadderMax), Order: ttlbuckets.Order(e.LadderOrder)},
		Plugin: e.Plugin, QueueType: e.QueueType, ReadyQueues: e.ReadyQueues,
		ReadyDeliveryLimit: int(e.ReadyDeliveryLimit), PolicyPriority: int(e.PolicyPriority), Shards: int(e.Shards)}
}

// ReadEnv fills dst, a pointer to [Env] or to a struct embedding it with variables of its own
// (as the CLI's), from the environment: the one reader of the AMQPDELAY_* variables. A value its
// field's type refuses is a [*ValueError] naming the variable (the first one only; it never
// quotes AMQPDELAY_URL); what depends on several values is left to [Spec.Validate]. Other
// errors (dst not a pointer to a struct) wrap ErrInvalidSpec.
func ReadEnv(dst any) error {
	err := envconfig.Process("", dst) // no prefix: the tags are the full names
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
// settings are, named as the user wrote it: a variable or a flag with its dashes. Its message
// reads `AMQPDELAY_LADDER_RADIX="7": want ...` or `--radix 7: want ...`. It wraps
// ErrInvalidSpec and Err. No setting that holds a URL produces one.
type ValueError struct {
	Name  string // the variable, or the flag with its leading "--"
	Value string // the value given
	Err   error  // what is wrong and what to write instead
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

// Decode sets *u from a Go duration that is a whole number of milliseconds, at least 1ms; ""
// sets 0 (the default, 1ms). An explicit zero is refused as a mistake.
func (u *LadderUnit) Decode(s string) error {
	return decodeDuration(s, (*time.Duration)(u), func(d time.Duration) bool { return d > 0 && d%time.Millisecond == 0 },
		"a whole number of milliseconds, at least 1ms, e.g. 1ms or 10ms", "1ms")
}

// LadderMax is a ladder's largest delay (AMQPDELAY_LADDER_MAX, --max-delay).
type LadderMax time.Duration

// Decode sets *m from a positive Go duration such as 24h; "" sets 0 (the default, 2^32-1 ms).
// Whether it fits the unit and radix is for [Spec.Validate].
func (m *LadderMax) Decode(s string) error {
	return decodeDuration(s, (*time.Duration)(m), func(d time.Duration) bool { return d > 0 },
		"at least one ladder unit, e.g. 24h or 720h", "2^32-1 ms")
}

// decodeDuration sets *dst from a Go duration that ok accepts, "" to 0; want says what to
// write instead, def what unset means.
func decodeDuration(s string, dst *time.Duration, ok func(time.Duration) bool, want, def string) error {
	if s == "" {
		*dst = 0
		return nil
	}
	d, err := time.ParseDuration(s)
	switch {
	case err != nil && strings.Trim(s, "0123456789.hmsuµn") == "":
		return errors.New("too long for a Go duration (at most about 2562047h)")
	case err != nil:
		return fmt.Errorf("not a duration: want %s", want)
	case !ok(d):
		return fmt.Errorf("want %s (leave it unset for the default, %s)", want, def)
	}
	*dst = d
	return nil
}

// LadderRadix is a ladder's radix (AMQPDELAY_LADDER_RADIX, --radix).
type LadderRadix int

// Decode sets *r from 2, 4, 8, 16, 32 or 64; "" sets 0 (the default, 16).
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

// Decode sets *o from top-split, shortest-first, longest-first or top-first; "" sets top-split.
func (o *LadderOrder) Decode(s string) error {
	v, err := ttlbuckets.ParseOrder(s)
	if err != nil {
		return errors.New("want top-split (the default), shortest-first, longest-first or top-first")
	}
	*o = LadderOrder(v)
	return nil
}

// DeliveryLimit is [Spec.ReadyDeliveryLimit] (AMQPDELAY_READY_DELIVERY_LIMIT,
// --ready-delivery-limit).
type DeliveryLimit int

// Decode sets *l from an integer, at least 1, or -1 for none; "" sets 0 (the default). 0 is
// refused: leave it unset instead.
func (l *DeliveryLimit) Decode(s string) error {
	return decodeInt(s, (*int)(l), func(n int) bool { return n >= 1 || n == NoReadyDeliveryLimit },
		fmt.Sprintf("want a positive number of returns (default %d), or -1 for none", DefaultReadyDeliveryLimit))
}

// decodeInt sets *dst from a decimal integer that ok accepts, "" to 0; want says what to
// write instead.
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

// PolicyPriority is [Spec.PolicyPriority] (AMQPDELAY_POLICY_PRIORITY, --policy-priority).
type PolicyPriority int

// Decode sets *p from a positive integer; "" sets 0 (the default).
func (p *PolicyPriority) Decode(s string) error {
	return decodeInt(s, (*int)(p), func(n int) bool { return n > 0 },
		fmt.Sprintf("want a positive integer, above every other policy's priority (default %d)", DefaultPolicyPriority))
}

// Shards is [Spec.Shards] (AMQPDELAY_SHARDS, --shards).
type Shards int

// Decode sets *n from 1 to [MaxShards]; "" sets 0 (the default: one ladder).
func (n *Shards) Decode(s string) error {
	return decodeInt(s, (*int)(n), func(v int) bool { return v >= 1 && v <= MaxShards },
		fmt.Sprintf("want 1 (one ladder, the default) to %d shards of the ladder", MaxShards))
}
