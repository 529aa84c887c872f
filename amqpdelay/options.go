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

// options are the Publisher's settings of a Config, with the defaults filled in (resolve).
type options struct {
	logger      zerolog.Logger
	strategy    Strategy
	channels    int
	name        string
	backoffMin  time.Duration
	backoffMax  time.Duration
	onReconnect func(ReconnectEvent)
	maxBody     int
	management  ManagementCheck       // Config.Management (managed.go)
	metricsReg  prometheus.Registerer // Config.Metrics (metrics.go)
	maxInFlight int
	// extraTargets are targets beside the spec record's (pubhook.ExtraTargets).
	extraTargets []delayspec.Target
}

func init() {
	pubhook.ExtraTargets = func(names ...string) any {
		return func(c *Config) { c.extraTargets = append(c.extraTargets, names...) }
	}
}

// The defaults of Config.ConnectionName, ReconnectMin and ReconnectMax.
const (
	defaultName         = "rabbitdelay-publisher"
	defaultReconnectMin = amqpconn.DefaultReconnectMin
	defaultReconnectMax = amqpconn.DefaultReconnectMax
)

func defaultOptions() options {
	return options{
		logger:      zerolog.Nop(),
		strategy:    Auto,
		channels:    DefaultChannels,
		name:        defaultName,
		backoffMin:  defaultReconnectMin,
		backoffMax:  defaultReconnectMax,
		maxBody:     DefaultMaxMessageSize,
		maxInFlight: DefaultMaxInFlight,
	}
}

// DefaultChannels is the number of AMQP channels a Publisher publishes on when
// Config.Channels is 0.
const DefaultChannels = 4

// MaxReconnectBackoff is the largest Config.ReconnectMax: 1 hour. A wait randomized by ±50 %
// around a much larger one overflows time.Duration.
const MaxReconnectBackoff = amqpconn.MaxReconnect

// DefaultMaxMessageSize is the largest body, in bytes (16 MiB), a Publisher sends when
// Config.MaxMessageSize is 0: RabbitMQ's default max_message_size since 4.0
// (https://www.rabbitmq.com/docs/configure, max_message_size; 128 MiB on 3.x). RabbitMQ
// answers a larger body by closing the channel (406 PRECONDITION_FAILED); Publish refuses it
// first, naming the limit.
const DefaultMaxMessageSize = 16 << 20

// MaxMessageSizeLimit is the largest Config.MaxMessageSize: RabbitMQ's own ceiling for
// max_message_size, 512 MiB.
const MaxMessageSizeLimit = 512 << 20

// DefaultMaxInFlight is the number of deferred publishes a Publisher runs at once when
// Config.MaxInFlight is 0.
const DefaultMaxInFlight = 4096

// resolve fills in the defaults of c's zero Publisher fields and checks the others; the error
// joins one error per unusable field, each wrapping ErrInvalidConfig and naming the field.
func (c Config) resolve() (options, error) {
	o := defaultOptions()
	var errs []error
	bad := func(format string, a ...any) {
		errs = append(errs, fmt.Errorf("%w: "+format, append([]any{ErrInvalidConfig}, a...)...))
	}

	switch s := c.Strategy; s {
	case Auto, PreferPlugin, PluginOnly, LadderOnly:
		o.strategy = s
	default:
		bad("Config.Strategy %d: want Auto (the zero value), PreferPlugin, PluginOnly or LadderOnly", int(s))
	}

	switch n := c.Channels; {
	case n == 0:
	case n < 1 || n > 64:
		bad("Config.Channels %d: want 1 to 64 (0: the default %d)", n, DefaultChannels)
	default:
		o.channels = n
	}

	switch n := c.MaxMessageSize; {
	case n == 0:
	case n < 1 || n > MaxMessageSizeLimit:
		bad("Config.MaxMessageSize %d bytes: want 1 to %d, RabbitMQ's ceiling for max_message_size (0: the default %d)",
			n, MaxMessageSizeLimit, DefaultMaxMessageSize)
	default:
		o.maxBody = n
	}

	switch n := c.MaxInFlight; {
	case n == 0:
	case n < 1:
		bad("Config.MaxInFlight %d: want at least 1 (0: the default %d)", n, DefaultMaxInFlight)
	default:
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
	return o, errors.Join(errs...)
}

// ReconnectEvent describes one change of the Publisher's connection (Config.OnReconnect).
type ReconnectEvent struct {
	// Kind says what happened.
	Kind ReconnectKind
	// Err is why the connection was lost or the attempt failed (nil for Reconnected); it
	// never contains a password.
	Err error
	// Attempt counts the attempts since the connection was lost (1 for the first).
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
	switch k {
	case Disconnected:
		return "disconnected"
	case ReconnectFailed:
		return "reconnect-failed"
	case Reconnected:
		return "reconnected"
	}
	return fmt.Sprintf("ReconnectKind(%d)", int(k))
}
