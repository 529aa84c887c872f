// Package pluginprobe finds out whether a broker has the delayed-message plugin and whether the
// topology's plugin exchange exists, for amqpdelay's plugin path and `rabbitdelay apply`. A
// declare of an unknown exchange type closes the whole connection on RabbitMQ 3.x, so [Probe]
// and [ExchangeExists] dial their own. Sources: rabbit_exchange.erl, check_type;
// https://www.rabbitmq.com/docs/amqp-0-9-1-reference#exchange.declare.passive.
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

// ExchangeExists reports whether exchange exists (a passive declare, 404: no) on a connection of
// its own; the plugin exchange exists only where `rabbitdelay apply` found the plugin. Dial and
// other broker errors are returned (*amqp091.Error reachable with errors.As); ctx bounds it.
func ExchangeExists(ctx context.Context, dial Dialer, exchange string) (bool, error) {
	var exists bool
	err := withChannel(ctx, dial, func(ch *amqp.Channel) error {
		err := ch.ExchangeDeclarePassive(exchange, plugin.ExchangeType, true, false, false, false, nil)
		var ae *amqp.Error
		switch {
		case err == nil:
			exists = true
		case !errors.As(err, &ae) || ae.Code != amqp.NotFound:
			return fmt.Errorf("plugin: passive declare of exchange %q: %w", exchange, err)
		}
		return nil
	})
	return exists, err
}

// Probe reports whether the broker has the plugin enabled by declaring, on a connection of its
// own, an auto-delete exchange of type plugin.ExchangeType named name (unique, e.g.
// "<prefix>.plugin-probe.<random>") and deleting it. An unknown-type refusal gives (false, nil);
// a 403 (configure permission on name needed), dial or other error is returned (*amqp091.Error
// reachable with errors.As); ctx bounds the whole probe.
func Probe(ctx context.Context, dial Dialer, name string) (bool, error) {
	var has bool
	err := withChannel(ctx, dial, func(ch *amqp.Channel) error {
		err := ch.ExchangeDeclare(name, plugin.ExchangeType, false, true, false, false, amqp.Table{plugin.DelayedTypeArg: "direct"})
		switch {
		case err == nil:
			has = true
			_ = ch.ExchangeDelete(name, false, false)
		case !IsUnknownExchangeType(err):
			return fmt.Errorf("plugin: declare probe exchange %q of type %s: %w", name, plugin.ExchangeType, err)
		}
		return nil
	})
	return has, err
}

// IsUnknownExchangeType reports whether err is RabbitMQ's refusal to declare an exchange of an
// unknown type (rabbit_exchange.erl, check_type): on 3.x a 503 connection error (every 503
// counts, and [amqp.ErrClosed], which the caller may see first); from 4.0 a 406 channel error
// (a 406, 405 or 540 counts when its reason mentions "exchange type").
func IsUnknownExchangeType(err error) bool {
	if errors.Is(err, amqp.ErrClosed) {
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
	if ctx == nil {
		return errors.New("plugin: nil context")
	}
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
