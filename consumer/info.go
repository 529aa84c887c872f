package consumer

import (
	"context"
	"time"

	"github.com/delaykit/rabbitdelay/amqpdelay"
)

// Info describes the delivery a handler runs for; the handler reads it with [InfoFrom].
type Info struct {
	// Queue is the queue consumed.
	Queue string
	// ID is the delivery's id for deduplication ([Options.IDFunc]), or one the Consumer
	// derived: then IDDerived says why (DerivedMissing or DerivedTooLong; see [IDDerived]).
	ID        string
	IDDerived string
	// Attempt is this delivery's attempt: 1 for the first, 2 for the first retry, ...
	Attempt int
	// MaxAttempts is the retry policy's limit: a failure at this attempt parks the message.
	MaxAttempts int
	// Due is when the delivery was due (amqpdelay.Due; for an early copy sent back, the first
	// delivery's due time). Zero when HasDue is false (a message not sent by rabbitdelay).
	Due    time.Time
	HasDue bool
	// Late is how long after Due the handler started (0 without Due; never negative). For a
	// Replayed delivery it includes the time the message spent parked.
	Late time.Duration
	// Replayed is true when [Replay] sent this delivery back (HeaderReplayed); its lateness is
	// not recorded in the metrics.
	Replayed bool
	// Path is the delay path the delivery came through (amqpdelay.DeliveryPath).
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

// EventKind says what happened to a delivery or the connection ("handled", "retried", ...).
type EventKind string

const (
	// Handled: the handler returned nil; the message was acked.
	Handled EventKind = "handled"
	// Retried: the handler failed; a copy to come back after Event.Delay was confirmed, then
	// the delivery was acked.
	Retried EventKind = "retried"
	// Parked: the handler failed for the last time, or permanently; a copy was confirmed in the
	// parking queue, then the delivery was acked.
	Parked EventKind = "parked"
	// Skipped: the id was handled before (a duplicate): acked without running the handler.
	Skipped EventKind = "skipped"
	// Deferred: the id is leased elsewhere, the store or the revocation stream could not
	// answer, or the delivery was early (Err wraps ErrEarly); a copy to come back after
	// Event.Delay, without counting an attempt, was confirmed, then the delivery was acked.
	Deferred EventKind = "deferred"
	// Requeued: given back to the queue (see "Giving a delivery back" in the package
	// documentation); Event.Err says why.
	Requeued EventKind = "requeued"
	// Unsettled: the outcome could not be settled with the broker (the channel closed): the
	// broker delivers the message again, and the store decides.
	Unsettled EventKind = "unsettled"
	// Disconnected: the Consumer's connection was lost.
	Disconnected EventKind = "disconnected"
	// Reconnected: the Consumer's connection is back after a loss.
	Reconnected EventKind = "reconnected"
	// Revoked: the message was revoked (amqpdelay's Publisher.Revoke or Reschedule): acked
	// without running the handler.
	Revoked EventKind = "revoked"
	// Rejected: the handler failed and the Publisher refused the parking copy as invalid: the
	// delivery was rejected without requeue, for its queue's dead-letter exchange (or dropped).
	Rejected EventKind = "rejected"
	// IDDerived: on arrival, before the outcome's event, the Consumer derived the id (Err says
	// why): without one, ContentIDPrefix and the SHA-256 of the first routing key, properties,
	// application headers (but x-*, rabbitdelay-*, CC, BCC) and body, so messages alike in
	// all of these count as one, and copies carry it as MessageId; for one longer than
	// MaxIDLen, HashedIDPrefix and its SHA-256.
	IDDerived EventKind = "id-derived"
)

// Event is one outcome that [Options.Observer] receives.
type Event struct {
	// Kind is the outcome.
	Kind EventKind
	// Info describes the delivery (empty for Disconnected and Reconnected).
	Info Info
	// Err is the handler's error (Retried, Parked), the failure, or why the connection was lost.
	Err error
	// Delay is how long a Retried or Deferred copy waits, and Due when it is due.
	Delay time.Duration
	Due   time.Time
	// Duration is how long the handler ran (Handled, Retried, Parked).
	Duration time.Duration
	// At is when the event happened.
	At time.Time
}
