package plugin

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// ExchangeType is the exchange type the plugin adds.
const ExchangeType = "x-delayed-message"

// DelayedTypeArg is the exchange argument that names how a delayed-message exchange routes a
// message once it is due (rabbitdelay uses "headers").
const DelayedTypeArg = "x-delayed-type"

// DelayHeader is the message header that carries the delay, in milliseconds, as an integer.
const DelayHeader = "x-delay"

// PluginName is the name of the plugin, as rabbitmq-plugins enables it.
const PluginName = "rabbitmq_delayed_message_exchange"

// MaxDelayMs is the largest x-delay the plugin honours, in milliseconds: 2^32-1 ms (about
// 49.7 days). The plugin routes a message with a larger value at once.
const MaxDelayMs int64 = 1<<32 - 1

// MaxDelay is [MaxDelayMs] as a time.Duration.
const MaxDelay = time.Duration(MaxDelayMs) * time.Millisecond

var (
	// ErrUnavailable is wrapped when the broker does not have the plugin, or the topology's
	// plugin exchange has not been declared. It is rabbitdelay's one sentinel for this:
	// topology.ErrPluginUnavailable and amqpdelay.ErrPluginUnavailable are the same value.
	ErrUnavailable = errors.New("plugin: the delayed-message plugin is not available")
	// ErrDelayOutOfRange is wrapped by [Delay] for a delay the plugin cannot take: not above 0,
	// or above [MaxDelay] once rounded up to whole milliseconds.
	ErrDelayOutOfRange = errors.New("plugin: delay out of the plugin's range")
)

// Delay returns the x-delay value for d: d in whole milliseconds, rounded up (a message is
// never early), as an int64. rounded reports that d was not a whole number of milliseconds.
// It returns an error wrapping [ErrDelayOutOfRange] when d <= 0 (publish such a message
// directly: the plugin would route it at once anyway) or when the rounded value is above
// [MaxDelayMs]; the message states the range.
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

// SetDelay sets h[DelayHeader] to ms as an int64 (never a Go int, which amqp091-go would send
// as a signed 32-bit value that wraps for delays above about 24.8 days). h must not be nil.
func SetDelay(h amqp.Table, ms int64) { h[DelayHeader] = ms }

// Dialer opens a new connection to the broker; the probes close what it returns.
type Dialer func(ctx context.Context) (*amqp.Connection, error)

// ExchangeExists reports whether the exchange named exchange exists, with a passive declare
// on a connection of its own (a passive declare of a missing exchange fails with 404
// NOT_FOUND and closes the channel:
// https://www.rabbitmq.com/docs/amqp-0-9-1-reference#exchange.declare.passive).
// rabbitdelay's plugin exchange exists only where `rabbitdelay apply` found the plugin, so its
// existence says the plugin path can be used. A dial error or any other broker error is
// returned (the *amqp091.Error reachable with errors.As); ctx bounds the whole probe.
func ExchangeExists(ctx context.Context, dial Dialer, exchange string) (bool, error) {
	if ctx == nil {
		return false, errors.New("plugin: nil context")
	}
	var exists bool
	err := withChannel(ctx, dial, func(ch *amqp.Channel) error {
		err := ch.ExchangeDeclarePassive(exchange, ExchangeType, true, false, false, false, nil)
		var ae *amqp.Error
		switch {
		case err == nil:
			exists = true
			return nil
		case errors.As(err, &ae) && ae.Code == amqp.NotFound:
			return nil
		default:
			return fmt.Errorf("plugin: passive declare of exchange %q: %w", exchange, err)
		}
	})
	return exists, err
}

// Probe reports whether the broker has the plugin enabled, by declaring an auto-delete
// exchange of type [ExchangeType] named name (give a name nobody else uses, e.g.
// "<prefix>.plugin-probe.<random>") on a connection of its own, and deleting it again.
//
// Without the plugin RabbitMQ refuses the declare as an unknown exchange type, in a way that
// depends on its version (see [IsUnknownExchangeType]); Probe returns (false, nil) for every
// one of them. It needs the configure permission on name; a refusal (403 ACCESS_REFUSED),
// a dial error and any other broker error are returned, the *amqp091.Error reachable with
// errors.As. ctx bounds the whole probe, dial included.
func Probe(ctx context.Context, dial Dialer, name string) (bool, error) {
	if ctx == nil {
		return false, errors.New("plugin: nil context")
	}
	var has bool
	err := withChannel(ctx, dial, func(ch *amqp.Channel) error {
		err := ch.ExchangeDeclare(name, ExchangeType, false, true, false, false, amqp.Table{DelayedTypeArg: "direct"})
		switch {
		case err == nil:
			has = true
			_ = ch.ExchangeDelete(name, false, false)
			return nil
		case IsUnknownExchangeType(err):
			return nil
		default:
			return fmt.Errorf("plugin: declare probe exchange %q of type %s: %w", name, ExchangeType, err)
		}
	})
	return has, err
}

// IsUnknownExchangeType reports whether err is RabbitMQ's refusal to declare an exchange of a
// type it does not know, which is how a broker without the plugin answers a declare of type
// [ExchangeType] (rabbit_exchange.erl, check_type):
//
//   - RabbitMQ 3.x: 503 COMMAND_INVALID "unknown exchange type", a connection error that
//     closes the whole connection. Every 503 counts, and so does [amqp.ErrClosed], which
//     amqp091-go may report to the channel's caller when the connection closes first.
//   - RabbitMQ 4.0 and later: 406 PRECONDITION_FAILED "unknown exchange type", a channel
//     error. A 406, 405 or 540 counts when its reason mentions "exchange type" (so does
//     "invalid exchange type", for a type whose module is not registered).
func IsUnknownExchangeType(err error) bool {
	if errors.Is(err, amqp.ErrClosed) {
		// The 3.x connection-level 503 can reach the caller as a closed channel.
		return true
	}
	var ae *amqp.Error
	if !errors.As(err, &ae) {
		return false
	}
	switch ae.Code {
	case amqp.CommandInvalid:
		return true
	case amqp.PreconditionFailed, amqp.NotAllowed, amqp.NotImplemented:
		return strings.Contains(ae.Reason, "exchange type")
	}
	return false
}

// withChannel dials, opens a channel, runs f and closes everything, all bounded by ctx.
func withChannel(ctx context.Context, dial Dialer, f func(*amqp.Channel) error) error {
	conn, err := dial(ctx)
	if err != nil {
		return err
	}
	done := make(chan error, 1)
	go func() {
		ch, err := conn.Channel()
		if err != nil {
			done <- fmt.Errorf("plugin: open probe channel: %w", err)
			return
		}
		done <- f(ch)
	}()
	select {
	case err = <-done:
	case <-ctx.Done():
		err = fmt.Errorf("plugin: probe: %w", ctx.Err())
	}
	_ = conn.Close() // also ends f's call when ctx ended first
	return err
}
