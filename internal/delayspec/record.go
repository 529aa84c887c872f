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

// The spec record: `rabbitdelay apply` writes the Spec it declared, after every object and
// policy, as the last record of the stream <prefix>.spec ([Names.SpecStream]). Publishers,
// consumers and schedulers read it back with a URL and a prefix, so the CLI and every client
// agree on the topology by construction instead of each reading the AMQPDELAY_* variables.
//
// A stream keeps its records for every reader (https://www.rabbitmq.com/docs/streams;
// RabbitMQ 3.9 and later). A consumer that starts at offset "last" receives the stream's last
// chunk first; WriteRecord publishes one record at a time and reads it back, so that chunk
// starts with the newest record.

// recordFormat is the version of the record's JSON shape.
const recordFormat = 1

// recordWait bounds how long ReadRecord waits for the first record of a stream that exists
// when its context has no earlier deadline: a stream with no record is one an apply declared
// and did not finish writing.
const recordWait = 15 * time.Second

// ErrNoRecord is wrapped by ReadRecord's error when the prefix has no spec record: the stream
// does not exist, or it holds no record. The fix is `rabbitdelay apply` for that prefix.
var ErrNoRecord = errors.New("no spec record")

// record is the JSON of one spec record.
type record struct {
	Format int  `json:"format"`
	Spec   Spec `json:"spec"`
}

// SpecStreamArgs are the arguments of the spec stream: a stream whose old segments go once it
// holds over 1 MB (its last segment, holding the newest record, is never deleted).
func SpecStreamArgs() amqp.Table {
	return amqp.Table{"x-queue-type": "stream", "x-max-length-bytes": int64(1_000_000), "x-stream-max-segment-size-bytes": int64(100_000)}
}

// EncodeRecord returns the record body of s (with its defaults filled in).
func EncodeRecord(s Spec) ([]byte, error) {
	return json.Marshal(record{Format: recordFormat, Spec: s.WithDefaults()})
}

// decodeRecord reads a record body of stream and validates its spec.
func decodeRecord(stream string, body []byte) (Spec, error) {
	var r record
	if err := json.Unmarshal(body, &r); err != nil {
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

// WriteRecord appends s as the last record of its spec stream, which must exist (apply declares
// it with [SpecStreamArgs]), and reads the stream back until its last chunk starts with this
// record (a record written by a concurrent apply in the same chunk is written over again, up to
// three times). ctx bounds the whole call. Errors are the broker's, wrapped.
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
		id := randomID()
		dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, "", stream, true, false, amqp.Publishing{
			MessageId: id, ContentType: "application/json", DeliveryMode: amqp.Persistent, Timestamp: time.Now(), Body: body,
		})
		if err != nil {
			return fmt.Errorf("write the spec record to stream %q: %w", stream, err)
		}
		ok, err := dc.WaitContext(ctx)
		if err != nil {
			return fmt.Errorf("write the spec record to stream %q: %w", stream, err)
		}
		if !ok {
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

// ReadRecord reads the spec that `rabbitdelay apply` last recorded for prefix ("" means
// [DefaultPrefix]) from its spec stream, on a channel of its own that it closes. ctx bounds the
// call; without an earlier deadline it waits at most 15 s for a record. Errors wrap
// [ErrNoRecord] (no stream or no record: run apply), ErrInvalidSpec (a record this version
// cannot read), or are the broker's (403 ACCESS_REFUSED when the user may not read the stream).
func ReadRecord(ctx context.Context, conn *amqp.Connection, prefix string) (Spec, error) {
	stream := Names{Prefix: prefix}.SpecStream()
	d, err := lastRecord(ctx, conn, stream)
	if err != nil {
		return Spec{}, err
	}
	return decodeRecord(stream, d.Body)
}

// lastRecord returns the first delivery of stream's last chunk.
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

// readError describes the broker's refusal to let this client read stream: a user without read
// permission on it gets the fix (403 ACCESS_REFUSED: https://www.rabbitmq.com/docs/access-control).
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

// randomID returns 16 random bytes in hex.
func randomID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
