package amqpdelay

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/rs/zerolog"

	"github.com/delaykit/rabbitdelay/internal/amqpconn"
	"github.com/delaykit/rabbitdelay/internal/delayspec"
	"github.com/delaykit/rabbitdelay/internal/pubhook"
)

// Config is how to reach the broker, which delay topology to use, and how the Publisher
// behaves; the rest of the topology is what `rabbitdelay apply` recorded for Prefix (the
// stream <prefix>.spec). Every zero field takes its default. [NewPublisher] refuses a field it
// cannot use with ErrInvalidConfig naming it, every field at once. JSON leaves out Management,
// OnReconnect, Logger and Metrics.
type Config struct {
	// URL is an amqp:// or amqps:// URL (https://www.rabbitmq.com/docs/uri-spec), or one
	// cluster's comma-separated (same user and vhost; a comma in a password as %2C), dialed in
	// a random order. Empty: amqp://guest:guest@localhost:5672/. AMQPDELAY_URL.
	URL string
	// TLSCA is a PEM file of CA certificates (amqps:// only); empty: the system roots.
	// AMQPDELAY_TLS_CA.
	TLSCA string
	// TLSCert and TLSKey are PEM files of a client certificate and its key (amqps:// only):
	// both or neither. AMQPDELAY_TLS_CERT, AMQPDELAY_TLS_KEY.
	TLSCert, TLSKey string
	// Prefix names the delay topology, as given to `rabbitdelay apply`; empty: "rabbitdelay".
	// AMQPDELAY_PREFIX.
	Prefix string

	// Strategy chooses between the ladder and the plugin; zero: [Auto].
	Strategy Strategy
	// Channels is how many channels the Publisher publishes on, round robin. 0:
	// [DefaultChannels]; else 1 to 64. It opens two more (checks, and publishes the broker may
	// refuse; channel_max below Channels+2: ErrInvalidConfig) and, room permitting, one each
	// for direct and plugin publishes.
	Channels int
	// MaxMessageSize is the largest body in bytes Publish sends (larger: ErrInvalidInput); set
	// it to the broker's max_message_size. 0: [DefaultMaxMessageSize]; else 1 to
	// [MaxMessageSizeLimit].
	MaxMessageSize int
	// MaxInFlight is how many [Publisher.PublishDeferred] publishes may wait for their
	// confirms at once; PublishDeferred blocks beyond. 0: [DefaultMaxInFlight]; else >= 1.
	MaxInFlight int

	// Management, when set, is checked at every connection (see [ManagementCheck]); one that
	// reads another vhost than URL's: ErrInvalidConfig.
	Management ManagementCheck `json:"-"`

	// ConnectionName is the name in the management UI; "": "rabbitdelay-publisher".
	ConnectionName string
	// ReconnectMin and ReconnectMax bound the exponential back-off between reconnection
	// attempts, each wait randomized by ±50 %. 0: 100 ms and 5 s; else 0 < ReconnectMin <=
	// ReconnectMax <= [MaxReconnectBackoff].
	ReconnectMin, ReconnectMax time.Duration
	// OnReconnect, when set, is called on every connection event until Close, on the
	// reconnecting goroutine: it must return quickly and not call [Publisher.Close].
	OnReconnect func(ReconnectEvent) `json:"-"`
	// Logger receives the Publisher's connection logs (never a body, header or password); the
	// zero Logger logs nothing.
	Logger zerolog.Logger `json:"-"`
	// Metrics, when set, is the registry for the metrics of docs/operations.md; Close
	// unregisters them. Names already registered: ErrInvalidConfig (label each Publisher with
	// prometheus.WrapRegistererWith). The outcome of publishes_total is nacked (ErrNacked),
	// unroutable (ErrUnroutable), invalid (refused before sending), refused (ErrAccessRefused,
	// ErrExchangeNotFound), lost (ErrConnectionLost), canceled (ctx), closed (ErrClosed),
	// failed, or confirmed.
	Metrics prometheus.Registerer `json:"-"`

	extraTargets []delayspec.Target // pubhook.ExtraTargets
}

func (c Config) conn() amqpconn.Config {
	return amqpconn.Config{URL: c.URL, TLSCA: c.TLSCA, TLSCert: c.TLSCert, TLSKey: c.TLSKey}
}

