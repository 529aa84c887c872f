package amqpdelay

import (
	"bufio"
	"context"
	crand "crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/google/uuid"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/delaykit/rabbitdelay/internal/revlog"
)

// ID returns the message's id, which [Publisher.Revoke] and [Publisher.Reschedule] take.
func (r Receipt) ID() string { return r.MessageID }

// CopyHeader names one copy of a message (a string of 1 to 64 bytes): the Publisher sets a
// random one unless the message has one (a retry keeps its tag). [Publisher.Reschedule]
// revokes every copy of an id but its own.
const CopyHeader = revlog.CopyHeader

func copyTag(h amqp.Table) string {
	if s, ok := h[CopyHeader].(string); ok && s != "" && len(s) <= revlog.MaxTagLen {
		return s
	}
	return newCopyTag()
}

// newCopyTag returns 64 random bits (unique, not secret) as 16 hex digits: a fixed length keeps
// the header size, which the frame_max checks measure, the same from one publish to the next.
func newCopyTag() string {
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], rand.Uint64())
	return hex.EncodeToString(b[:])
}

// newRescheduledTag returns revlog.RescheduledPrefix and 15 hex digits, as long as newCopyTag's.
func newRescheduledTag() string {
	return string(revlog.RescheduledPrefix) + fmt.Sprintf("%015x", rand.Uint64()>>4)
}

// newMessageID returns a random (version 4) UUID from crypto/rand.
func newMessageID() string {
	idRandom.Lock()
	u, err := uuid.NewRandomFromReader(idRandom.r)
	idRandom.Unlock()
	if err != nil { // crypto/rand does not fail on the systems Go supports
		return uuid.NewString()
	}
	return u.String()
}

// idRandom buffers crypto/rand for 256 UUIDs per read (uuid.EnableRandPool would change the
// whole process).
var idRandom = struct {
	sync.Mutex
	r *bufio.Reader
}{r: bufio.NewReaderSize(crand.Reader, 4096)}

// Revoke records in the stream <prefix>.revoked that the messages with these ids, every copy
// sent before or by a later Publish, must not reach a handler, and returns once the broker has
// confirmed it (docs/revoke.md). A revocation confirmed at least revoke.DefaultBound (100 ms)
// before a copy's due time keeps it from every handler.
//
// Errors: ErrInvalidInput (nil ctx, no ids, an empty id or one over 255 bytes; nothing
// recorded), ErrTopologyMissing, ErrNacked, ErrConnectionLost (revoke again), ErrClosed, or
// ctx's error.
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

func checkID(id string) error {
	switch {
	case id == "":
		return fmt.Errorf("%w: empty message id: a message's id is its MessageId (Receipt.ID)", ErrInvalidInput)
	case len(id) > maxShortstr:
		return fmt.Errorf("%w: message id of %d bytes: AMQP's message-id is a short string of at most %d bytes", ErrInvalidInput, len(id), maxShortstr)
	}
	return nil
}

// Reschedule replaces the message with id msg.MessageId by msg, due after delay. It writes,
// each confirmed before the next: an allow record for the new copy's tag, the new copy (as
// [Publisher.Publish]), then the revocation of every other copy of the id.
//
// Errors, by step: ErrInvalidInput (MessageId empty or over 255 bytes, or Publish's checks) or
// ErrUnknownTarget, nothing written; Revoke's errors, nothing published; Publish's errors,
// wrapped, nothing revoked; ErrNotRevoked with the new copy's Receipt: the old copies arrive
// too (Reschedule again, or Revoke the id).
func (p *Publisher) Reschedule(ctx context.Context, exchange, routingKey string, msg amqp.Publishing, delay time.Duration) (Receipt, error) {
	if ctx == nil {
		return Receipt{}, fmt.Errorf("%w: nil context (use context.Background(), or a context with a deadline)", ErrInvalidInput)
	}
	if err := checkID(msg.MessageId); err != nil {
		return Receipt{}, fmt.Errorf("%w: Reschedule needs the id of the message to replace in msg.MessageId", err)
	}
	tag := newRescheduledTag()
	h := make(amqp.Table, len(msg.Headers)+1)
	maps.Copy(h, msg.Headers)
	h[CopyHeader] = tag
	msg.Headers = h
	// So that a message Publish would refuse writes nothing.
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

// record writes entries to the revocation stream as confirmed records of type typ.
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
		sendErr := errNotSent
		for errors.Is(sendErr, errNotSent) {
			pc, err := p.acquire(ctx, generalSlots)
			if err != nil {
				return err
			}
			// A missing stream returns the mandatory publish (312 NO_ROUTE).
			sendErr = pc.publish(ctx, "", stream, true, &m, contentHeaderSize(&m), 0)
		}
		if errors.Is(sendErr, ErrUnroutable) {
			return fmt.Errorf("%w: the revocation stream %q does not exist (the broker returned the record): run `rabbitdelay apply` "+
				"for this prefix (RabbitMQ 3.9 or later, feature flag stream_queue): %w", ErrTopologyMissing, stream, sendErr)
		}
		if sendErr != nil {
			return fmt.Errorf("amqpdelay: write %d %s entr(ies) to %q: %w", len(group), typ, stream, sendErr)
		}
	}
	return nil
}
