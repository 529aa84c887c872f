package amqpdelay

import (
	"context"
	"errors"
	"fmt"

	amqp "github.com/rabbitmq/amqp091-go"
)

// A delayed message reaches its target exchange by dead-lettering, which RabbitMQ does not
// check against any user's permissions: the Publisher's user needs write permission on the
// delay topology's exchanges only. So that a delayed publish is allowed exactly when the same
// publish made directly would be, the Publisher asks the broker before the first delayed
// publish to each target on a connection (the write permission on the target, and the topic
// permission on that routing key) and before every delayed publish to a target on which the
// user has a topic permission (refusal.go, check 5: read through the management API, or learnt
// from a refusal, this probe's included).

// checkPermitted returns nil when a delayed publish to target with routingKey and headers'
// CC and BCC keys may go ahead: the first on this connection asks the broker (permitted) with
// those keys and, when they are allowed, once more with the empty key (probeKey), so that a
// topic permission on target is found even when the user's first key passes it; later ones ask
// again only when target is topicGuarded. A topic permission that allows the empty key but
// refuses others (a deny-list pattern such as ^(?!secret\.)) is found only through the
// management API (Config.Management) or a direct publish's refusal, and one set while the
// Publisher runs only at its next connection.
func (p *Publisher) checkPermitted(ctx context.Context, target, routingKey string, headers amqp.Table) error {
	if p.refusals.permitted.has(target) && !p.refusals.topicGuarded.has(target) {
		return nil
	}
	// One first check at a time: the publishes that wait here find the target permitted by
	// the first, instead of asking again each.
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

// probeKey is the routing key checkPermitted asks about to find a topic permission: the empty
// key, which an allow-list pattern (one that names the keys it allows, like ^orders\. or
// ^[^.]+\.[^.]+$) refuses, while a pattern that allows every key (.*) allows it too.
const probeKey = ""

// permitted asks the broker whether the Publisher's user may publish to exchange with
// routingKey and the CC and BCC routing keys of headers (RabbitMQ 4.x checks those too): on a
// channel of its own in transaction mode it publishes an empty message with those keys and
// rolls the transaction back. RabbitMQ checks the write permission on the exchange and the
// topic permission on the keys when it takes a basic.publish, and a channel in transaction
// mode holds what it took until tx.commit, so tx.rollback discards the message unstored
// (rabbit_channel.erl: handle_method basic.publish, check_write_permitted,
// check_topic_authorisation; the tx field). It returns nil when allowed, an error wrapping
// ErrAccessRefused when refused, ErrExchangeNotFound when exchange is missing, or ctx's
// error; when the broker cannot be asked for another reason (four tries), an error: it never
// lets a publish go unchecked. It asks on the check channel (askOnCheckChannel), which reads
// the refusal from the channel's close when the broker closed it before tx.rollback.
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
				p.refusals.topicGuarded.add(exchange) // from now on, every delayed publish to it is checked
			}
			return fmt.Errorf("%w: RabbitMQ refuses the user a publish to exchange %q with routing key %q (%s), and a delayed "+
				"message would reach it by dead-lettering, which RabbitMQ does not check, so the Publisher refuses it; nothing was "+
				"sent: grant the user write permission on the exchange (and a topic permission that allows the key), or publish "+
				"with a key it allows: %w", ErrAccessRefused, exchange, routingKey, ae.Reason, ae)
		case errors.As(err, &ae) && ae.Code == amqp.NotFound:
			return fmt.Errorf("%w: target exchange %q does not exist (RabbitMQ answered 404 NOT_FOUND); nothing was sent: run "+
				"`rabbitdelay apply`: %w", ErrExchangeNotFound, exchange, err)
		case answer.lost:
			continue // the connection went during the check: check again on the next one
		case tries < 3:
			tries++
			p.log.Debug().Str("exchange", exchange).Err(err).Msg("amqpdelay: could not check the permission to publish; asking again")
			continue
		default:
			// Never publish unchecked: a refusal whose reason was lost would let a forbidden
			// message through.
			return fmt.Errorf("amqpdelay: could not ask the broker whether the user may publish to exchange %q with routing "+
				"key %q (nothing was sent; publish again): %w", exchange, routingKey, err)
		}
	}
}
