package delayspec

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/delaykit/rabbitdelay/internal/amqpconn"
	amqp "github.com/rabbitmq/amqp091-go"
)

// The spec record: apply writes the Spec it declared, last, as the last record of the stream
// [Names.SpecStream]; clients read it back, so the CLI and every client agree on the topology.
// A consumer at offset "last" gets the stream's last chunk first
// (https://www.rabbitmq.com/docs/streams): WriteRecord publishes one record at a time and reads
// it back, so that chunk starts with the newest record.

const recordFormat = 1

// recordWait bounds ReadRecord's wait for a record (none: an apply that did not finish).
const recordWait = 15 * time.Second

// ErrNoRecord is wrapped by ReadRecord's error when the prefix has no spec record (no stream or
// no record): the fix is `rabbitdelay apply` for that prefix.
var ErrNoRecord = errors.New("no spec record")

type record struct {
	Format int  `json:"format"`
	Spec   Spec `json:"spec"`
}

// SpecStreamArgs are the arguments of the spec stream: old segments go beyond 1 MB (the last
// one, with the newest record, never does).
func SpecStreamArgs() amqp.Table {
	return amqp.Table{"x-queue-type": "stream", "x-max-length-bytes": int64(1_000_000), "x-stream-max-segment-size-bytes": int64(100_000)}
}

// EncodeRecord returns the record body of s (with its defaults filled in).
func EncodeRecord(s Spec) ([]byte, error) {
	return json.Marshal(record{Format: recordFormat, Spec: s.WithDefaults()})
}

// WriteRecord appends s to its spec stream, which must exist ([SpecStreamArgs]), and reads the
// stream back until its last chunk starts with this record (written again, up to three times,
// when a concurrent apply shares the chunk). ctx bounds the call. Errors are the broker's,
// wrapped.
func WriteRecord(ctx context.Context, conn *amqp.Connection, s Spec) error {
	s = s.WithDefaults()
	stream := s.Names().SpecStream()
	body, err := EncodeRecord(s)
	if err != nil {
		return fmt.Errorf("encode the spec record: %w", err)
	}
	ch, err := conn.Channel()
	if err != nil {
		return fmt.Errorf("write the spec record: open channel: %w", err)
	}
	defer ch.Close()
	if err := ch.Confirm(false); err != nil {
		return fmt.Errorf("write the spec record: %w", err)
	}
	for range 3 {
		var b [16]byte
		_, _ = rand.Read(b[:])
		id := hex.EncodeToString(b[:])
		dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, "", stream, true, false, amqp.Publishing{
			MessageId: id, ContentType: "application/json", DeliveryMode: amqp.Persistent, Timestamp: time.Now(), Body: body,
		})
		ok := false
		if err == nil {
			ok, err = dc.WaitContext(ctx)
		}
		switch {
		case err != nil:
			return fmt.Errorf("write the spec record to stream %q: %w", stream, err)
		case !ok:
			return fmt.Errorf("write the spec record to stream %q: the broker refused it (basic.nack)", stream)
		}
		d, err := lastRecord(ctx, conn, stream)
		if err != nil {
			return err
		}
		if d.MessageId == id {
			return nil
		}
	}
	return fmt.Errorf("write the spec record to stream %q: another apply writes to it at the same time; run one apply at a time", stream)
}

// ReadRecord reads the spec apply last recorded for prefix ("" means [DefaultPrefix]), on a
// channel of its own. ctx bounds the call; it waits at most 15 s for a record. Errors wrap
// [ErrNoRecord] (run apply), ErrInvalidSpec (a record this version cannot read), or are the
// broker's (403 ACCESS_REFUSED when the user may not read the stream).
func ReadRecord(ctx context.Context, conn *amqp.Connection, prefix string) (Spec, error) {
	stream := Names{Prefix: prefix}.SpecStream()
	d, err := lastRecord(ctx, conn, stream)
	if err != nil {
		return Spec{}, err
	}
	var r record
	if err := json.Unmarshal(d.Body, &r); err != nil {
		return Spec{}, fmt.Errorf("%w: the last record of stream %q is not a spec record (%v): run `rabbitdelay apply` for this prefix", ErrInvalidSpec, stream, err)
	}
	if r.Format != recordFormat {
		return Spec{}, fmt.Errorf("%w: the last record of stream %q has format %d, and this version reads format %d: run this version's `rabbitdelay apply`",
			ErrInvalidSpec, stream, r.Format, recordFormat)
	}
	s := r.Spec.WithDefaults()
	if err := s.Validate(); err != nil {
		return Spec{}, fmt.Errorf("the record of stream %q: %w", stream, err)
	}
	return s, nil
}

func lastRecord(ctx context.Context, conn *amqp.Connection, stream string) (amqp.Delivery, error) {
	ch, err := conn.Channel()
	if err != nil {
		return amqp.Delivery{}, fmt.Errorf("read stream %q: open channel: %w", stream, err)
	}
	defer ch.Close()
	if _, err := ch.QueueDeclarePassive(stream, true, false, false, false, nil); err != nil {
		if amqpconn.IsNotFound(err) {
			return amqp.Delivery{}, fmt.Errorf("%w: stream %q does not exist: run `rabbitdelay apply` for this prefix", ErrNoRecord, stream)
		}
		return amqp.Delivery{}, fmt.Errorf("read stream %q: %w", stream, err)
	}
	// RabbitMQ delivers from a stream only to a consumer with a prefetch count.
	if err := ch.Qos(1, 0, false); err != nil {
		return amqp.Delivery{}, fmt.Errorf("read stream %q: %w", stream, err)
	}
	closed := ch.NotifyClose(make(chan *amqp.Error, 1))
	ds, err := ch.ConsumeWithContext(ctx, stream, "", false, false, false, false, amqp.Table{"x-stream-offset": "last"})
	if err != nil {
		return amqp.Delivery{}, readError(stream, err)
	}
	wait, cancel := context.WithTimeout(ctx, recordWait)
	defer cancel()
	select {
	case d, ok := <-ds:
		if ok {
			return d, nil
		}
		return amqp.Delivery{}, readError(stream, <-closed)
	case err := <-closed:
		return amqp.Delivery{}, readError(stream, err)
	case <-wait.Done():
		if ctx.Err() != nil {
			return amqp.Delivery{}, fmt.Errorf("read stream %q: %w", stream, ctx.Err())
		}
		return amqp.Delivery{}, fmt.Errorf("%w: stream %q holds no record: run `rabbitdelay apply` for this prefix", ErrNoRecord, stream)
	}
}

// readError gives a user without read permission on stream the fix (403 ACCESS_REFUSED).
func readError(stream string, err error) error {
	var ae *amqp.Error
	if errors.As(err, &ae) && ae.Code == amqp.AccessRefused {
		return fmt.Errorf("read stream %q: the user may not read it (%w): every client reads the spec record there, so "+
			"give the user read permission on it (the read pattern of rabbitmqctl set_permissions must match %q)", stream, err, stream)
	}
	if err == nil {
		return fmt.Errorf("read stream %q: the channel closed", stream)
	}
	return fmt.Errorf("read stream %q: %w", stream, err)
}
