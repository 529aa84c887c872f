package consumer

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sync"
	"sync/atomic"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/delaykit/rabbitdelay/amqpdelay"
	"github.com/delaykit/rabbitdelay/internal/amqpconn"
	"github.com/delaykit/rabbitdelay/internal/route"
	"github.com/delaykit/rabbitdelay/revoke"
)

// flight states: a handler may be running; the worker settles it; shutdown gave it back.
const (
	stateHandling int32 = iota
	stateSettling
	stateReturned
)

// flight is one delivery being processed.
type flight struct {
	d       amqp.Delivery // as delivered: what is settled with the broker
	state   atomic.Int32
	in      Info
	orig    amqp.Table // the headers as delivered, before restore: what copies start from
	origKey string     // the routing key as delivered
}

// settle moves f from handling to settling; false when shutdown gave it back meanwhile.
func (f *flight) settle() bool { return f.state.CompareAndSwap(stateHandling, stateSettling) }

// EarlyHold is the longest a Consumer holds, in a concurrency slot, a delivery that arrives
// before its due time (Info.Due, by this machine's clock), to handle it at that time. One due
// further ahead goes back through the delay topology for the time left (Deferred, Err wrapping
// ErrEarly). Broker timers can end early: Erlang's time correction in no_time_warp mode (the
// mode of RabbitMQ 3.x) runs a node's clock up to 1 % fast after the system clock steps
// forward (https://www.erlang.org/doc/apps/erts/time_correction.html).
const EarlyHold = 2 * time.Second

// process runs the whole protocol for one delivery: claim, handle, then ack, retry or park.
func (c *Consumer) process(base context.Context, s *session, d amqp.Delivery) {
	f := &flight{d: d, in: c.info(&d, time.Now()), orig: maps.Clone(d.Headers), origKey: d.RoutingKey}
	s.flights.Store(f, nil)
	defer s.flights.Delete(f)
	if f.in.IDDerived != "" {
		c.emit(Event{Kind: IDDerived, Info: f.in, Err: derivedError(f.in.IDDerived, f.in.ID), At: time.Now()})
	}
	if d.Headers == nil {
		d.Headers = amqp.Table{}
	}
	restore(&d)
	if !c.holdUntilDue(base, f) {
		return
	}
	token, ok := c.claim(f)
	if !ok {
		return
	}
	took, err := c.handle(base, d, f.in, token)
	c.settleOutcome(f, token, took, err)
}

// info reads what the headers say about d, started at start.
func (c *Consumer) info(d *amqp.Delivery, start time.Time) Info {
	in := Info{Queue: c.queue, Attempt: 1, MaxAttempts: c.o.Backoff.MaxAttempts}
	in.ID, in.IDDerived = c.identify(*d)
	if a, ok, fits := route.HeaderInt(d.Headers[HeaderAttempt]); ok && fits && a > 1 {
		in.Attempt = int(a)
	}
	if ms, ok, fits := route.HeaderInt(d.Headers[HeaderFirstFailure]); ok && fits {
		in.FirstFailure = time.UnixMilli(ms)
	}
	_, in.Replayed = d.Headers[HeaderReplayed]
	in.Path, _ = amqpdelay.DeliveryPath(*d)
	if due, ok := amqpdelay.Due(*d); ok {
		in.Due, in.HasDue = due, true
		// A copy sent back early keeps the first delivery's due time in HeaderDue.
		if ms, ok, fits := route.HeaderInt(d.Headers[HeaderDue]); ok && fits && time.UnixMilli(ms).After(due) {
			in.Due = time.UnixMilli(ms)
		}
		in.Late = max(start.Sub(in.Due), 0)
	}
	return in
}

// restore gives the handler the routing key and target the message first arrived with.
func restore(d *amqp.Delivery) {
	if rk, ok := d.Headers[HeaderRoutingKey].(string); ok {
		d.RoutingKey = rk
	}
	if t, ok := d.Headers[HeaderTarget].(string); ok {
		if t == "" {
			delete(d.Headers, route.TargetHeader) // the first delivery had none (a direct publish)
		} else {
			d.Headers[route.TargetHeader] = t
		}
	}
}

