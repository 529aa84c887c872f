package amqpdelay

import (
	"errors"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/delaykit/rabbitdelay/internal/amqpconn"
	"github.com/delaykit/rabbitdelay/internal/delayspec"
	"github.com/delaykit/rabbitdelay/internal/pubhook"
)

// options are the Publisher's settings of a Config, defaults filled in.
type options struct {
	logger       zerolog.Logger
	strategy     Strategy
	channels     int
	name         string
	backoffMin   time.Duration
	backoffMax   time.Duration
	onReconnect  func(ReconnectEvent)
	maxBody      int
	management   ManagementCheck
	metricsReg   prometheus.Registerer
	maxInFlight  int
	extraTargets []delayspec.Target // pubhook.ExtraTargets
}

func init() {
	pubhook.ExtraTargets = func(names ...string) any {
		return func(c *Config) { c.extraTargets = append(c.extraTargets, names...) }
	}
}

func defaultOptions() options {
	return options{
		logger:      zerolog.Nop(),
		strategy:    Auto,
		channels:    DefaultChannels,
		name:        "rabbitdelay-publisher",
		backoffMin:  amqpconn.DefaultReconnectMin,
		backoffMax:  amqpconn.DefaultReconnectMax,
		maxBody:     DefaultMaxMessageSize,
		maxInFlight: DefaultMaxInFlight,
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

// resolve fills in the defaults of c's zero fields and checks the others, every unusable field
// an error wrapping ErrInvalidConfig and naming it.
func (c Config) resolve() (options, error) {
	o := defaultOptions()
	var errs []error
	bad := func(format string, a ...any) {
		errs = append(errs, fmt.Errorf("%w: "+format, append([]any{ErrInvalidConfig}, a...)...))
	}
	if s := c.Strategy; s < Auto || s > LadderOnly {
		bad("Config.Strategy %d: want Auto (the zero value), PreferPlugin, PluginOnly or LadderOnly", int(s))
	} else {
		o.strategy = s
	}
	if n := c.Channels; n < 0 || n > 64 {
		bad("Config.Channels %d: want 1 to 64 (0: the default %d)", n, DefaultChannels)
	} else if n > 0 {
		o.channels = n
	}
	if n := c.MaxMessageSize; n < 0 || n > MaxMessageSizeLimit {
		bad("Config.MaxMessageSize %d bytes: want 1 to %d, RabbitMQ's ceiling for max_message_size (0: the default %d)",
			n, MaxMessageSizeLimit, DefaultMaxMessageSize)
	} else if n > 0 {
		o.maxBody = n
	}
	if n := c.MaxInFlight; n < 0 {
		bad("Config.MaxInFlight %d: want at least 1 (0: the default %d)", n, DefaultMaxInFlight)
	} else if n > 0 {
		o.maxInFlight = n
	}
	if rmin, rmax, err := amqpconn.ReconnectRange("Config", c.ReconnectMin, c.ReconnectMax); err != nil {
		bad("%w", err)
	} else {
		o.backoffMin, o.backoffMax = rmin, rmax
	}
	if c.ConnectionName != "" {
		o.name = c.ConnectionName
	}
	o.logger = c.Logger
	o.onReconnect = c.OnReconnect
	o.management = c.Management
	o.metricsReg = c.Metrics
	for _, n := range c.extraTargets {
		o.extraTargets = append(o.extraTargets, delayspec.Target{Name: n})
	}
	if err := delayspec.ValidatePrefix(c.Prefix); err != nil {
		errs = append(errs, fmt.Errorf("%w: %w", ErrInvalidConfig, err))
	}
	if err := c.conn().Validate(); err != nil {
		errs = append(errs, fmt.Errorf("%w: %w", ErrInvalidConfig, err))
	}
	if o.management != nil {
		if have, want := o.management.VHost(), vhostOf(c.conn().URLOrDefault()); have != want {
			errs = append(errs, fmt.Errorf("%w: Config.Management reads vhost %q, but Config.URL names vhost %q: "+
				"give the management check the URL's vhost (topology.NewManagement(url, %q))", ErrInvalidConfig, have, want, want))
		}
	}
	return o, errors.Join(errs...)
}

// ReconnectEvent describes one change of the Publisher's connection (Config.OnReconnect).
type ReconnectEvent struct {
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
