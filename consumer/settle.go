package consumer

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"time"

	"github.com/cenkalti/backoff/v4"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/delaykit/rabbitdelay/amqpdelay"
	"github.com/delaykit/rabbitdelay/internal/route"
)

// The back-off of retryUntil, and the budget of release: best effort, as the lease expires.
const (
	settleBackoffMin = 100 * time.Millisecond
	settleBackoffMax = 5 * time.Second
	releaseBudget    = 2 * time.Second
)

// The two ways nack gives a delivery back (package documentation, "Giving a delivery back"):
// failed, the message's own failure (basic.reject, counted toward the delivery limit on 4.3+),
// and notFailed, the Consumer cannot work on it now (basic.nack, not counted).
const (
	failed    = true
	notFailed = false
)

// park publishes a copy of f's delivery with the failure record h and reason to the parking
// queue, then acks the delivery; it rejects it when no copy can be parked.
func (c *Consumer) park(ctx context.Context, f *flight, h amqp.Table, reason string, now time.Time, took time.Duration, err error) {
	h[HeaderAttempt] = int64(f.in.Attempt)
	h[HeaderParked] = now.UnixMilli()
	h[HeaderParkReason] = reason
	_, perr := c.publishCopy(ctx, f, "", c.names.Parking(), h, 0)
	switch {
	case perr == nil:
		c.ack(f, Event{Kind: Parked, Info: f.in, Err: err, Duration: took, At: time.Now()})
	case errors.Is(perr, amqpdelay.ErrInvalidInput):
		c.reject(f, fmt.Errorf("consumer: no copy of the message can be parked in %q, so it was rejected without requeue: its "+
			"queue's dead-letter exchange takes it (a quorum ready queue's: the parking queue, x-death reason rejected, "+
			"without the failure record), or RabbitMQ drops it when the queue has none: %w (the handler's error: %w)",
			c.names.Parking(), perr, err))
	default:
		c.nack(f, fmt.Errorf("consumer: park the message in %q: %w", c.names.Parking(), perr), failed)
	}
}

// deferFor sends a copy of f's delivery back through the delay topology for delay, without
// counting an attempt, then acks the delivery (Deferred, Err why).
func (c *Consumer) deferFor(ctx context.Context, f *flight, delay time.Duration, why error) {
	if !f.settle() {
		return
	}
	r, err := c.publishCopy(ctx, f, c.names.Retry(), c.queue, keepHeaders(f.orig, f.origKey), delay)
	if err != nil {
		// Deferring is no failure of the message's, unless no copy of it can ever be published.
		c.nack(f, fmt.Errorf("consumer: defer the message: %w", err), errors.Is(err, amqpdelay.ErrInvalidInput))
		return
	}
	c.ack(f, Event{Kind: Deferred, Info: f.in, Err: why, Delay: r.Delay, Due: r.Due, At: time.Now()})
}

// publishCopy publishes a copy of f's delivery with headers h through the retry Publisher.
func (c *Consumer) publishCopy(ctx context.Context, f *flight, exchange, key string, h amqp.Table, delay time.Duration) (amqpdelay.Receipt, error) {
	msg := publishingOf(f.d, h)
	if msg.MessageId == "" && f.in.IDDerived == DerivedMissing {
		msg.MessageId = f.in.ID // the Publisher would set a random one; every copy keeps the id
	}
	return c.settlePublish(ctx, f.in, func() (amqpdelay.Receipt, error) {
		return c.pub.Publish(ctx, exchange, key, msg, delay)
	})
}

// settlePublish runs publish until it is confirmed, with retryUntil, stopping at an error that
// publishing again cannot mend. The delivery stays unacked meanwhile rather than given back
// again and again: every give-back counts toward the quorum queue's delivery limit.
func (c *Consumer) settlePublish(ctx context.Context, in Info, publish func() (amqpdelay.Receipt, error)) (amqpdelay.Receipt, error) {
	var r amqpdelay.Receipt
	err := retryUntil(ctx, func() error {
		var err error
		if r, err = publish(); err != nil {
			c.o.Logger.Debug().Err(err).Str("id", in.ID).Msg("consumer: publishing the copy failed")
		}
		return err
	}, func(err error) bool {
		return errors.Is(err, amqpdelay.ErrInvalidInput) || errors.Is(err, amqpdelay.ErrUnknownTarget) || errors.Is(err, amqpdelay.ErrClosed)
	})
	return r, err
}

// retryUntil runs op with back-off until it succeeds, stop (if any) is true of its error or ctx
// ends; then the error wraps both op's last error that is not ctx's and ctx's.
func retryUntil(ctx context.Context, op func() error, stop func(error) bool) error {
	b := backoff.NewExponentialBackOff()
	b.InitialInterval, b.MaxInterval, b.MaxElapsedTime = settleBackoffMin, settleBackoffMax, 0
	var last error
	err := backoff.Retry(func() error {
		err := op()
		if err != nil && (ctx.Err() == nil || !errors.Is(err, ctx.Err())) {
			last = err
		}
		if err != nil && (ctx.Err() != nil || stop != nil && stop(err)) {
			return backoff.Permanent(err)
		}
		return err
	}, backoff.WithContext(b, ctx))
	if err != nil && ctx.Err() != nil && last != nil && !errors.Is(last, ctx.Err()) {
		err = fmt.Errorf("%w (tried again until its context ended: %w)", last, ctx.Err())
	}
	return err
}

