package revoke

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/google/uuid"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/delaykit/rabbitdelay/amqpdelay"
	"github.com/delaykit/rabbitdelay/internal/amqpconn"
	"github.com/delaykit/rabbitdelay/internal/delayspec"
	"github.com/delaykit/rabbitdelay/internal/revlog"
)

// open dials, checks the stream, starts consuming it at offset and opens the fence channel.
func (r *Revocations) open(ctx context.Context, offset any) (<-chan amqp.Delivery, chan *amqp.Error, error) {
	conn, err := amqpdelay.Dial(ctx, r.cfg, r.o.ConnectionName)
	if err != nil {
		return nil, nil, err
	}
	fail := func(err error) (<-chan amqp.Delivery, chan *amqp.Error, error) {
		_ = amqpconn.Close(conn)
		return nil, nil, err
	}
	if r.retention == 0 { // the first open: the applied topology's retention
		spec, err := delayspec.ReadRecord(ctx, conn, r.cfg.Prefix)
		if errors.Is(err, delayspec.ErrNoRecord) {
			err = fmt.Errorf("%w: %w", amqpdelay.ErrTopologyMissing, err)
		}
		if err != nil {
			return fail(fmt.Errorf("revoke: %w", err))
		}
		r.retention = spec.RevocationRetention()
	}
	ch, err := conn.Channel()
	if err != nil {
		return fail(fmt.Errorf("revoke: open a channel: %w", err))
	}
	if _, err := ch.QueueDeclarePassive(r.stream, true, false, false, false, nil); err != nil {
		if amqpconn.IsNotFound(err) {
			return fail(fmt.Errorf("%w: the revocation stream %q does not exist: run `rabbitdelay apply` for this prefix "+
				"(RabbitMQ 3.9 or later, feature flag stream_queue): %w", amqpdelay.ErrTopologyMissing, r.stream, err))
		}
		return fail(fmt.Errorf("revoke: check stream %q: %w", r.stream, err))
	}
	if last, resume := offset.(int64); resume {
		// Resuming at the last record read, to check the stream was not declared again since.
		// RabbitMQ holds a consumer at an offset past the end until the stream reaches it, so
		// first make sure it reaches that offset.
		end, err := r.probeEnd(ctx, conn)
		if err != nil {
			return fail(err)
		}
		if end < last {
			r.o.Logger.Warn().Str("stream", r.stream).Int64("end", end).Int64("last_read", last).
				Msg("revoke: the revocation stream ends before the last record read: it was deleted and declared again; " +
					"reading it from its start (the revocations read before are kept)")
			offset = "first"
		} else {
			r.verify = true
		}
	}
	if err := ch.Qos(prefetch, 0, false); err != nil {
		return fail(fmt.Errorf("revoke: set prefetch: %w", err))
	}
	// Manual acks, a prefetch, and x-stream-offset (https://www.rabbitmq.com/docs/streams#consuming).
	deliveries, err := ch.Consume(r.stream, "", false, false, false, false, amqp.Table{"x-stream-offset": offset})
	if err != nil {
		return fail(fmt.Errorf("revoke: read stream %q: %w", r.stream, err))
	}
	fch, err := conn.Channel()
	if err == nil {
		err = fch.Confirm(false)
	}
	if err != nil {
		return fail(fmt.Errorf("revoke: open the fence channel: %w", err))
	}
	r.conn = conn
	r.fch.Store(fch)
	return deliveries, conn.NotifyClose(make(chan *amqp.Error, 1)), nil
}

// fingerprint identifies a record by its type, revlog headers, message id and body.
func fingerprint(d *amqp.Delivery) uint64 {
	h := fnv.New64a()
	at, _ := d.Headers[revlog.AtHeader].(int64)
	seq, _ := d.Headers[revlog.SeqHeader].(int64)
	reader, _ := d.Headers[revlog.ReaderHeader].(string)
	fmt.Fprintf(h, "%q %d %d %q %q ", d.Type, at, seq, reader, d.MessageId)
	h.Write(d.Body)
	return h.Sum64()
}

