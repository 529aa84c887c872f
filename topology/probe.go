package topology

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"

	amqp "github.com/rabbitmq/amqp091-go"
)

// DialFunc opens a new connection to the broker (see the amqpconn-based dialer of the
// declare CLI). ProbePlugin owns and closes what it returns.
type DialFunc func(ctx context.Context) (*amqp.Connection, error)

// ProbePlugin reports whether the broker has the delayed-message plugin
// (rabbitmq_delayed_message_exchange) by declaring a temporary exchange of type
// x-delayed-message named "<prefix>.plugin-probe.<random>" and deleting it again.
//
// Without the plugin the broker answers 503 COMMAND_INVALID "unknown exchange type"; on
// RabbitMQ 3.x that closes the whole connection, every channel on it (seen on 3.10.8; from 4.0
// it is a channel error). So ProbePlugin dials its own connection with dial and always closes
// it; never probe on a connection other work uses.
//
// It returns (false, nil) when the plugin is missing, (true, nil) when it is there, and an
// error otherwise: ErrAccessRefused when the user may not declare exchanges named after the
// prefix (no configure permission), or the dial error. It returns when ctx ends.
func ProbePlugin(ctx context.Context, dial DialFunc, prefix string) (bool, error) {
	conn, err := dial(ctx)
	if err != nil {
		return false, err
	}
	defer conn.Close()
	var rnd [4]byte
	_, _ = rand.Read(rnd[:])
	name := Names{Prefix: prefix}.p() + ".plugin-probe." + hex.EncodeToString(rnd[:])
	type result struct {
		ok  bool
		err error
	}
	done := make(chan result, 1)
	go func() {
		ch, err := conn.Channel()
		if err != nil {
			done <- result{err: fmt.Errorf("topology: plugin probe: open channel: %w", err)}
			return
		}
		err = ch.ExchangeDeclare(name, PluginExchangeType, false, true, false, false, amqp.Table{"x-delayed-type": amqp.ExchangeDirect})
		switch {
		case err == nil:
			_ = ch.ExchangeDelete(name, false, false)
			done <- result{ok: true}
		case code(err) == amqp.CommandInvalid || code(err) == amqp.NotAllowed && strings.Contains(err.Error(), "exchange type"):
			done <- result{}
		default:
			done <- result{err: wrapBroker(err, fmt.Sprintf("plugin probe: declare exchange %q of type %s", name, PluginExchangeType))}
		}
	}()
	select {
	case r := <-done:
		return r.ok, r.err
	case <-ctx.Done():
		_ = conn.Close()
		return false, fmt.Errorf("topology: plugin probe: %w", ctx.Err())
	}
}

// ProbePluginManagement reports whether the broker has the delayed-message plugin from the
// exchange types the management API lists; it declares nothing, so it suits read-only users.
func ProbePluginManagement(ctx context.Context, m *Management) (bool, error) {
	types, err := m.ExchangeTypes(ctx)
	if err != nil {
		return false, err
	}
	return slices.Contains(types, PluginExchangeType), nil
}