// holdUntilDue waits until the due time, up to EarlyHold, before the revocation check (which
// then sees the revocations sent meanwhile). False: the delivery is done with (deferred, or
// given back as base ended).
func (c *Consumer) holdUntilDue(base context.Context, f *flight) bool {
	in := f.in
	wait := time.Until(in.Due)
	if !in.HasDue || wait <= 0 {
		return true
	}
	if wait > EarlyHold {
		ctx, cancel := c.settleCtx()
		defer cancel()
		again := wait
		if c.o.maxDelay > 0 {
			again = min(wait, c.o.maxDelay)
		}
		c.deferFor(ctx, f, again, fmt.Errorf("%w: due at %s, %v after it arrived by this machine's clock; "+
			"sent back through the delay topology for %v", ErrEarly, in.Due.Format(time.RFC3339Nano), wait.Round(time.Millisecond), again))
		return false
	}
	if amqpconn.Sleep(base, wait) {
		return true
	}
	if f.settle() {
		c.nack(f, fmt.Errorf("consumer: shutting down while holding a delivery that arrived before its due time: %w", base.Err()), notFailed)
	}
	return false
}

// settleCtx bounds the steps before the handler, and, a new one, those that settle it after.
func (c *Consumer) settleCtx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), c.o.SettleTimeout)
}

// claim checks revocations and claims the id; it returns the lease token ("" without a
// store), or false when the delivery is done with (revoked, skipped or deferred).
func (c *Consumer) claim(f *flight) (string, bool) {
	ctx, cancel := c.settleCtx()
	defer cancel()
	if c.revs != nil && c.revoked(ctx, f) {
		return "", false
	}
	if c.o.Store == nil {
		return "", true
	}
	st, token, err := c.o.Store.Claim(ctx, c.queue, f.in.ID, c.o.Lease)
	switch {
	case err != nil:
		c.o.Logger.Warn().Err(err).Str("id", f.in.ID).Msg("consumer: claim failed; deferring the message")
		c.deferFor(ctx, f, c.o.BusyDelay, err)
	case st == AlreadyHandled:
		if f.settle() {
			c.ack(f, Event{Kind: Skipped, Info: f.in, At: time.Now()})
		}
	case st == Busy:
		c.deferFor(ctx, f, c.o.BusyDelay, nil)
	default:
		return token, true
	}
	return "", false
}

// revoked reports whether f's delivery is done with before its handler: revoked (acked), or of
// unknown standing. When the stream cannot answer within ctx, the delivery is deferred, not
// given back: trouble with the stream must not count toward the queue's delivery limit.
func (c *Consumer) revoked(ctx context.Context, f *flight) bool {
	gone, err := c.revs.Revoked(ctx, f.d)
	switch {
	case err == nil && !gone:
		return false
	case err != nil && !errors.Is(err, revoke.ErrClosed):
		err = fmt.Errorf("consumer: cannot tell whether the message is revoked, so it was deferred: %w", err)
		c.o.Logger.Warn().Err(err).Str("id", f.in.ID).Str("queue", c.queue).Msg("consumer: revocation check failed")
		dctx, cancel := c.settleCtx()
		defer cancel()
		c.deferFor(dctx, f, c.o.BusyDelay, err)
	case !f.settle(): // shutdown gave it back meanwhile
	case err != nil:
		c.nack(f, fmt.Errorf("consumer: cannot tell whether the message is revoked: %w", err), notFailed)
	default:
		c.ack(f, Event{Kind: Revoked, Info: f.in, At: time.Now()})
	}
	return true
}

// handle runs the handler for d, renewing the lease of token meanwhile.
func (c *Consumer) handle(base context.Context, d amqp.Delivery, in Info, token string) (time.Duration, error) {
	var hctx context.Context
	var hcancel context.CancelFunc
	if c.o.HandlerTimeout > 0 {
		hctx, hcancel = context.WithTimeout(base, c.o.HandlerTimeout)
	} else {
		hctx, hcancel = context.WithCancel(base)
	}
	hctx = context.WithValue(hctx, infoKey{}, in)
	stopRenew := make(chan struct{})
	var renewing sync.WaitGroup
	if token != "" {
		renewing.Go(func() { c.renew(in.ID, token, hcancel, stopRenew) })
	}
	start := time.Now()
	err := c.call(hctx, d)
	took := time.Since(start)
	if pe := (*PanicError)(nil); errors.As(err, &pe) {
		c.o.Logger.Error().Str("queue", c.queue).Str("id", in.ID).Int("attempt", in.Attempt).Str("panic", truncate(fmt.Sprint(pe.Value), MaxErrorLen)).
			Str("stack", string(pe.Stack)).Msg("consumer: handler panicked")
	}
	c.m.handlerRan(c.queue, err, took)
	hcancel()
	close(stopRenew)
	renewing.Wait()
	return took, err
}

