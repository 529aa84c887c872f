// Package pluginprobe finds out, on a connection of its own, whether a broker has the
// delayed-message plugin and whether the topology's plugin exchange exists: the plumbing of
// amqpdelay's plugin path and of `rabbitdelay apply`. What a user publishing to a plugin
// exchange needs is in the public package plugin.
//
// Declaring an exchange of an unknown type fails, in a way that depends on the RabbitMQ
// version ([IsUnknownExchangeType]); on RabbitMQ 3.x it closes the whole connection. [Probe]
// and [ExchangeExists] therefore work on a connection of their own, which they close.
//
// Sources: the refusal of an unknown exchange type is rabbit_exchange.erl, check_type; the
// passive declare is https://www.rabbitmq.com/docs/amqp-0-9-1-reference#exchange.declare.passive.
package pluginprobe

import (
	"context"
	"errors"
	"fmt"
	"strings"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/delaykit/rabbitdelay/plugin"
)

// Dialer opens a new connection to the broker; the probes close what it returns.
type Dialer func(ctx context.Context) (*amqp.Connection, error)

// ExchangeExists reports whether the exchange named exchange exists, with a passive declare
// on a connection of its own (a passive declare of a missing exchange fails with 404
// NOT_FOUND and closes the channel). rabbitdelay's plugin exchange exists only where
// `rabbitdelay apply` found the plugin, so its existence says the plugin path can be used. A
// dial error or any other broker error is returned (the *amqp091.Error reachable with
// errors.As); ctx bounds the whole probe.
func ExchangeExists(ctx context.Context, dial Dialer, exchange string) (bool, error) {
	if ctx == nil {
		return false, errors.New("plugin: nil context")
	}
	var exists bool
	err := withChannel(ctx, dial, func(ch *amqp.Channel) error {
		err := ch.ExchangeDeclarePassive(exchange, plugin.ExchangeType, true, false, false, false, nil)
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
// exchange of type plugin.ExchangeType named name (give a name nobody else uses, e.g.
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
		err := ch.ExchangeDeclare(name, plugin.ExchangeType, false, true, false, false, amqp.Table{plugin.DelayedTypeArg: "direct"})
		switch {
		case err == nil:
			has = true
			_ = ch.ExchangeDelete(name, false, false)
			return nil
		case IsUnknownExchangeType(err):
			return nil
		default:
			return fmt.Errorf("plugin: declare probe exchange %q of type %s: %w", name, plugin.ExchangeType, err)
		}
	})
	return has, err
}

// IsUnknownExchangeType reports whether err is RabbitMQ's refusal to declare an exchange of a
// type it does not know, which is how a broker without the plugin answers a declare of type
// plugin.ExchangeType (rabbit_exchange.erl, check_type):
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