// done marks id handled, retrying until ctx (the settle timeout) ends; the delivery stays
// unacked meanwhile.
func (c *Consumer) done(ctx context.Context, id, token string) error {
	err := retryUntil(ctx, func() error { return c.o.Store.Done(ctx, c.queue, id, token, c.o.Keep) }, nil)
	if err != nil {
		c.o.Logger.Warn().Err(err).Str("id", id).Msg("consumer: mark handled failed until the settle timeout; a copy arriving " +
			"once the lease expired may run the handler again")
	}
	return err
}

// release gives up the lease so that a retry copy can claim the id.
func (c *Consumer) release(id, token string) {
	ctx, cancel := context.WithTimeout(context.Background(), min(releaseBudget, c.o.Lease))
	defer cancel()
	if err := retryUntil(ctx, func() error { return c.o.Store.Release(ctx, c.queue, id, token) }, nil); err != nil {
		c.o.Logger.Warn().Err(err).Str("id", id).Msg("consumer: release the lease (it expires by itself)")
	}
}

// ack acks f's delivery and reports e (Unsettled when the ack fails).
func (c *Consumer) ack(f *flight, e Event) {
	if err := f.d.Ack(false); err != nil {
		e = Event{Kind: Unsettled, Info: e.Info, Err: fmt.Errorf("consumer: ack after %s: %w", e.Kind, err), At: time.Now()}
	}
	c.emit(e)
}

// reject rejects f's delivery without requeue (its queue dead-letters or drops it).
func (c *Consumer) reject(f *flight, why error) {
	c.o.Logger.Error().Err(why).Str("id", f.in.ID).Str("queue", c.queue).Msg("consumer: rejected a message that cannot be parked")
	c.report(f.in, Rejected, why, f.d.Reject(false))
}

// nack gives f's delivery back to the queue: see failed.
func (c *Consumer) nack(f *flight, why error, failedMsg bool) {
	c.o.Logger.Warn().Err(why).Str("id", f.in.ID).Bool("failed", failedMsg).Msg("consumer: giving the message back to the queue")
	if failedMsg {
		c.report(f.in, Requeued, why, f.d.Reject(true))
	} else {
		c.report(f.in, Requeued, why, f.d.Nack(false, true))
	}
}

// report emits kind, or Unsettled when err, the settling's error, is not nil.
func (c *Consumer) report(in Info, kind EventKind, why, err error) {
	if err != nil {
		kind, why = Unsettled, errors.Join(why, err)
	}
	c.emit(Event{Kind: kind, Info: in, Err: why, At: time.Now()})
}

// keepHeaders returns a copy of orig with the first routing key, target and due time recorded.
func keepHeaders(orig amqp.Table, origKey string) amqp.Table {
	t, _ := orig[route.TargetHeader].(string) // "" when the first delivery had none
	h := make(amqp.Table, len(orig)+8)
	h[HeaderRoutingKey], h[HeaderTarget] = origKey, t
	if ms, ok, fits := route.HeaderInt(orig[route.DueHeader]); ok && fits {
		h[HeaderDue] = ms
	}
	maps.Copy(h, orig) // an earlier copy's records win
	return h
}

// failureHeaders are keepHeaders plus the failure's record.
func (c *Consumer) failureHeaders(orig amqp.Table, origKey string, in Info, err error, now time.Time) amqp.Table {
	h := keepHeaders(orig, origKey)
	if _, ok := h[HeaderFirstFailure]; !ok {
		h[HeaderFirstFailure] = now.UnixMilli()
	}
	h[HeaderLastFailure] = now.UnixMilli()
	h[HeaderError] = truncate(err.Error(), MaxErrorLen)
	delete(h, HeaderPanic) // an earlier attempt's
	if pe := (*PanicError)(nil); errors.As(err, &pe) {
		h[HeaderPanic] = pe.Summary
	}
	h[HeaderQueue] = c.queue
	return h
}

// publishingOf is the copy of d to publish, with headers h. Left out: Expiration (it would
// expire the copy in the delay topology), UserId (RabbitMQ refuses one other than the
// connection's user), and CC and BCC (RabbitMQ would route the copy to the queues they name).
func publishingOf(d amqp.Delivery, h amqp.Table) amqp.Publishing {
	_, cc := h["CC"]
	if _, bcc := h["BCC"]; cc || bcc {
		h = maps.Clone(h)
		delete(h, "CC")
		delete(h, "BCC")
	}
	return amqp.Publishing{
		Headers: h, ContentType: d.ContentType, ContentEncoding: d.ContentEncoding, DeliveryMode: d.DeliveryMode,
		Priority: d.Priority, CorrelationId: d.CorrelationId, ReplyTo: d.ReplyTo, MessageId: d.MessageId,
		Timestamp: d.Timestamp, Type: d.Type, AppId: d.AppId, Body: d.Body,
	}
}

func truncate(s string, n int) string { return s[:min(len(s), n)] }