// probeEnd returns the offset of a fence it writes at the stream's end, read back through a
// consumer starting at "last" (the last chunk).
func (r *Revocations) probeEnd(ctx context.Context, conn *amqp.Connection) (int64, error) {
	pch, err := conn.Channel()
	if err != nil {
		return 0, fmt.Errorf("revoke: open the probe channel: %w", err)
	}
	defer pch.Close()
	if err := pch.Confirm(false); err != nil {
		return 0, fmt.Errorf("revoke: probe the end of %q: %w", r.stream, err)
	}
	returns := pch.NotifyReturn(make(chan amqp.Return, 1))
	id := uuid.NewString()
	if err := publishConfirmed(ctx, pch, r.stream, true, amqp.Publishing{
		Type: revlog.TypeFence, DeliveryMode: amqp.Persistent, MessageId: id,
		Headers: amqp.Table{revlog.AtHeader: time.Now().UnixMilli(), revlog.ReaderHeader: r.self},
	}); err != nil {
		return 0, fmt.Errorf("revoke: probe the end of %q (a fence record): %w", r.stream, err)
	}
	select {
	case <-returns:
		return 0, fmt.Errorf("%w: the revocation stream %q does not exist (a record sent to it was returned): run `rabbitdelay apply`",
			amqpdelay.ErrTopologyMissing, r.stream)
	default:
	}
	if err := pch.Qos(prefetch, 0, false); err != nil {
		return 0, fmt.Errorf("revoke: probe the end of %q: %w", r.stream, err)
	}
	deliveries, err := pch.Consume(r.stream, "", false, false, false, false, amqp.Table{"x-stream-offset": "last"})
	if err != nil {
		return 0, fmt.Errorf("revoke: probe the end of %q: %w", r.stream, err)
	}
	for {
		select {
		case d, ok := <-deliveries:
			if !ok {
				return 0, fmt.Errorf("revoke: probe the end of %q: the broker ended the consumer", r.stream)
			}
			if off, isInt := d.Headers["x-stream-offset"].(int64); isInt && d.MessageId == id {
				return off, nil
			}
		case <-ctx.Done():
			return 0, fmt.Errorf("revoke: probe the end of %q: %w", r.stream, ctx.Err())
		}
	}
}

// read applies the stream's records until Close, reconnecting after a loss.
func (r *Revocations) read(deliveries <-chan amqp.Delivery, closed chan *amqp.Error) {
	sweep := time.NewTicker(sweepEvery)
	defer sweep.Stop()
	n := 0
	for {
		select {
		case <-r.ctx.Done():
			return
		case <-sweep.C:
			r.sweep(time.Now().UnixMilli())
		case d, ok := <-deliveries:
			if !ok {
				err := amqpconn.CloseReason(closed, time.Second, amqp.ErrClosed) // when it was the connection that closed
				r.o.Logger.Warn().Err(err).Str("stream", r.stream).Msg("revoke: reading the revocation stream ended; reconnecting")
				r.setTrouble(fmt.Errorf("reading it ended: %w", err))
				r.fch.Store(nil)
				r.fenceFailed()
				if deliveries, closed = r.reconnect(); deliveries == nil {
					return
				}
				n = 0
				continue
			}
			if r.verify {
				r.verify = false
				if off, _ := d.Headers["x-stream-offset"].(int64); off == r.next-1 && fingerprint(&d) == r.last {
					n++ // the same stream: read on
					continue
				}
				r.o.Logger.Warn().Str("stream", r.stream).Int64("offset", r.next-1).
					Msg("revoke: the revocation stream no longer has the last record read at its offset: it was deleted and " +
						"declared again; reading it from its start (the revocations read before are kept)")
				r.restart = true
				if r.conn != nil {
					_ = r.conn.CloseDeadline(time.Now().Add(time.Second)) // ends deliveries: the loop reconnects
				}
				continue
			}
			r.apply(&d)
			if n++; n%ackEvery == 0 {
				_ = d.Ack(true) // a stream's acks only make room in the prefetch window
			}
		}
	}
}

