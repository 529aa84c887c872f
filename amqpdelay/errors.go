package amqpdelay

import (
	"errors"

	"github.com/delaykit/rabbitdelay/plugin"
)

// Sentinel errors. Every error the Publisher returns wraps at least one of them (test with
// errors.Is); the wrapping message names the exchange, the delay or the broker's reply, and a
// broker refusal stays reachable with errors.As(err, **amqp091.Error).
var (
	// ErrDelayTooLong: no path of the topology (and strategy) can carry the delay; the message
	// states the maximum. Nothing was sent.
	ErrDelayTooLong = errors.New("amqpdelay: delay too long")

	// ErrUnknownTarget: a delayed message's exchange is not one of the topology's targets (or
	// is the default exchange ""), so the dispatch exchange could never route it. Nothing was
	// sent.
	ErrUnknownTarget = errors.New("amqpdelay: unknown target exchange")

	// ErrUnroutable: the broker returned a mandatory message (basic.return) because it reached
	// no queue: on the direct path the target has no binding for the routing key; on the
	// bucket and ladder paths the delay topology is incomplete (run `rabbitdelay apply`). The
	// broker did not keep the message.
	ErrUnroutable = errors.New("amqpdelay: message unroutable")

	// ErrNacked: the broker answered the publish with basic.nack (an internal error in the
	// queue that was to store it, or a quorum queue refusing it under x-overflow:
	// reject-publish because it is full). The message was not stored; publishing again may
	// succeed.
	ErrNacked = errors.New("amqpdelay: message nacked by the broker")

	// ErrPluginUnavailable: the strategy needs the delayed-message plugin, and the broker does
	// not have it (rabbitmq_delayed_message_exchange) or `rabbitdelay apply --plugin on` was not
	// run, so the topology's plugin exchange does not exist. It is [plugin.ErrUnavailable]
	// (one sentinel for the whole module).
	ErrPluginUnavailable = plugin.ErrUnavailable

	// ErrConnectionLost: the channel or connection closed after the message was sent and
	// before the broker confirmed it. The outcome is unknown: the broker may or may not have
	// stored the message; publishing again may deliver it twice. A channel the broker closed
	// because it refused a publish (403, 404, 406) does not give it: the publishes in flight
	// there are sent again, one at a time, and each gets its own answer.
	ErrConnectionLost = errors.New("amqpdelay: connection lost before the broker confirmed the message")

	// ErrExchangeNotFound: a direct publish (delay <= 0) named an exchange that does not exist
	// in the vhost (RabbitMQ's 404 NOT_FOUND, answered to that publish alone: the first
	// publish to each exchange goes on a channel of its own). The broker's *amqp091.Error is
	// wrapped. Nothing was stored.
	ErrExchangeNotFound = errors.New("amqpdelay: exchange not found")

	// ErrAccessRefused: RabbitMQ refused a publish with 403 ACCESS_REFUSED (no write
	// permission on the exchange, no topic permission on the routing key, or an internal
	// exchange, which only exchange-to-exchange bindings may route into). The Publisher sends
	// such a publish alone on a channel of its own, so the refusal costs no other publish its
	// confirm; nothing was stored. The broker's *amqp091.Error is wrapped.
	ErrAccessRefused = errors.New("amqpdelay: access refused")

	// ErrNotRevoked: Reschedule published the new copy (the broker confirmed it; the Receipt
	// returned with this error is valid) but could not record the revocation of the old
	// copies, which will arrive too. The cause (ErrConnectionLost, ErrNacked, ctx's error, ...)
	// is wrapped. Calling Reschedule again keeps only the copy it publishes; Revoke drops all.
	ErrNotRevoked = errors.New("amqpdelay: rescheduled, but the old copies are not revoked")

	// ErrClosed: the Publisher was closed (before or during the call).
	ErrClosed = errors.New("amqpdelay: publisher closed")

	// ErrInvalidInput: a nil context, headers that AMQP cannot encode, a short string (routing
	// key, exchange, string property, header key) longer than 255 bytes, a NaN or infinite
	// float header, headers too large for one frame, a body over the maximum message size,
	// or another argument the Publisher cannot use; the message names it and the
	// limit. Nothing was sent (when amqp091 itself refused to encode the message, it closed the
	// connection, and the Publisher reconnects; the message is not retried).
	ErrInvalidInput = errors.New("amqpdelay: invalid input")

	// ErrInvalidConfig: NewPublisher refused its configuration or options; every problem is
	// reported at once.
	ErrInvalidConfig = errors.New("amqpdelay: invalid configuration")

	// ErrTopologyMissing: NewPublisher found no spec record for its prefix (the stream
	// <prefix>.spec that `rabbitdelay apply` writes), or part of the recorded topology missing:
	// the dispatch exchange, a bucket queue, a target exchange, or with Config.Management a
	// target's binding; the message names it (run `rabbitdelay apply`). After a reconnect it
	// also means the record changed since the Publisher started. Revoke and Reschedule return
	// it when the revocation stream <prefix>.revoked does not exist, naming it.
	ErrTopologyMissing = errors.New("amqpdelay: delay topology not declared")

	// ErrTopologyUnsafe: with Config.Management, NewPublisher found a policy or operator
	// policy in effect on the topology that breaks a guarantee (delays early, delay queues
	// deleted, messages dropped or stalled, wrong routing); the message names each policy,
	// key, value and object (topology.PolicyProblem) and the fix. `rabbitdelay status` reports the
	// same.
	ErrTopologyUnsafe = errors.New("amqpdelay: a policy breaks the delay topology's guarantees")
)
