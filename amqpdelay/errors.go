package amqpdelay

import (
	"errors"

	"github.com/delaykit/rabbitdelay/plugin"
)

// Sentinel errors. Every error the Publisher returns wraps at least one (errors.Is); a broker
// refusal stays reachable with errors.As(err, **amqp091.Error).
var (
	// ErrDelayTooLong: no path carries the delay; the message states the maximum. Nothing sent.
	ErrDelayTooLong = errors.New("amqpdelay: delay too long")
	// ErrUnknownTarget: a delayed message's exchange is not a target (or is ""). Nothing sent.
	ErrUnknownTarget = errors.New("amqpdelay: unknown target exchange")
	// ErrUnroutable: the broker returned a mandatory message (no binding on the direct path, an
	// incomplete topology on the bucket and ladder paths). Not stored.
	ErrUnroutable = errors.New("amqpdelay: message unroutable")
	// ErrNacked: the broker answered basic.nack (a queue error, or a full quorum queue). Not
	// stored; publishing again may succeed.
	ErrNacked = errors.New("amqpdelay: message nacked by the broker")
	// ErrPluginUnavailable: the strategy needs the plugin exchange, which does not exist.
	ErrPluginUnavailable = plugin.ErrUnavailable
	// ErrConnectionLost: the channel or connection closed before the confirm: outcome unknown.
	// A channel closed by a refusal (403, 404, 406) does not give it: its publishes go again.
	ErrConnectionLost = errors.New("amqpdelay: connection lost before the broker confirmed the message")
	// ErrExchangeNotFound: RabbitMQ's 404 for the exchange published to, wrapped. Not stored.
	ErrExchangeNotFound = errors.New("amqpdelay: exchange not found")
	// ErrAccessRefused: RabbitMQ's 403 (write or topic permission, internal exchange),
	// wrapped. Not stored.
	ErrAccessRefused = errors.New("amqpdelay: access refused")
	// ErrNotRevoked: Reschedule published the new copy (its Receipt is valid) but did not
	// revoke the old ones, which will arrive too; the cause is wrapped.
	ErrNotRevoked = errors.New("amqpdelay: rescheduled, but the old copies are not revoked")
	// ErrClosed: the Publisher was closed (before or during the call).
	ErrClosed = errors.New("amqpdelay: publisher closed")
	// ErrInvalidInput: an argument the Publisher or AMQP cannot carry (nil context, short
	// string over 255 bytes, NaN header, headers over frame_max, ...), named with the limit.
	// Nothing sent.
	ErrInvalidInput = errors.New("amqpdelay: invalid input")
	// ErrInvalidConfig: NewPublisher refused its configuration; every problem at once.
	ErrInvalidConfig = errors.New("amqpdelay: invalid configuration")
	// ErrTopologyMissing: no spec record, a missing object (named), a record changed since
	// start, or no revocation stream: run `rabbitdelay apply`.
	ErrTopologyMissing = errors.New("amqpdelay: delay topology not declared")
	// ErrTopologyUnsafe: with Config.Management, a policy breaks a guarantee (each named).
	ErrTopologyUnsafe = errors.New("amqpdelay: a policy breaks the delay topology's guarantees")
)