// apply takes one record into the set, or a fence into covered.
func (r *Revocations) apply(d *amqp.Delivery) {
	if off, ok := d.Headers["x-stream-offset"].(int64); ok {
		r.next, r.last = off+1, fingerprint(d)
	}
	at, ok := d.Headers[revlog.AtHeader].(int64)
	if !ok {
		at = time.Now().UnixMilli()
	}
	forget := at + r.retention.Milliseconds()
	switch {
	case d.Type == revlog.TypeFence:
		r.fenceRead(d, at)
		return
	case d.Type == revlog.TypeRevocation && forget < time.Now().UnixMilli(), d.Type != revlog.TypeAllow && d.Type != revlog.TypeRevocation:
		return
	}
	r.mu.Lock()
	err := revlog.Decode(d.Body, func(id, keep []byte) {
		if d.Type == revlog.TypeRevocation {
			r.set[string(id)] = entry{keep: string(keep), forget: forget}
			return
		}
		// An allow record: the revocation in force, if any, keeps the new copy's tag too.
		e, ok := r.set[string(id)]
		if !ok || len(keep) == 0 || e.keeps(string(keep)) {
			return
		}
		if e.keep == "" {
			e.keep = string(keep)
		} else {
			e.more = append(e.more, string(keep))
		}
		r.set[string(id)] = e
	})
	r.mu.Unlock()
	r.records.Add(1)
	if err != nil {
		r.o.Logger.Warn().Err(err).Str("type", d.Type).Msg("revoke: a record of the revocation stream does not decode; its readable entries were taken")
	}
}

// sweep forgets the revocations past their retention.
func (r *Revocations) sweep(now int64) {
	r.mu.Lock()
	for id, e := range r.set {
		if e.forget < now {
			delete(r.set, id)
		}
	}
	r.mu.Unlock()
}

// reconnect opens the stream again at the next offset, with back-off; nil once closed.
func (r *Revocations) reconnect() (<-chan amqp.Delivery, chan *amqp.Error) {
	if r.conn != nil {
		_ = r.conn.CloseDeadline(time.Now().Add(time.Second))
	}
	b := newBackOff()
	for amqpconn.Sleep(r.ctx, b.NextBackOff()) {
		var offset any = "first"
		if r.next > 0 && !r.restart {
			offset = r.next - 1 // the last record read: open checks it is still there
		}
		ctx, cancel := context.WithTimeout(r.ctx, 30*time.Second)
		r.verify = false
		d, c, err := r.open(ctx, offset)
		cancel()
		if err == nil {
			r.restart = false
			r.o.Logger.Info().Str("stream", r.stream).Any("offset", offset).Msg("revoke: reading the revocation stream again")
			r.trouble.Store(nil)
			r.fenceFailed() // wake the waiters: they send a fence on the new connection
			return d, c
		}
		r.setTrouble(fmt.Errorf("reconnect failed: %w", err))
		r.o.Logger.Warn().Err(err).Msg("revoke: reconnect failed")
	}
	return nil, nil
}

// newBackOff: 100 ms growing by half to 5 s, each wait randomized by ±50 %.
func newBackOff() *backoff.ExponentialBackOff {
	return amqpconn.NewBackOff(100*time.Millisecond, 5*time.Second, 1.5)
}

// publishConfirmed publishes msg to stream on ch, in confirm mode, and waits for the confirm.
func publishConfirmed(ctx context.Context, ch *amqp.Channel, stream string, mandatory bool, msg amqp.Publishing) error {
	dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, "", stream, mandatory, false, msg)
	if err != nil {
		return err
	}
	if ok, err := dc.WaitContext(ctx); err != nil {
		return err
	} else if !ok {
		return errors.New("the broker nacked it")
	}
	return nil
}
