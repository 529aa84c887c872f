package amqpdelay

import (
	"context"
	"fmt"
	"maps"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// Deferred is a publish started by [Publisher.PublishDeferred]. Its outcome is the one
// [Publisher.Publish] would have returned for the same call: a nil error only once the broker
// has confirmed the message. A Deferred is safe for use by several goroutines.
type Deferred struct {
	done    chan struct{}
	receipt Receipt
	err     error
}

// Done returns a channel closed once the outcome is known (confirmed, refused, or the publish's
// context ended).
func (d *Deferred) Done() <-chan struct{} { return d.done }

// Wait waits for the outcome and returns it; ctx bounds only the waiting (the publish itself is
// bounded by the context given to PublishDeferred). Errors: those of [Publisher.Publish],
// ctx's error (wrapped) when ctx ends first, the publish then still running, or
// ErrInvalidInput for a nil ctx (the publish goes on; Wait again with a context).
func (d *Deferred) Wait(ctx context.Context) (Receipt, error) {
	if ctx == nil {
		return Receipt{}, fmt.Errorf("%w: Deferred.Wait: nil context (use context.Background(), or a context with a deadline); "+
			"the publish goes on: Wait again with a context", ErrInvalidInput)
	}
	select {
	case <-d.done:
		return d.receipt, d.err
	case <-ctx.Done():
		return Receipt{}, fmt.Errorf("amqpdelay: context ended while waiting for a deferred publish's outcome: %w", ctx.Err())
	}
}

// PublishDeferred starts what [Publisher.Publish] does with the same arguments and returns at
// once, without waiting for the broker's confirm: the returned Deferred tells the outcome. It
// lets one goroutine keep many publishes in flight (amqp091-go's deferred confirmations are the
// model), each with the guarantee of Publish. ctx bounds the publish as it bounds Publish,
// including after PublishDeferred has returned: cancel it only to give up on the publishes.
//
// msg's top-level header table is copied before PublishDeferred returns; msg.Body and the
// values inside nested header tables and arrays must not be modified until Done is closed.
//
// While Config.MaxInFlight deferred publishes are outstanding, PublishDeferred waits for one to
// end. It returns an error only when it starts nothing: ErrInvalidInput for a nil ctx,
// ErrClosed after Close, or ctx's error (wrapped) when ctx ends while it waits. Every other
// error, bad input included, comes from Deferred.Wait. Close waits for the deferred publishes
// as it waits for Publish calls.
func (p *Publisher) PublishDeferred(ctx context.Context, exchange, routingKey string, msg amqp.Publishing, delay time.Duration) (*Deferred, error) {
	return p.publishDeferred(ctx, exchange, routingKey, msg, delay, time.Time{})
}

// publishDeferred is PublishDeferred; at, when not zero, is the time PublishAtDeferred was
// given, which an ErrDelayTooLong names.
func (p *Publisher) publishDeferred(ctx context.Context, exchange, routingKey string, msg amqp.Publishing, delay time.Duration, at time.Time) (*Deferred, error) {
	if ctx == nil {
		return nil, fmt.Errorf("%w: nil context (use context.Background(), or a context with a deadline)", ErrInvalidInput)
	}
	select {
	case p.inFlight <- struct{}{}:
	case <-ctx.Done():
		return nil, fmt.Errorf("amqpdelay: context ended while waiting for one of %d deferred publishes in flight to end (Config.MaxInFlight): %w",
			cap(p.inFlight), ctx.Err())
	case <-p.closeCtx.Done():
		return nil, ErrClosed
	}
	if !p.active.enter() {
		<-p.inFlight
		return nil, ErrClosed
	}
	if msg.Headers != nil {
		msg.Headers = maps.Clone(msg.Headers)
	}
	d := &Deferred{done: make(chan struct{})}
	go func() {
		defer p.active.leave()
		d.receipt, d.err = p.publish(ctx, exchange, routingKey, msg, delay)
		if !at.IsZero() {
			d.err = atError(d.err, at)
		}
		<-p.inFlight
		close(d.done)
	}()
	return d, nil
}

// PublishAtDeferred is PublishDeferred with the delay until at (time.Until(at), taken when it
// is called); a time not in the future publishes at once (PathDirect).
func (p *Publisher) PublishAtDeferred(ctx context.Context, exchange, routingKey string, msg amqp.Publishing, at time.Time) (*Deferred, error) {
	return p.publishDeferred(ctx, exchange, routingKey, msg, time.Until(at), at)
}