// ConfigFromEnv reads AMQPDELAY_URL, AMQPDELAY_TLS_CA, AMQPDELAY_TLS_CERT, AMQPDELAY_TLS_KEY
// and AMQPDELAY_PREFIX into a Config whose other fields are zero. Its error is nil:
// [NewPublisher] validates the values.
func ConfigFromEnv() (Config, error) {
	return Config{URL: os.Getenv("AMQPDELAY_URL"), TLSCA: os.Getenv("AMQPDELAY_TLS_CA"), TLSCert: os.Getenv("AMQPDELAY_TLS_CERT"),
		TLSKey: os.Getenv("AMQPDELAY_TLS_KEY"), Prefix: os.Getenv("AMQPDELAY_PREFIX")}, nil
}

// readSpec reads c's spec record; ErrTopologyMissing when there is none or it is unreadable.
func (c Config) readSpec(ctx context.Context, conn *amqp.Connection) (delayspec.Spec, error) {
	s, err := delayspec.ReadRecord(ctx, conn, c.Prefix)
	if errors.Is(err, delayspec.ErrNoRecord) || errors.Is(err, delayspec.ErrInvalidSpec) {
		return s, fmt.Errorf("%w: %w", ErrTopologyMissing, err)
	}
	if err != nil {
		return s, fmt.Errorf("amqpdelay: %w", err)
	}
	return s, nil
}

// Dial opens a connection to the broker of c as the Publisher does (address list in a random
// order, TLS files, 10 s heartbeat), named name, for an application's other clients. ctx
// bounds the dial (30 s without a deadline); the caller closes the connection. Errors wrap
// ErrInvalidConfig for a configuration that does not validate; the others are the dial's
// (never holding a password; a broker refusal reachable as *amqp091.Error).
func Dial(ctx context.Context, c Config, name string) (*amqp.Connection, error) {
	if err := c.conn().Validate(); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	return amqpconn.Dial(ctx, c.conn(), name)
}

// ManagementCheck asks the broker's management API, for one vhost, what AMQP cannot see;
// topology.NewManagement returns one. Each check stays because without it messages are lost,
// stalled or let through at runtime.
type ManagementCheck interface {
	// VHost is the vhost the check reads; NewPublisher refuses one other than Config.URL's.
	VHost() string
	// UnboundTargets returns the targets of spec the dispatch exchange is not bound to (their
	// due messages would be parked).
	UnboundTargets(ctx context.Context, spec delayspec.Spec) ([]string, error)
	// UnsafePolicies returns one line per policy in effect on spec's topology that breaks a
	// guarantee (early, dropped or stalled messages), naming the key, the object and the fix.
	UnsafePolicies(ctx context.Context, spec delayspec.Spec) ([]string, error)
	// TopicPermissionExchanges returns the exchanges on which user has a topic permission
	// (dead-lettering is not checked against permissions); an error when it may not read them.
	TopicPermissionExchanges(ctx context.Context, user string) ([]string, error)
}

// checkManaged asks Config.Management, if set: ErrTopologyMissing, ErrTopologyUnsafe.
func (p *Publisher) checkManaged(ctx context.Context) error {
	m := p.cfg.Management
	if m == nil {
		return nil
	}
	var problems []error
	unbound, err := m.UnboundTargets(ctx, p.spec)
	if err != nil {
		return fmt.Errorf("amqpdelay: check the dispatch exchange's bindings to the targets: %w", err)
	}
	for _, t := range unbound {
		problems = append(problems, fmt.Errorf("%w: target exchange %q is not bound to the dispatch exchange %q (the management API "+
			"lists no such binding): run `rabbitdelay apply` with %q among AMQPDELAY_TARGETS", ErrTopologyMissing, t, p.names.Dispatch(), t))
	}
	// Direct publishes to these go alone; a management user that may not read them leaves the
	// Publisher to learn them from refusals.
	if guarded, err := m.TopicPermissionExchanges(ctx, p.user); err == nil {
		for _, x := range guarded {
			p.refusals.topicGuarded.add(x)
		}
	}
	unsafe, err := m.UnsafePolicies(ctx, p.spec)
	if err != nil {
		return fmt.Errorf("amqpdelay: read the policies in effect on the topology: %w", err)
	}
	if len(unsafe) > 0 {
		problems = append(problems, fmt.Errorf("%w: %d policy problem(s): %s", ErrTopologyUnsafe, len(unsafe), strings.Join(unsafe, "; ")))
	}
	return errors.Join(problems...)
}

// uri is c's first URL, parsed; the zero URI when it does not parse.
func (c Config) uri() amqp.URI {
	u, err := amqp.ParseURI(c.conn().URLOrDefault())
	if err != nil {
		return amqp.URI{}
	}
	return u
}

func init() {
	pubhook.ExtraTargets = func(names ...string) any {
		return func(c *Config) {
			for _, n := range names {
				c.extraTargets = append(c.extraTargets, delayspec.Target{Name: n})
			}
		}
	}
}

