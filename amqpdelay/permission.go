package amqpdelay

import (
	"context"
	"errors"
	"fmt"

	amqp "github.com/rabbitmq/amqp091-go"
)

// RabbitMQ does not check dead-lettering against permissions, so that a delayed publish is
// allowed exactly when the same direct one would be, the Publisher asks the broker before the
// first delayed publish to each target on a connection, and before every one to a topic-guarded
// target.

// checkPermitted returns nil when a delayed publish to target may go ahead. The first asks with
// the message's keys and then the empty key (probeKey), to find a topic permission the first key
// passes; a deny-list pattern is found only through Config.Management or a refusal.
func (p *Publisher) checkPermitted(ctx context.Context, target, routingKey string, headers amqp.Table) error {
	if p.refusals.permitted.has(target) && !p.refusals.topicGuarded.has(target) {
		return nil
	}
	// One first check at a time: those waiting find the target permitted by the first.
	select {
	case p.permSem <- struct{}{}:
		defer func() { <-p.permSem }()
	case <-p.closeCtx.Done():
		return ErrClosed
	case <-ctx.Done():
		return fmt.Errorf("amqpdelay: context ended while waiting to check the permission to publish to %q: %w", target, ctx.Err())
	}
	if p.refusals.permitted.has(target) && !p.refusals.topicGuarded.has(target) {
		return nil
	}
	if err := p.permitted(ctx, target, routingKey, headers); err != nil {
		return err
	}
	if !p.refusals.permitted.has(target) && !p.refusals.topicGuarded.has(target) {
		if err := p.permitted(ctx, target, probeKey, nil); errors.Is(err, ErrAccessRefused) && !p.refusals.topicGuarded.has(target) {
			return err // not a topic refusal: the write permission was taken away meanwhile
		} else if err != nil && !errors.Is(err, ErrAccessRefused) {
			return err
		}
	}
	p.refusals.permitted.add(target)
	return nil
}

// probeKey is refused by an allow-list topic pattern (^orders\.) and allowed by .* .
const probeKey = ""

// permitted asks the broker whether the user may publish to exchange with routingKey and the
// CC and BCC keys of headers: in a transaction it publishes an empty message, checked on
// receipt, and rolls it back unstored (rabbit_channel.erl). Errors: ErrAccessRefused,
// ErrExchangeNotFound, ctx's, or after four failed tries an error: never unchecked.
func (p *Publisher) permitted(ctx context.Context, exchange, routingKey string, headers amqp.Table) error {
	probe := amqp.Publishing{}
	for _, h := range []string{"CC", "BCC"} {
		if v, ok := headers[h]; ok {
			if probe.Headers == nil {
				probe.Headers = amqp.Table{}
			}
			probe.Headers[h] = v
		}
	}
	for tries := 0; ; {
		answer, err := p.askOnCheckChannel(ctx, fmt.Sprintf("check the permission to publish to %q", exchange), nil,
			func(ch *amqp.Channel) error {
				if err := ch.Tx(); err != nil {
					return err
				}
				if err := ch.PublishWithContext(context.Background(), exchange, routingKey, false, false, probe); err != nil {
					return err
				}
				return ch.TxRollback()
			})
		if err != nil {
			return err
		}
		err = answer.err
		var ae *amqp.Error
		switch {
		case err == nil:
			return nil
		case errors.As(err, &ae) && ae.Code == amqp.AccessRefused:
			if topicRefusal.MatchString(ae.Reason) {
				p.refusals.topicGuarded.add(exchange)
			}
			return fmt.Errorf("%w: RabbitMQ refuses the user a publish to exchange %q with routing key %q (%s), and a delayed "+
				"message would reach it by dead-lettering, which RabbitMQ does not check, so the Publisher refuses it; nothing was "+
				"sent: grant the user write permission on the exchange (and a topic permission that allows the key), or publish "+
				"with a key it allows: %w", ErrAccessRefused, exchange, routingKey, ae.Reason, ae)
		case errors.As(err, &ae) && ae.Code == amqp.NotFound:
			return fmt.Errorf("%w: target exchange %q does not exist (RabbitMQ answered 404 NOT_FOUND); nothing was sent: run "+
				"`rabbitdelay apply`: %w", ErrExchangeNotFound, exchange, err)
		case answer.lost:
			continue
		case tries < 3:
			tries++
			p.log.Debug().Str("exchange", exchange).Err(err).Msg("amqpdelay: could not check the permission to publish; asking again")
			continue
		default:
			// Never publish unchecked: a lost refusal would let a forbidden message through.
			return fmt.Errorf("amqpdelay: could not ask the broker whether the user may publish to exchange %q with routing "+
				"key %q (nothing was sent; publish again): %w", exchange, routingKey, err)
		}
	}
}
