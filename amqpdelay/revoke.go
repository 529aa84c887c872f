package amqpdelay

import (
	"bufio"
	"context"
	crand "crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/google/uuid"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/delaykit/rabbitdelay/internal/revlog"
)

// Revoking and rescheduling: records in the revocation stream <prefix>.revoked (see
// delayspec.Names.Revoked and package revoke, which reads them).

// ID returns the message's id, the one [Publisher.Revoke] and [Publisher.Reschedule] take: the
// caller's MessageId, or the UUID the Publisher generated and set on the copy it sent.
func (r Receipt) ID() string { return r.MessageID }

// CopyHeader is the header naming one copy of a message (a string of 1 to 64 bytes): every
// message the Publisher sends carries one, a new random tag unless the message already has one
// (a delivery re-published for a retry keeps its tag, so a revocation covers its retries too).
// [Publisher.Reschedule] revokes every copy of an id but the one whose tag its revocation
// names.
const CopyHeader = revlog.CopyHeader

// copyTag returns the copy tag of h (a string of 1 to revlog.MaxTagLen bytes), or a new one.
func copyTag(h amqp.Table) string {
	if s, ok := h[CopyHeader].(string); ok && s != "" && len(s) <= revlog.MaxTagLen {
		return s
	}
	return newCopyTag()
}

// newCopyTag returns 64 random bits as 16 hex digits (math/rand/v2's generator, seeded from the
// operating system: a tag needs to be unique, not secret). The fixed length keeps a message's
// header size the same from one publish to the next, which the frame_max checks rely on.
func newCopyTag() string {
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], rand.Uint64())
	return hex.EncodeToString(b[:])
}

// newRescheduledTag returns the copy tag of a copy Reschedule publishes: revlog.RescheduledPrefix
// and 60 random bits as 15 hex digits, as long as newCopyTag's.
func newRescheduledTag() string {
	return string(revlog.RescheduledPrefix) + fmt.Sprintf("%015x", rand.Uint64()>>4)
}

// newMessageID returns a new message id: a random (version 4) UUID from crypto/rand, read
// through idRandom.
func newMessageID() string {
	idRandom.Lock()
	u, err := uuid.NewRandomFromReader(idRandom.r)
	idRandom.Unlock()
	if err != nil { // crypto/rand does not fail on the systems Go supports
		return uuid.NewString()
	}
	return u.String()
}

// idRandom buffers crypto/rand for newMessageID, 4 KiB (256 UUIDs) per read, sparing a
// getrandom call per UUID (docs/benchmarks.md). uuid.EnableRandPool does the same but for the
// whole process, which a library must not change.
var idRandom = struct {
	sync.Mutex
	r *bufio.Reader
}{r: bufio.NewReaderSize(crand.Reader, 4096)}

// Revoke records that the messages with these ids must not reach a handler, and returns nil once
// the broker has confirmed the record in the revocation stream <prefix>.revoked. Every copy of
// each id published before is revoked, and so is a copy of the id that a plain Publish sends
// later (use [Publisher.Reschedule] to send an id again); the record is kept for the topology's
// longest delay plus a day.
//
// Readers (package revoke) drop a revoked delivery: a revocation confirmed at least the reader's
// bound (revoke.DefaultBound, 100 ms) before a copy's due time never lets that copy reach a
// handler. An id nobody published is recorded all the same. Revoke many ids in one call rather
// than one at a time (one record per MiB of ids).
//
// Errors: ErrInvalidInput (nil ctx, no ids, an empty id or one over 255 bytes; nothing
// recorded), ErrTopologyMissing (run `rabbitdelay apply`), ErrNacked, ErrConnectionLost (outcome
// unknown: revoke again, which is harmless), ErrClosed, or ctx's error.
func (p *Publisher) Revoke(ctx context.Context, ids ...string) error {
	if ctx == nil {
		return fmt.Errorf("%w: nil context (use context.Background(), or a context with a deadline)", ErrInvalidInput)
	}
	if len(ids) == 0 {
		return fmt.Errorf("%w: Revoke without ids: name at least one message id", ErrInvalidInput)
	}
	entries := make([]revlog.Entry, len(ids))
	for i, id := range ids {
		if err := checkID(id); err != nil {
			return fmt.Errorf("%w (ids[%d])", err, i)
		}
		entries[i] = revlog.Entry{ID: id}
	}
	return p.record(ctx, revlog.TypeRevocation, entries)
}

// checkID refuses an id that no message can carry.
func checkID(id string) error {
	switch {
	case id == "":
		return fmt.Errorf("%w: empty message id: a message's id is its MessageId (Receipt.ID)", ErrInvalidInput)
	case len(id) > maxShortstr:
		return fmt.Errorf("%w: message id of %d bytes: AMQP's message-id is a short string of at most %d bytes", ErrInvalidInput, len(id), maxShortstr)
	}
	return nil
}

