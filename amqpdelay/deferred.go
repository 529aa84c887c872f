package amqpdelay

import (
	"context"
	"fmt"
	"maps"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// Deferred is a publish started by [Publisher.PublishDeferred]; its outcome is what
// [Publisher.Publish] would have returned. Safe for concurrent use.
type Deferred struct {
	done    chan struct{}
	receipt Receipt
	err     error
}

// Done returns a channel closed once the outcome is known.
func (d *Deferred) Done() <-chan struct{} { return d.done }

// Wait returns the outcome; ctx bounds only the waiting. Errors: [Publisher.Publish]'s, ctx's
// (wrapped; the publish goes on), or ErrInvalidInput for a nil ctx.
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

// PublishDeferred starts [Publisher.Publish] and returns at once; the Deferred tells the
// outcome. ctx bounds the publish after the return too. The top-level header table is copied;
// msg.Body and nested header values must not change until Done is closed. It waits while
// Config.MaxInFlight are outstanding, and returns an error only when it starts nothing:
// ErrInvalidInput (nil ctx), ErrClosed, or ctx's error (wrapped). Close waits for them.
func (p *Publisher) PublishDeferred(ctx context.Context, exchange, routingKey string, msg amqp.Publishing, delay time.Duration) (*Deferred, error) {
	return p.publishDeferred(ctx, exchange, routingKey, msg, delay, time.Time{})
}

// publishDeferred is PublishDeferred; a non-zero at is named in an ErrDelayTooLong.
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

// PublishAtDeferred is PublishDeferred with the delay time.Until(at), taken at the call.
func (p *Publisher) PublishAtDeferred(ctx context.Context, exchange, routingKey string, msg amqp.Publishing, at time.Time) (*Deferred, error) {
	return p.publishDeferred(ctx, exchange, routingKey, msg, time.Until(at), at)
}