const (
	// DefaultChannels is the Publisher's channels when Config.Channels is 0.
	DefaultChannels = 4
	// MaxReconnectBackoff is the largest Config.ReconnectMax: 1 hour (±50 % around a much
	// larger one overflows time.Duration).
	MaxReconnectBackoff = amqpconn.MaxReconnect
	// DefaultMaxMessageSize is the largest body in bytes when Config.MaxMessageSize is 0: 16
	// MiB, RabbitMQ 4.x's default max_message_size (https://www.rabbitmq.com/docs/configure).
	DefaultMaxMessageSize = 16 << 20
	// MaxMessageSizeLimit is the largest Config.MaxMessageSize: RabbitMQ's ceiling, 512 MiB.
	MaxMessageSizeLimit = 512 << 20
	// DefaultMaxInFlight is the deferred publishes at once when Config.MaxInFlight is 0.
	DefaultMaxInFlight = 4096
)

// resolve returns c with the defaults of its zero fields filled in, and checks the others: every
// unusable field an error wrapping ErrInvalidConfig and naming it.
func (c Config) resolve() (Config, error) {
	var errs []error
	bad := func(format string, a ...any) {
		errs = append(errs, fmt.Errorf("%w: "+format, append([]any{ErrInvalidConfig}, a...)...))
	}
	if s := c.Strategy; s < Auto || s > LadderOnly {
		bad("Config.Strategy %d: want Auto (the zero value), PreferPlugin, PluginOnly or LadderOnly", int(s))
	}
	if n := c.Channels; n < 0 || n > 64 {
		bad("Config.Channels %d: want 1 to 64 (0: the default %d)", n, DefaultChannels)
	}
	if n := c.MaxMessageSize; n < 0 || n > MaxMessageSizeLimit {
		bad("Config.MaxMessageSize %d bytes: want 1 to %d, RabbitMQ's ceiling for max_message_size (0: the default %d)",
			n, MaxMessageSizeLimit, DefaultMaxMessageSize)
	}
	if n := c.MaxInFlight; n < 0 {
		bad("Config.MaxInFlight %d: want at least 1 (0: the default %d)", n, DefaultMaxInFlight)
	}
	c.Channels, c.MaxMessageSize = cmp.Or(c.Channels, DefaultChannels), cmp.Or(c.MaxMessageSize, DefaultMaxMessageSize)
	c.MaxInFlight, c.ConnectionName = cmp.Or(c.MaxInFlight, DefaultMaxInFlight), cmp.Or(c.ConnectionName, "rabbitdelay-publisher")
	if rmin, rmax, err := amqpconn.ReconnectRange("Config", c.ReconnectMin, c.ReconnectMax); err != nil {
		bad("%w", err)
	} else {
		c.ReconnectMin, c.ReconnectMax = rmin, rmax
	}
	if err := delayspec.ValidatePrefix(c.Prefix); err != nil {
		errs = append(errs, fmt.Errorf("%w: %w", ErrInvalidConfig, err))
	}
	if err := c.conn().Validate(); err != nil {
		errs = append(errs, fmt.Errorf("%w: %w", ErrInvalidConfig, err))
	}
	if c.Management != nil {
		if have, want := c.Management.VHost(), cmp.Or(c.uri().Vhost, "/"); have != want {
			errs = append(errs, fmt.Errorf("%w: Config.Management reads vhost %q, but Config.URL names vhost %q: "+
				"give the management check the URL's vhost (topology.NewManagement(url, %q))", ErrInvalidConfig, have, want, want))
		}
	}
	return c, errors.Join(errs...)
}

// ReconnectEvent describes one change of the Publisher's connection (Config.OnReconnect).
type ReconnectEvent struct {
	// Kind is what happened.
	Kind ReconnectKind
	// Err is why the connection was lost or the attempt failed (nil for Reconnected), without
	// a password.
	Err error
	// Attempt counts the attempts since the connection was lost, from 1.
	Attempt int
	// PluginAvailable is the plugin probe's answer after a reconnection.
	PluginAvailable bool
}

// ReconnectKind is the kind of a [ReconnectEvent].
type ReconnectKind int

const (
	// Disconnected: the connection (or a channel) was lost; publishes wait for the next one.
	Disconnected ReconnectKind = iota
	// ReconnectFailed: one attempt to reconnect failed; the next one follows after the back-off.
	ReconnectFailed
	// Reconnected: a new connection is ready and publishes go on.
	Reconnected
)

// String returns "disconnected", "reconnect-failed" or "reconnected".
func (k ReconnectKind) String() string {
	return enumName([]string{"disconnected", "reconnect-failed", "reconnected"}, int(k), "ReconnectKind")
}
