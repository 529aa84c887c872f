package consumer

import (
	"context"
	"time"

	"github.com/delaykit/rabbitdelay/amqpdelay"
)

// Info is what the Consumer knows about the delivery a handler is running for; the handler
// reads it with [InfoFrom].
type Info struct {
	// Queue is the queue consumed.
	Queue string
	// ID is the delivery's id for deduplication: the id function's answer ([Options.IDFunc];
	// default the MessageId), or one the Consumer derived (IDDerived says why).
	ID string
	// IDDerived is "" when ID is the id function's answer; else why the Consumer derived it:
	// DerivedMissing (no MessageId: ID is ContentIDPrefix and a hash of the content) or
	// DerivedTooLong (ID is HashedIDPrefix and a hash of the id). See the Event kind IDDerived.
	IDDerived string
	// Attempt is this delivery's attempt: 1 for the first, 2 for the first retry, ...
	Attempt int
	// MaxAttempts is the retry policy's limit: a failure at this attempt parks the message.
	MaxAttempts int
	// Due is when the delivery was due (amqpdelay.Due: the rabbitdelay-due header; for a retry,
	// when the retry was due; for a copy sent back because it arrived early, the first
	// delivery's due time, HeaderDue, when later). Zero when HasDue is false (a message not
	// sent by rabbitdelay).
	Due    time.Time
	HasDue bool
	// Late is how long after Due the handler started (0 when HasDue is false; never negative).
	// For a delivery that [Replay] sent back (Replayed), Due is the original due time, so Late
	// includes the time the message spent parked.
	Late time.Duration
	// Replayed is true when [Replay] sent this delivery back from the parking queue
	// (HeaderReplayed). Its lateness is not recorded in the metrics ([Options.Metrics]).
	Replayed bool
	// Path is the delay path the delivery came through, from its headers
	// (amqpdelay.DeliveryPath); PathDirect when HasDue is false.
	Path amqpdelay.Path
	// FirstFailure is when the first attempt failed (zero on the first attempt).
	FirstFailure time.Time
}

type infoKey struct{}

// InfoFrom returns the Info of the delivery whose handler ctx belongs to; ok is false for a
// context that is not a handler's.
func InfoFrom(ctx context.Context) (info Info, ok bool) {
	info, ok = ctx.Value(infoKey{}).(Info)
	return info, ok
}

// EventKind says what happened to a delivery (or to the connection): the kind's name in lower
// case ("handled", "retried", ...).
type EventKind string

const (
	// Handled: the handler returned nil; the message was acked.
	Handled EventKind = "handled"
	// Retried: the handler failed; a copy was published to come back after Event.Delay (and
	// confirmed), then the delivery was acked.
	Retried EventKind = "retried"
	// Parked: the handler failed for the last time, or permanently; the message was published
	// to the parking queue with the reason (and confirmed), then acked.
	Parked EventKind = "parked"
	// Skipped: the id was handled before (a duplicate): acked without running the handler.
	Skipped EventKind = "skipped"
	// Deferred: another handler holds the id's lease, the store or the revocation stream
	// could not answer, or the delivery arrived more than EarlyHold before its due time
	// (Event.Err says which; errors.Is(Err, ErrEarly) for the last); a copy was published to
	// come back after Event.Delay without counting an attempt, then the delivery was acked.
	Deferred EventKind = "deferred"
	// Requeued: given back to the queue: with basic.reject (requeue) because its retry or
	// parking copy could not be published, or with basic.nack (requeue) at shutdown or
	// because a deferred copy could not be (Event.Err says which; see "Giving a delivery back"
	// in the package documentation).
	Requeued EventKind = "requeued"
	// Unsettled: the outcome could not be settled with the broker (the channel closed before the
	// ack): the broker delivers the message again, and the store decides.
	Unsettled EventKind = "unsettled"
	// Disconnected: the Consumer's connection was lost.
	Disconnected EventKind = "disconnected"
	// Reconnected: the Consumer's connection is back after a loss.
	Reconnected EventKind = "reconnected"
	// Revoked: the message was revoked (amqpdelay's Publisher.Revoke or Reschedule): acked
	// without running the handler.
	Revoked EventKind = "revoked"
	// Rejected: the handler failed and no copy of the message could be parked (the Publisher
	// refused it as invalid, typically for too many headers): it was rejected without requeue
	// (basic.reject), so its queue's dead-letter exchange took it (a quorum ready queue's: the
	// parking queue, without the failure record) or, for a queue without one, RabbitMQ
	// dropped it (Event.Err).
	Rejected EventKind = "rejected"
	// IDDerived: the delivery had no id the store can hold, so the Consumer derived one
	// (Info.ID, Info.IDDerived; Event.Err says why and what to do), reported on arrival, before
	// the outcome's event. Without a MessageId (or with "" from the id function) the id is
	// ContentIDPrefix and the SHA-256 of the routing key it first arrived with, its properties
	// (but MessageId, Expiration, UserId, DeliveryMode), application headers (but x-*,
	// rabbitdelay-*, CC, BCC) and body: a redelivery keeps it, and messages alike in all of
	// these count as one. Copies carry it as their MessageId. An id longer than MaxIDLen is
	// replaced by HashedIDPrefix and its SHA-256.
	IDDerived EventKind = "id-derived"
)

// Event is one outcome that [Options.Observer] receives.
type Event struct {
	// Kind says what happened.
	Kind EventKind
	// Info describes the delivery (empty for Disconnected and Reconnected).
	Info Info
	// Err is the handler's error (Retried, Parked), the failure (Requeued, Unsettled), or why the
	// connection was lost (Disconnected).
	Err error
	// Delay is how long a Retried or Deferred copy waits, and Due when it is due.
	Delay time.Duration
	Due   time.Time
	// Duration is how long the handler ran (Handled, Retried, Parked).
	Duration time.Duration
	// At is when the event happened.
	At time.Time
}