// Reschedule replaces the message with id msg.MessageId by msg, due after delay, the id kept.
// It writes, each confirmed before the next: an allow record for the new copy's tag (so no
// earlier revocation of the id drops it), the new copy (as [Publisher.Publish], the tag in
// CopyHeader), then the revocation of every other copy of the id. Only the old copies are
// dropped, as Revoke says; if the new copy is not published, the old ones are not revoked.
//
// It returns the new copy's Receipt once all three are confirmed. Errors, by step:
//   - before the first: ErrInvalidInput (msg.MessageId empty or over 255 bytes, or Publish's
//     checks), ErrUnknownTarget; nothing written.
//   - allow record: Revoke's errors; nothing published, nothing revoked.
//   - new copy: Publish's errors, wrapped; the old copies are not revoked.
//   - revocation: the new copy's Receipt and an error wrapping ErrNotRevoked: the old copies
//     will arrive too. Call Reschedule again, or Revoke the id to drop all.
func (p *Publisher) Reschedule(ctx context.Context, exchange, routingKey string, msg amqp.Publishing, delay time.Duration) (Receipt, error) {
	if ctx == nil {
		return Receipt{}, fmt.Errorf("%w: nil context (use context.Background(), or a context with a deadline)", ErrInvalidInput)
	}
	if err := checkID(msg.MessageId); err != nil {
		return Receipt{}, fmt.Errorf("%w: Reschedule needs the id of the message to replace in msg.MessageId", err)
	}
	tag := newRescheduledTag()
	h := make(amqp.Table, len(msg.Headers)+1)
	for k, v := range msg.Headers {
		h[k] = v
	}
	h[CopyHeader] = tag
	msg.Headers = h // msg is a copy: the caller's headers are untouched
	// The checks Publish makes before it sends, so that a message it would refuse writes
	// nothing; Publish makes them again (and those that need a channel, such as frame_max).
	if err := p.precheck(exchange, routingKey, &msg, delay); err != nil {
		return Receipt{}, err
	}
	if err := p.record(ctx, revlog.TypeAllow, []revlog.Entry{{ID: msg.MessageId, Keep: tag}}); err != nil {
		return Receipt{}, err
	}
	rc, err := p.Publish(ctx, exchange, routingKey, msg, delay)
	if err != nil {
		return Receipt{}, fmt.Errorf("amqpdelay: Reschedule %q: the new copy was not published (the old copies are not revoked): %w", msg.MessageId, err)
	}
	if err := p.record(ctx, revlog.TypeRevocation, []revlog.Entry{{ID: msg.MessageId, Keep: tag}}); err != nil {
		return rc, fmt.Errorf("%w: Reschedule %q: the new copy is scheduled (due %s) but the old copies were not revoked and will "+
			"arrive too; call Reschedule again (it keeps only the copy it publishes) or Revoke the id: %w",
			ErrNotRevoked, msg.MessageId, rc.Due.UTC().Format(time.RFC3339Nano), err)
	}
	return rc, nil
}

// RescheduleAt is Reschedule with the delay until at (time.Until(at)).
func (p *Publisher) RescheduleAt(ctx context.Context, exchange, routingKey string, msg amqp.Publishing, at time.Time) (Receipt, error) {
	return p.Reschedule(ctx, exchange, routingKey, msg, time.Until(at))
}

// record writes entries to the revocation stream as records of type typ (revlog.TypeRevocation
// or revlog.TypeAllow), one record per revlog.MaxBody, each confirmed. Revocations count in the
// metrics; allow records do not.
func (p *Publisher) record(ctx context.Context, typ string, entries []revlog.Entry) (err error) {
	if !p.active.enter() {
		return ErrClosed
	}
	defer p.active.leave()
	if typ == revlog.TypeRevocation {
		defer func() { p.metrics.revoked(outcomeOf(err), len(entries)) }()
	}
	stream := p.names.Revoked()
	for _, group := range revlog.Split(entries) {
		m := amqp.Publishing{
			Type: typ, MessageId: newMessageID(), DeliveryMode: amqp.Persistent,
			Headers: amqp.Table{revlog.AtHeader: time.Now().UnixMilli()},
			Body:    revlog.Encode(make([]byte, 0, 64), group),
		}
		for {
			pc, err := p.acquire(ctx, generalSlots)
			if err != nil {
				return err
			}
			// The default exchange routes to the queue named by the routing key; a missing
			// stream makes the mandatory publish come back (312 NO_ROUTE) without closing the
			// channel.
			err = pc.publish(ctx, "", stream, true, &m, contentHeaderSize(&m), 0)
			if errors.Is(err, errNotSent) {
				continue
			}
			if errors.Is(err, ErrUnroutable) {
				return fmt.Errorf("%w: the revocation stream %q does not exist (the broker returned the record): run `rabbitdelay apply` "+
					"for this prefix (RabbitMQ 3.9 or later, feature flag stream_queue): %w", ErrTopologyMissing, stream, err)
			}
			if err != nil {
				return fmt.Errorf("amqpdelay: write %d %s entr(ies) to %q: %w", len(group), typ, stream, err)
			}
			break
		}
	}
	return nil
}