// settleOutcome settles f after its handler returned err: done mark and ack, or release and a
// retry or parked copy; only the store's part when shutdown gave f back meanwhile.
func (c *Consumer) settleOutcome(f *flight, token string, took time.Duration, err error) {
	ctx, cancel := c.settleCtx()
	defer func() { cancel() }() // cancel is replaced below
	in, settling := f.in, f.settle()
	if err == nil {
		var serr error
		if token != "" {
			serr = c.done(ctx, in.ID, token)
		}
		if settling {
			c.ack(f, Event{Kind: Handled, Info: in, Err: serr, Duration: took, At: time.Now()})
		}
		return
	}
	if !settling {
		if token != "" {
			c.release(in.ID, token)
		}
		return
	}
	c.o.Logger.Debug().Err(err).Str("queue", c.queue).Str("id", in.ID).Int("attempt", in.Attempt).Msg("consumer: handler failed")
	now := time.Now()
	h := c.failureHeaders(f.orig, f.origKey, in, err, now)
	if token != "" {
		c.release(in.ID, token) // a retry copy must be able to claim it
		// The copy's publish gets a whole settle timeout of its own.
		cancel()
		ctx, cancel = c.settleCtx()
	}
	reason := ParkAttempts
	switch {
	case IsPermanent(err):
		reason = ParkPermanent
	case in.Attempt < c.o.Backoff.MaxAttempts:
		h[HeaderAttempt] = int64(in.Attempt + 1)
		delay := c.o.Backoff.delay(in.Attempt)
		r, perr := c.publishCopy(ctx, f, c.names.Retry(), c.queue, h, delay)
		if perr == nil {
			c.ack(f, Event{Kind: Retried, Info: in, Err: err, Delay: r.Delay, Due: r.Due, Duration: took, At: time.Now()})
			return
		}
		if !errors.Is(perr, amqpdelay.ErrInvalidInput) {
			c.nack(f, fmt.Errorf("consumer: publish the retry: %w", perr), failed)
			return
		}
		// No retry copy can ever be published: requeueing would loop without end. Park it.
		reason = ParkRetryRefused
		h[HeaderError] = truncate(fmt.Sprintf("%s (its retry copy was refused: %v)", h[HeaderError], perr), MaxErrorLen)
	}
	c.park(ctx, f, h, reason, now, took, err)
}

// call runs the handler on a goroutine of its own, so that a handler calling runtime.Goexit
// (t.FailNow does) fails the delivery instead of ending the worker with it unacked.
func (c *Consumer) call(ctx context.Context, d amqp.Delivery) error {
	out := make(chan error, 1)
	go c.run(ctx, d, out)
	return <-out
}

// run sends the handler's result on out: a panic as a *PanicError, runtime.Goexit as an error,
// and an error whose Error method panics (a typed nil pointer) as one that does not.
func (c *Consumer) run(ctx context.Context, d amqp.Delivery, out chan<- error) {
	returned := false
	defer func() {
		if v := recover(); v != nil {
			out <- newPanicError(v)
		} else if !returned {
			out <- errors.New("consumer: the handler called runtime.Goexit (t.FailNow does) before it returned: the delivery failed")
		}
	}()
	err := c.h(ctx, d)
	returned = true
	if err != nil {
		err = readableError(err)
	}
	out <- err
}

func readableError(err error) (out error) {
	defer func() {
		if v := recover(); v != nil {
			out = fmt.Errorf("consumer: the handler returned an error of type %T whose Error method panics (%v): a nil "+
				"pointer of an error type is not a nil error; return nil for success", err, v)
		}
	}()
	_ = err.Error()
	return err
}

// renew extends the lease every third of it until stop is closed; it cancels the handler's
// context when the lease is lost.
func (c *Consumer) renew(id, token string, cancel context.CancelFunc, stop <-chan struct{}) {
	t := time.NewTicker(c.o.Lease / 3)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		ctx, ccancel := context.WithTimeout(context.Background(), c.o.Lease/3)
		ok, err := c.o.Store.Extend(ctx, c.queue, id, token, c.o.Lease)
		ccancel()
		switch {
		case err != nil:
			c.o.Logger.Warn().Err(err).Str("id", id).Msg("consumer: extend the lease")
		case !ok:
			c.o.Logger.Warn().Str("id", id).Msg("consumer: lease lost (another handler claimed the id, or it was marked done); cancelling the handler")
			cancel()
			return
		}
	}
}
