package plugin

import (
	"errors"
	"fmt"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// Names the plugin defines (its README).
const (
	ExchangeType   = "x-delayed-message"                 // the exchange type the plugin adds
	DelayedTypeArg = "x-delayed-type"                    // exchange argument: how a due message is routed
	DelayHeader    = "x-delay"                           // message header: the delay in ms, an integer
	PluginName     = "rabbitmq_delayed_message_exchange" // as rabbitmq-plugins enables it
)

// MaxDelayMs is the largest x-delay the plugin honours: 2^32-1 ms (about 49.7 days); it routes
// a message with a larger value at once. MaxDelay is the same as a time.Duration.
const (
	MaxDelayMs int64 = 1<<32 - 1
	MaxDelay         = time.Duration(MaxDelayMs) * time.Millisecond
)

var (
	// ErrUnavailable is wrapped when the broker lacks the plugin or the topology's plugin
	// exchange; amqpdelay.ErrPluginUnavailable is the same value.
	ErrUnavailable = errors.New("plugin: the delayed-message plugin is not available")
	// ErrDelayOutOfRange is wrapped by [Delay] for a delay the plugin cannot take: not above 0,
	// or above [MaxDelay] once rounded up to whole milliseconds.
	ErrDelayOutOfRange = errors.New("plugin: delay out of the plugin's range")
)

// Delay returns the x-delay value for d: whole milliseconds, rounded up (never early), and
// whether it rounded. It returns an error wrapping [ErrDelayOutOfRange], stating the range, when
// d <= 0 (publish such a message directly) or the rounded value is above [MaxDelayMs].
func Delay(d time.Duration) (ms int64, rounded bool, err error) {
	if d <= 0 {
		return 0, false, fmt.Errorf("%w: %v: the plugin takes 1 ms to %d ms (about 49.7 days)", ErrDelayOutOfRange, d, MaxDelayMs)
	}
	ms = int64(d / time.Millisecond)
	if d%time.Millisecond != 0 {
		ms++
		rounded = true
	}
	if ms > MaxDelayMs {
		return 0, false, fmt.Errorf("%w: %v is %d ms: the plugin takes at most %d ms (2^32-1 ms, about 49.7 days)", ErrDelayOutOfRange, d, ms, MaxDelayMs)
	}
	return ms, rounded, nil
}

// SetDelay sets h[DelayHeader] to ms as an int64 (a Go int would go out as a signed 32-bit
// value and wrap above about 24.8 days). h must not be nil.
func SetDelay(h amqp.Table, ms int64) { h[DelayHeader] = ms }

// ErrUnsupported returns an error saying that RabbitMQ rabbitmqVersion ("4.3.6" or "4.3")
// cannot load the plugin, or nil when it can or the version is not known: the plugin stores
// its messages in Mnesia, which RabbitMQ 4.3 removed. Callers wrap it with what to do instead.
func ErrUnsupported(rabbitmqVersion string) error {
	var major, minor int
	if _, err := fmt.Sscanf(rabbitmqVersion, "%d.%d", &major, &minor); err != nil {
		return nil
	}
	if major > 4 || major == 4 && minor >= 3 {
		return fmt.Errorf("RabbitMQ %s cannot load the delayed-message plugin (%s): it stores its messages in Mnesia, "+
			"which RabbitMQ 4.3 removed", rabbitmqVersion, PluginName)
	}
	return nil
}
