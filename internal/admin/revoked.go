package admin

import (
	"fmt"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/delaykit/rabbitdelay/internal/delayspec"
)

// The revocation stream: where amqpdelay's Publisher.Revoke records which delayed messages must
// not reach a handler, and where package revoke's readers (and the consumer package) read them.
//
//	<prefix>.revoked   stream (x-queue-type stream, x-max-age [Spec.RevocationRetention])
//
// A stream is an append-only, replicated log that every reader reads from its start
// (https://www.rabbitmq.com/docs/streams; RabbitMQ 3.9 and later, stream_queue feature flag).
// Nothing is bound to it: records are published to the default exchange with the stream's
// name as routing key.

// RoleRevoked is the revocation stream ([Names.Revoked]).
const RoleRevoked Role = "revoked"

// revokedArgs are the stream's arguments: x-max-age in hours ("<n>h", a unit RabbitMQ's
// x-max-age takes: Y, M, D, h, m, s). RabbitMQ deletes whole segment files once all their
// records are older, so a record is kept at least that long.
func revokedArgs(s delayspec.Spec) amqp.Table {
	return amqp.Table{"x-queue-type": "stream", "x-max-age": revokedMaxAge(s)}
}

// revokedMaxAge is the stream's retention as a max-age value: whole hours, "<n>h".
func revokedMaxAge(s delayspec.Spec) string {
	return fmt.Sprintf("%dh", int64(s.RevocationRetention()/time.Hour))
}

// addRevoked adds the revocation stream to p (called by NewPlan).
func (p *Plan) addRevoked() {
	p.Queues = append(p.Queues, Queue{Name: p.Names.Revoked(), Args: revokedArgs(p.Spec), Role: RoleRevoked, Level: -1, Digit: -1, Slot: -1})
}
