package amqpdelay

import (
	"github.com/delaykit/rabbitdelay/internal/delayspec"
	"github.com/delaykit/rabbitdelay/internal/pubhook"

	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
)

// Option configures a Publisher; pass options to [NewPublisher]. An option given a value it
// cannot use makes NewPublisher fail with an error wrapping ErrInvalidConfig.
type Option func(*options) error

type options struct {
	logger      zerolog.Logger
	strategy    Strategy
	channels    int
	name        string
	backoffMin  time.Duration
	backoffMax  time.Duration
	onReconnect func(ReconnectEvent)
	maxBody     int
	management  ManagementCheck       // WithManagement (managed.go)
	metricsReg  prometheus.Registerer // WithMetrics (metrics.go)
	maxInFlight int
	// extraTargets are targets beside the spec record's (pubhook.ExtraTargets).
	extraTargets []delayspec.Target
}

func init() {
	pubhook.ExtraTargets = func(names ...string) any {
		return Option(func(o *options) error {
			for _, n := range names {
				o.extraTargets = append(o.extraTargets, delayspec.Target{Name: n})
			}
			return nil
		})
	}
}

func defaultOptions() options {
	return options{
		logger:      zerolog.Nop(),
		strategy:    Auto,
		channels:    DefaultChannels,
		name:        "rabbitdelay-publisher",
		backoffMin:  100 * time.Millisecond,
		backoffMax:  5 * time.Second,
		maxBody:     DefaultMaxMessageSize,
		maxInFlight: DefaultMaxInFlight,
	}
}

// DefaultChannels is the number of AMQP channels a Publisher publishes on (see [WithChannels]).
const DefaultChannels = 4

// WithLogger makes the Publisher log through l: connection, reconnection and probe events at
// info and warn level, never a message body, header or password. The default logs nothing
// (zerolog.Nop). The Publisher never uses the global logger.
func WithLogger(l zerolog.Logger) Option {
	return func(o *options) error { o.logger = l; return nil }
}

// WithStrategy sets how the Publisher chooses between the ladder and the plugin; the default
// is [Auto]. See the package documentation for the whole rule.
func WithStrategy(s Strategy) Option {
	return func(o *options) error {
		switch s {
		case Auto, PreferPlugin, PluginOnly, LadderOnly:
			o.strategy = s
			return nil
		}
		return fmt.Errorf("%w: strategy %d: want Auto, PreferPlugin, PluginOnly or LadderOnly", ErrInvalidConfig, int(s))
	}
}

// WithChannels sets how many AMQP channels (1 to 64) the Publisher spreads its publishes
// over, round robin; the default is [DefaultChannels]. Each channel is in confirm mode and
// pipelines its publishes, so one channel already serves many goroutines; more channels let
// the broker process them in parallel (one Erlang process per channel). Besides these, as far
// as the broker's channel_max leaves room, the Publisher opens one channel for direct
// publishes to exchanges that are not targets, one for the plugin path when the broker has the
// plugin exchange (the publishes the broker may refuse by closing their channel: a 404 or a
// 403 then costs no other publish its confirm), and, one at a time, one to check that the
// exchange of a direct publish exists. n outside 1 to 64: ErrInvalidConfig; NewPublisher fails
// with ErrInvalidConfig when the broker's channel_max is below n+1.
func WithChannels(n int) Option {
	return func(o *options) error {
		if n < 1 || n > 64 {
			return fmt.Errorf("%w: %d channels: want 1 to 64", ErrInvalidConfig, n)
		}
		o.channels = n
		return nil
	}
}

// WithConnectionName sets the connection name shown in the management UI (default
// "rabbitdelay-publisher").
func WithConnectionName(name string) Option {
	return func(o *options) error { o.name = name; return nil }
}

// MaxReconnectBackoff is the largest max [WithReconnectBackoff] accepts: 1 hour. A wait
// randomized by ±50 % around a much larger one overflows time.Duration.
const MaxReconnectBackoff = time.Hour

// WithReconnectBackoff sets the bounds of the exponential back-off between reconnection
// attempts: the first wait is about min, each next one doubles, up to about max (defaults
// 100 ms and 5 s); every wait is randomized by ±50 % (jitter). It returns ErrInvalidConfig
// unless 0 < min <= max <= [MaxReconnectBackoff].
func WithReconnectBackoff(min, max time.Duration) Option {
	return func(o *options) error {
		if min <= 0 || max < min || max > MaxReconnectBackoff {
			return fmt.Errorf("%w: reconnect back-off %v..%v: want 0 < min <= max <= %v", ErrInvalidConfig, min, max, MaxReconnectBackoff)
		}
		o.backoffMin, o.backoffMax = min, max
		return nil
	}
}

// DefaultMaxMessageSize is the largest body, in bytes (16 MiB), a Publisher sends unless
// [WithMaxMessageSize] says otherwise: RabbitMQ's default max_message_size since 4.0
// (https://www.rabbitmq.com/docs/configure, max_message_size; 128 MiB on 3.x). RabbitMQ
// answers a larger body by closing the channel (406 PRECONDITION_FAILED), which would fail
// every other publish in flight on that channel, so Publish refuses it first.
const DefaultMaxMessageSize = 16 << 20

// MaxMessageSizeLimit is the largest value [WithMaxMessageSize] accepts: RabbitMQ's own
// ceiling for max_message_size, 512 MiB.
const MaxMessageSizeLimit = 512 << 20

// WithMaxMessageSize sets the largest message body, in bytes, that Publish sends (1 to
// [MaxMessageSizeLimit]); a larger body gets ErrInvalidInput and nothing is sent. Set it to
// the broker's max_message_size (default [DefaultMaxMessageSize]). Every hop of a delayed
// message writes its body to a quorum queue's log again, so keep delayed bodies small.
func WithMaxMessageSize(bytes int) Option {
	return func(o *options) error {
		if bytes < 1 || bytes > MaxMessageSizeLimit {
			return fmt.Errorf("%w: max message size %d bytes: want 1 to %d (RabbitMQ's ceiling for max_message_size)", ErrInvalidConfig, bytes, MaxMessageSizeLimit)
		}
		o.maxBody = bytes
		return nil
	}
}

// WithReconnectHandler makes the Publisher call f on every connection event (lost,
// re-established, attempt failed). f runs on the Publisher's reconnecting goroutine: it must
// return quickly and must not call the Publisher's Close. f is not called once Close has
// begun (a reconnection attempt that Close cancels reports nothing).
func WithReconnectHandler(f func(ReconnectEvent)) Option {
	return func(o *options) error { o.onReconnect = f; return nil }
}

// ReconnectEvent describes one change of the Publisher's connection.
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

// WithManagement gives the Publisher the broker's management API through m (a
// *topology.Management for the vhost of Config.URL), so that NewPublisher, and every
// reconnection, checks what AMQP cannot see: that the dispatch exchange is bound to every
// target now (not only that `rabbitdelay apply` bound it once), that no policy or operator policy
// in effect on the topology breaks a guarantee, and on which exchanges the user has a topic
// permission ([ManagementCheck]). nil is no management API (the default). NewPublisher fails
// with ErrInvalidConfig when m reads another vhost than Config.URL's.
func WithManagement(m ManagementCheck) Option {
	return func(o *options) error {
		o.management = m
		return nil
	}
}
