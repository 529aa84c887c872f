package consumer

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cenkalti/backoff/v4"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/rs/zerolog"

	"github.com/delaykit/rabbitdelay/amqpdelay"
	"github.com/delaykit/rabbitdelay/internal/delayspec"
	"github.com/delaykit/rabbitdelay/internal/route"
	"github.com/delaykit/rabbitdelay/revoke"
)

// Handler handles one delivery. It returns nil when the message is done (the Consumer acks
// it), an error to have it retried after the back-off, or an error wrapped with [Permanent] to
// have it parked at once. ctx ends when the handler timeout passes or when the shutdown's
// grace period is over; [InfoFrom] reads the delivery's attempt, due time and lateness from it.
// A panic counts as an error: a [*PanicError] with the stack trace (see PanicError for where it
// is reported). The handler must not ack, nack or reject d itself.
type Handler func(ctx context.Context, d amqp.Delivery) error

// Consumer consumes one queue and runs a Handler for each message, N at a time, with delayed
// retries, a parking queue and, through a [Store], an exactly-once effect per message id.
// Create it with [New] and run it with [Consumer.Run].
type Consumer struct {
	cfg    amqpdelay.Config
	pubCfg amqpdelay.Config
	queue  string
	h      Handler
	o      options
	names  delayspec.Names
	store  Store
	log    zerolog.Logger
	ran    atomic.Bool
	revs   *revoke.Revocations // set by Run unless Options.NoRevocations
	m      *consumerMetrics    // Options.Metrics (metrics.go); nil records nothing
}

// New returns a Consumer of queue that runs h, with the connection settings of cfg (dialled
// with amqpdelay.Dial), the delay topology of cfg.Prefix (through which retries wait: the
// topology's ladder and buckets, and the retry exchange that `rabbitdelay apply` declares) and
// opts (Options{}: every default). It does no I/O. Errors wrap ErrInvalidConfig and name every
// unusable value; waits longer than the topology's ladder carries are found by Run, which reads
// the topology.
func New(cfg amqpdelay.Config, queue string, h Handler, opts Options) (*Consumer, error) {
	o, err := opts.resolve()
	var errs []error
	if err != nil {
		errs = append(errs, err)
	}
	if queue == "" || len(queue) > delayspec.MaxNameLen {
		errs = append(errs, fmt.Errorf("%w: queue name %q: want 1 to %d bytes", ErrInvalidConfig, queue, delayspec.MaxNameLen))
	}
	if h == nil {
		errs = append(errs, fmt.Errorf("%w: nil handler", ErrInvalidConfig))
	}
	names := delayspec.Names{Prefix: cfg.Prefix}
	m, err := newConsumerMetrics(o.metricsReg)
	if err != nil {
		errs = append(errs, err)
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	c := &Consumer{cfg: cfg, queue: queue, h: h, o: o, names: names, log: o.logger, m: m}
	m.start(queue)
	// The retry Publisher: cfg's connection and prefix only, with the Consumer's settings.
	c.pubCfg = amqpdelay.Config{URL: cfg.URL, TLSCA: cfg.TLSCA, TLSCert: cfg.TLSCert, TLSKey: cfg.TLSKey, Prefix: cfg.Prefix,
		Logger: o.logger, Channels: 1, ConnectionName: o.name + "-retry", ReconnectMin: o.reconnectMin, ReconnectMax: o.reconnectMax}
	c.store = o.store
	if !o.storeSet {
		c.store = &MemoryStore{}
	}
	return c, nil
}

// Queue returns the name of the queue the Consumer consumes.
func (c *Consumer) Queue() string { return c.queue }

// Run consumes until ctx ends, then shuts down gracefully and returns nil: it stops taking
// messages, lets running handlers finish for up to [Options.ShutdownTimeout], cancels the
// contexts of those still running, gives their messages back (nack with requeue) and returns
// once every handler has returned. After a connection loss it reconnects with back-off until
// ctx ends.
//
// At start it pings the store (a [RedisStore], or a Store with a method Ping(ctx) error), opens
// the retry Publisher and the consuming connection, checks the queue, binds it to the retry
// exchange (unless [Options.NoRetryBinding]) and, unless [Options.NoRevocations], reads the
// revocation stream. A failure there is returned at once: ErrStore, ErrInvalidConfig (an
// Options.Backoff or Options.BusyDelay wait beyond the ladder's maximum), ErrQueueNotFound,
// amqpdelay.ErrTopologyMissing (run `rabbitdelay apply`), a dial error, or ctx's error. Once
// running, a store that fails a claim defers only that delivery (Options.BusyDelay). Run may
// be called once (ErrRunning).
func (c *Consumer) Run(ctx context.Context) error {
	if ctx == nil {
		return fmt.Errorf("%w: nil context (use context.Background())", ErrInvalidConfig)
	}
	if !c.ran.CompareAndSwap(false, true) {
		return ErrRunning
	}
	startCtx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	if err := ping(startCtx, c.store); err != nil {
		return fmt.Errorf("consumer: the store of handled ids does not answer, so no delivery could be claimed "+
			"(is Redis running, and are the address and password of its client right?): %w", err)
	}
	pub, err := amqpdelay.NewPublisher(startCtx, c.pubCfg)
	if err != nil {
		return fmt.Errorf("consumer: start the retry Publisher (retries go through the delay topology to the retry exchange %q, "+
			"which `rabbitdelay apply` declares): %w", c.names.Retry(), err)
	}
	defer func() {
		if err := pub.Close(); err != nil {
			c.log.Warn().Err(err).Msg("consumer: close the retry publisher")
		}
	}()
	if err := c.o.fitWaits(pub.MaxDelay()); err != nil {
		return err
	}
	if c.o.revocations {
		if c.revs, err = c.openRevocations(startCtx); err != nil {
			return err
		}
		defer c.revs.Close()
	}
	s, err := c.open(startCtx, false)
	if err != nil {
		return err
	}
	for {
		lost := c.serve(ctx, s, pub)
		if lost == nil {
			return nil
		}
		unreadable := isUnreadable(lost)
		if unreadable {
			lost = fmt.Errorf("%w: the client library (amqp091-go) could not read a delivery of %q and closed the connection; "+
				"such a message (typically a header table nested more than 32 deep or with more than 8,192 entries, from a "+
				"publisher other than amqpdelay's) is delivered again after each reconnect, first in line: a quorum queue's "+
				"delivery limit dead-letters it (a ready queue of `rabbitdelay apply`: to the parking queue), a classic queue "+
				"keeps it, so take it out by hand (management UI, Get messages, Ack mode \"Reject requeue false\"); until "+
				"%d deliveries have been read, the Consumer takes one at a time, so the messages behind it are not given "+
				"back with it and charged a delivery attempt", lost, c.queue, carefulDeliveries(c.o.concurrency))
			c.log.Error().Err(lost).Str("queue", c.queue).Msg("consumer: an unreadable delivery closed the connection; reconnecting")
		} else {
			c.log.Warn().Err(lost).Str("queue", c.queue).Msg("consumer: connection lost; reconnecting")
		}
		c.emit(Event{Kind: Disconnected, Err: lost, At: time.Now()})
		if s = c.reconnect(ctx, unreadable); s == nil {
			return nil
		}
		c.log.Info().Str("queue", c.queue).Msg("consumer: reconnected")
		c.emit(Event{Kind: Reconnected, At: time.Now()})
	}
}

// session is one connection and its consuming channel.
type session struct {
	conn       *amqp.Connection
	ch         *amqp.Channel
	tag        string
	deliveries <-chan amqp.Delivery
	closed     chan *amqp.Error

	mu      sync.Mutex
	flights map[*flight]struct{}

	// careful counts down the deliveries to read, with a prefetch of 1, before the prefetch
	// goes back to the concurrency (after a delivery the client could not read; 0: not careful).
	careful atomic.Int64
}

// carefulDeliveries is how many deliveries a session opened after an unreadable delivery reads
// with a prefetch of 1: twice the prefetch the lost connection had, so the deliveries that
// were in flight with the unreadable one have come back first.
func carefulDeliveries(concurrency int) int { return 2 * concurrency }

// isUnreadable reports whether err says that the client closed the connection because it could
// not parse a frame: a delivery whose content header it cannot read. amqp091-go closes the
// connection with a FrameError (not from the server) on every read error, a reset or EOF too,
// whose reason is the read error's text: only its two parse errors (ErrSyntax, ErrFrame)
// count.
func isUnreadable(err error) bool {
	var ae *amqp.Error
	if !errors.As(err, &ae) || ae.Server || (ae.Code != amqp.FrameError && ae.Code != amqp.SyntaxError) {
		return false
	}
	return strings.Contains(ae.Reason, amqp.ErrSyntax.Reason) || strings.Contains(ae.Reason, amqp.ErrFrame.Reason)
}

// flight states: a handler may be running; the worker settles it; shutdown gave it back.
const (
	stateHandling int32 = iota
	stateSettling
	stateReturned
)

// flight is one delivery being processed.
type flight struct {
	d     amqp.Delivery
	state atomic.Int32
}

func (s *session) add(f *flight) {
	s.mu.Lock()
	s.flights[f] = struct{}{}
	s.mu.Unlock()
}

func (s *session) remove(f *flight) {
	s.mu.Lock()
	delete(s.flights, f)
	s.mu.Unlock()
}

// open dials, checks the queue, binds it to the retry exchange and starts consuming; careful
// starts with a prefetch of 1 (see carefulDeliveries).
func (c *Consumer) open(ctx context.Context, careful bool) (*session, error) {
	conn, err := amqpdelay.Dial(ctx, c.cfg, c.o.name)
	if err != nil {
		return nil, fmt.Errorf("consumer: dial: %w", err)
	}
	fail := func(err error) (*session, error) {
		_ = conn.CloseDeadline(time.Now().Add(5 * time.Second))
		return nil, err
	}
	ch, err := conn.Channel()
	if err != nil {
		return fail(fmt.Errorf("consumer: open a channel: %w", err))
	}
	if _, err := ch.QueueDeclarePassive(c.queue, true, false, false, false, nil); err != nil {
		var ae *amqp.Error
		if errors.As(err, &ae) && ae.Code == amqp.NotFound {
			return fail(fmt.Errorf("%w: queue %q does not exist in this vhost (RabbitMQ's passive declare answered 404): declare it "+
				"(a ready queue of `rabbitdelay apply`, AMQPDELAY_READY_QUEUES) or correct the name: %w", ErrQueueNotFound, c.queue, err))
		}
		return fail(fmt.Errorf("consumer: check queue %q: %w", c.queue, err))
	}
	if c.o.bind {
		if err := ch.QueueBind(c.queue, c.queue, c.names.Retry(), false, nil); err != nil {
			return fail(fmt.Errorf("consumer: bind queue %q to the retry exchange %q with key %q (run `rabbitdelay apply`, or pass "+
				"Options.NoRetryBinding when the queue is a ready queue and this user may not bind): %w", c.queue, c.names.Retry(), c.queue, err))
		}
	}
	prefetch := c.o.concurrency
	if careful {
		prefetch = 1
	}
	if err := ch.Qos(prefetch, 0, false); err != nil {
		return fail(fmt.Errorf("consumer: set prefetch %d: %w", prefetch, err))
	}
	tag := fmt.Sprintf("%s-%s", c.o.name, newToken()[:8])
	deliveries, err := ch.Consume(c.queue, tag, false, false, false, false, nil)
	if err != nil {
		return fail(fmt.Errorf("consumer: consume queue %q: %w", c.queue, err))
	}
	s := &session{conn: conn, ch: ch, tag: tag, deliveries: deliveries, flights: map[*flight]struct{}{}}
	if careful {
		s.careful.Store(int64(carefulDeliveries(c.o.concurrency)))
	}
	s.closed = conn.NotifyClose(make(chan *amqp.Error, 1))
	return s, nil
}

// reconnect opens a new session (careful: see open) with exponential back-off and jitter; nil
// once ctx has ended.
func (c *Consumer) reconnect(ctx context.Context, careful bool) *session {
	b := backoff.NewExponentialBackOff()
	b.InitialInterval, b.MaxInterval, b.RandomizationFactor, b.MaxElapsedTime = c.o.reconnectMin, c.o.reconnectMax, 0.5, 0
	b.Reset()
	for attempt := 1; ; attempt++ {
		t := time.NewTimer(b.NextBackOff())
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
		dctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		s, err := c.open(dctx, careful)
		cancel()
		if err == nil {
			return s
		}
		if ctx.Err() != nil {
			return nil
		}
		c.log.Warn().Err(err).Int("attempt", attempt).Msg("consumer: reconnect failed")
	}
}

// serve runs the workers of session s until ctx ends (then it shuts down gracefully and returns
// nil) or the session's deliveries end (it returns why: a connection or channel loss).
func (c *Consumer) serve(ctx context.Context, s *session, pub *amqpdelay.Publisher) error {
	// Handlers' contexts end at the hard deadline of a shutdown, not when ctx ends.
	base, cancelBase := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelBase()
	stop := make(chan struct{})
	var stopping atomic.Bool
	var wg sync.WaitGroup
	for range c.o.concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				case d, ok := <-s.deliveries:
					if !ok {
						return
					}
					if stopping.Load() {
						c.giveBack(d, "shutting down")
						continue
					}
					if s.careful.Load() > 0 && s.careful.Add(-1) == 0 {
						if err := s.ch.Qos(c.o.concurrency, 0, false); err != nil {
							c.log.Warn().Err(err).Msg("consumer: set the prefetch back to the concurrency")
						}
					}
					c.process(base, s, pub, d)
				}
			}
		}()
	}
	workers := make(chan struct{})
	go func() { wg.Wait(); close(workers) }()

	select {
	case <-workers:
		// The deliveries ended: the channel or the connection is gone.
		var why error = errors.New("the broker closed the consuming channel")
		select {
		case e := <-s.closed:
			if e != nil {
				why = e
			}
		default:
		}
		_ = s.conn.CloseDeadline(time.Now().Add(5 * time.Second))
		return fmt.Errorf("consumer: consuming %q ended: %w", c.queue, why)
	case <-ctx.Done():
	}

	// Graceful shutdown: take nothing more, let running handlers finish, give the rest back.
	stopping.Store(true)
	close(stop)
	// Deliveries the broker sent before the cancel and no worker took are given back with a
	// nack: closing the channel with them unacked would count toward a quorum queue's delivery
	// limit on RabbitMQ 4.3 (a channel closed with unacked deliveries counts as failed ones).
	// The deliveries channel ends once the broker has confirmed the cancel (or the channel
	// closed).
	_ = s.ch.Cancel(s.tag, false)
	drained := make(chan struct{})
	go func() {
		defer close(drained)
		for d := range s.deliveries {
			c.giveBack(d, "shutting down")
		}
	}()
	grace := time.NewTimer(c.o.shutdownTimeout)
	select {
	case <-workers:
	case <-grace.C:
		s.mu.Lock()
		for f := range s.flights {
			if f.state.CompareAndSwap(stateHandling, stateReturned) {
				c.giveBack(f.d, "shutdown timeout")
			}
		}
		s.mu.Unlock()
		cancelBase()
		<-workers
	}
	grace.Stop()
	select {
	case <-drained:
	case <-time.After(5 * time.Second): // the channel then returns the rest as it closes
	}
	_ = s.ch.Close()
	if err := s.conn.CloseDeadline(time.Now().Add(5 * time.Second)); err != nil && !errors.Is(err, amqp.ErrClosed) {
		c.log.Warn().Err(err).Msg("consumer: close connection")
	}
	return nil
}

// giveBack returns d to the queue at shutdown, with a nack with requeue: not the message's
// failure, which RabbitMQ 4.3+ does not count toward a quorum queue's delivery limit.
func (c *Consumer) giveBack(d amqp.Delivery, why string) {
	err := d.Nack(false, true)
	kind := Requeued
	if err != nil {
		kind = Unsettled
	}
	in := Info{Queue: c.queue}
	in.ID, in.IDDerived = c.identify(d)
	c.emit(Event{Kind: kind, Info: in, Err: errors.Join(errors.New(why), err), At: time.Now()})
}

func (c *Consumer) emit(e Event) {
	c.m.observe(c.queue, e)
	if c.o.observer != nil {
		c.o.observer(e)
	}
}

// info reads what the headers say about d, started at start.
func (c *Consumer) info(d *amqp.Delivery, start time.Time) Info {
	in := Info{Queue: c.queue, Attempt: 1, MaxAttempts: c.o.backoff.MaxAttempts}
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
		// A copy sent back early, for at most the ladder's maximum (holdUntilDue), is due at
		// the first delivery's due time, which it keeps in HeaderDue; a retry's own due time
		// is the later one.
		if ms, ok, fits := route.HeaderInt(d.Headers[HeaderDue]); ok && fits && time.UnixMilli(ms).After(due) {
			in.Due = time.UnixMilli(ms)
		}
		in.Late = max(start.Sub(in.Due), 0)
	}
	return in
}

// EarlyHold is the longest a Consumer holds a delivery that arrives before its due time
// (Info.Due, by this machine's clock): it checks revocations, claims the id and calls the
// handler at the due time, so a handler never runs early by the clock it reads. A held
// delivery takes a concurrency slot; a shutdown gives it back unhandled. A delivery due
// further ahead is not held: a copy goes back through the delay topology for the time left,
// and the delivery is acked once the copy is confirmed (Event kind Deferred, Err wrapping
// ErrEarly; no attempt counted). Broker timers can end early: a RabbitMQ 3.x node runs Erlang
// in no_time_warp mode, where after the system clock steps forward time correction runs the
// node's clock up to 1 % fast until it catches up, and message TTLs end up to 1 % early
// (https://www.erlang.org/doc/apps/erts/time_correction.html).
const EarlyHold = 2 * time.Second

// holdUntilDue waits until in.Due when the delivery arrived before it by at most EarlyHold,
// before the revocation check (which then sees the revocations sent meanwhile), the claim and
// the handler's own timeout. It returns false when the delivery is done with: due further
// ahead than EarlyHold (a copy was sent through the delay topology for the time left: see
// EarlyHold), or base ended first (the Consumer is shutting down: the delivery is given back
// to the queue, unhandled, unless the shutdown already gave it back).
func (c *Consumer) holdUntilDue(base context.Context, f *flight, in Info, pub *amqpdelay.Publisher, orig amqp.Table, origKey string) bool {
	if !in.HasDue {
		return true
	}
	wait := time.Until(in.Due)
	if wait <= 0 {
		return true
	}
	if wait > EarlyHold {
		ctx, cancel := c.settleCtx()
		defer cancel()
		again := wait
		if c.o.maxDelay > 0 {
			again = min(wait, c.o.maxDelay)
		}
		c.deferFor(ctx, f, pub, orig, origKey, in, again, fmt.Errorf("%w: due at %s, %v after it arrived by this machine's clock; "+
			"sent back through the delay topology for %v", ErrEarly, in.Due.Format(time.RFC3339Nano), wait.Round(time.Millisecond), again))
		return false
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-base.Done():
		if f.state.CompareAndSwap(stateHandling, stateSettling) {
			c.nack(f, fmt.Errorf("consumer: shutting down while holding a delivery that arrived before its due time: %w", base.Err()), in, notFailed)
		}
		return false
	}
}

// restore gives the handler the routing key and target the message first arrived with (a retry
// travels with the queue's name as routing key and the retry exchange as target).
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

// settleCtx bounds the store calls and publishes of one delivery's steps before its handler
// runs (revocation check, claim, deferred copy), and, a new one, those that settle it after the
// handler returned (done mark, release, retry or parked copy).
func (c *Consumer) settleCtx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), c.o.settleTimeout)
}

// process runs the whole protocol for one delivery: claim, handle, then ack, retry or park.
func (c *Consumer) process(base context.Context, s *session, pub *amqpdelay.Publisher, d amqp.Delivery) {
	start := time.Now()
	f := &flight{d: d}
	s.add(f)
	defer s.remove(f)
	in := c.info(&d, start)
	if in.IDDerived != "" {
		c.emit(Event{Kind: IDDerived, Info: in, Err: derivedError(in.IDDerived, in.ID), At: time.Now()})
	}
	orig := amqp.Table{} // the headers as delivered, before restore: what copies start from
	for k, v := range d.Headers {
		orig[k] = v
	}
	origKey := d.RoutingKey
	if d.Headers == nil {
		d.Headers = amqp.Table{}
	}
	restore(&d)
	if !c.holdUntilDue(base, f, in, pub, orig, origKey) {
		return
	}

	// Before the handler: the revocation check, the claim and a deferred copy have a settle
	// timeout of their own; the settling after the handler gets a fresh one (below), so a
	// handler's own run time never uses it up.
	pctx, pcancel := c.settleCtx()
	defer pcancel()
	if c.revs != nil { // revoked.go
		if c.revoked(pctx, f, in, pub, orig, origKey) {
			return
		}
	}
	var token string
	if c.store != nil {
		st, tok, err := c.store.Claim(pctx, c.queue, in.ID, c.o.lease)
		switch {
		case err != nil:
			c.log.Warn().Err(err).Str("id", in.ID).Msg("consumer: claim failed; deferring the message")
			c.deferCopy(pctx, f, pub, orig, origKey, in, err)
			return
		case st == AlreadyHandled:
			if !f.state.CompareAndSwap(stateHandling, stateSettling) {
				return
			}
			c.ack(f, Event{Kind: Skipped, Info: in, At: time.Now()})
			return
		case st == Busy:
			c.deferCopy(pctx, f, pub, orig, origKey, in, nil)
			return
		}
		token = tok
	}
	pcancel()

	hctx, hcancel := context.WithCancel(base)
	if c.o.handlerTimeout > 0 {
		hctx, hcancel = context.WithTimeout(base, c.o.handlerTimeout)
	}
	hctx = context.WithValue(hctx, infoKey{}, in)
	renewed := make(chan struct{})
	stopRenew := make(chan struct{})
	if token != "" {
		go c.renew(in.ID, token, hcancel, stopRenew, renewed)
	} else {
		close(renewed)
	}
	hstart := time.Now()
	err := c.call(hctx, d)
	took := time.Since(hstart)
	if pe := (*PanicError)(nil); errors.As(err, &pe) {
		c.log.Error().Str("queue", c.queue).Str("id", in.ID).Int("attempt", in.Attempt).Str("panic", truncate(fmt.Sprint(pe.Value), MaxErrorLen)).
			Str("stack", string(pe.Stack)).Msg("consumer: handler panicked")
	}
	c.m.handlerRan(c.queue, err, took)
	hcancel()
	close(stopRenew)
	<-renewed
	sctx, scancel := c.settleCtx()
	defer func() { scancel() }() // scancel is replaced below

	if !f.state.CompareAndSwap(stateHandling, stateSettling) {
		// Shutdown gave the message back meanwhile: record what the handler did, settle nothing.
		if token != "" {
			if err == nil {
				c.done(sctx, in.ID, token)
			} else {
				c.release(in.ID, token)
			}
		}
		return
	}
	if err == nil {
		var serr error
		if token != "" {
			serr = c.done(sctx, in.ID, token)
		}
		c.ack(f, Event{Kind: Handled, Info: in, Err: serr, Duration: took, At: time.Now()})
		return
	}
	c.log.Debug().Err(err).Str("queue", c.queue).Str("id", in.ID).Int("attempt", in.Attempt).Msg("consumer: handler failed")
	now := time.Now()
	h := c.failureHeaders(orig, origKey, in, err, now)
	if token != "" {
		c.release(in.ID, token) // a retry copy must be able to claim it
		// The release has a budget of its own: the copy's publish gets the whole settle timeout.
		scancel()
		sctx, scancel = c.settleCtx()
	}
	reason := ""
	switch {
	case IsPermanent(err):
		reason = ParkPermanent
	case in.Attempt >= c.o.backoff.MaxAttempts:
		reason = ParkAttempts
	default:
		h[HeaderAttempt] = int64(in.Attempt + 1)
		delay := c.o.backoff.delay(in.Attempt)
		retry := copyOf(d, h, in)
		r, perr := c.settlePublish(sctx, in, func() (amqpdelay.Receipt, error) {
			return pub.Publish(sctx, c.names.Retry(), c.queue, retry, delay)
		})
		if perr == nil {
			c.ack(f, Event{Kind: Retried, Info: in, Err: err, Delay: r.Delay, Due: r.Due, Duration: took, At: time.Now()})
			return
		}
		if !errors.Is(perr, amqpdelay.ErrInvalidInput) {
			c.nack(f, fmt.Errorf("consumer: publish the retry: %w", perr), in, failed)
			return
		}
		// No retry copy of this delivery can ever be published (it carries more than the
		// copy can hold): retrying it means requeueing it without end. Park it.
		reason = ParkRetryRefused
		h[HeaderError] = truncate(fmt.Sprintf("%s (its retry copy was refused: %v)", h[HeaderError], perr), MaxErrorLen)
	}
	h[HeaderAttempt] = int64(in.Attempt)
	h[HeaderParked] = now.UnixMilli()
	h[HeaderParkReason] = reason
	msg := copyOf(d, h, in)
	_, perr := c.settlePublish(sctx, in, func() (amqpdelay.Receipt, error) {
		return pub.Publish(sctx, "", c.names.Parking(), msg, 0)
	})
	switch {
	case perr == nil:
		c.ack(f, Event{Kind: Parked, Info: in, Err: err, Duration: took, At: time.Now()})
	case errors.Is(perr, amqpdelay.ErrInvalidInput):
		c.reject(f, fmt.Errorf("consumer: no copy of the message can be parked in %q, so it was rejected without requeue: its "+
			"queue's dead-letter exchange takes it (a quorum ready queue's: the parking queue, x-death reason rejected, "+
			"without the failure record), or RabbitMQ drops it when the queue has none: %w (the handler's error: %w)",
			c.names.Parking(), perr, err), in)
	default:
		c.nack(f, fmt.Errorf("consumer: park the message in %q: %w", c.names.Parking(), perr), in, failed)
	}
}

// floatDuration formats d nanoseconds, also beyond the largest time.Duration.
func floatDuration(d float64) string {
	if d >= math.MaxInt64 {
		return fmt.Sprintf("%.0f years", d/float64(365*24*time.Hour))
	}
	return time.Duration(d).String()
}

// truncate cuts s to at most n bytes.
func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}

// deferCopy sends a copy of the delivery back through the delay topology after the busy delay,
// without counting an attempt, then acks the delivery.
func (c *Consumer) deferCopy(ctx context.Context, f *flight, pub *amqpdelay.Publisher, orig amqp.Table, origKey string, in Info, why error) {
	c.deferFor(ctx, f, pub, orig, origKey, in, c.o.busyDelay, why)
}

// deferFor sends a copy of the delivery back through the delay topology to come back after
// delay, without counting an attempt, then acks the delivery (Event kind Deferred, Err why).
func (c *Consumer) deferFor(ctx context.Context, f *flight, pub *amqpdelay.Publisher, orig amqp.Table, origKey string, in Info,
	delay time.Duration, why error) {
	if !f.state.CompareAndSwap(stateHandling, stateSettling) {
		return
	}
	msg := copyOf(f.d, keepHeaders(orig, origKey), in)
	r, err := c.settlePublish(ctx, in, func() (amqpdelay.Receipt, error) {
		return pub.Publish(ctx, c.names.Retry(), c.queue, msg, delay)
	})
	if err != nil {
		// Deferring is no failure of the message's, unless no copy of it can ever be published.
		c.nack(f, fmt.Errorf("consumer: defer the message: %w", err), in, errors.Is(err, amqpdelay.ErrInvalidInput))
		return
	}
	c.ack(f, Event{Kind: Deferred, Info: in, Err: why, Delay: r.Delay, Due: r.Due, At: time.Now()})
}

// settlePublish runs publish (a retry, deferred or parked copy of a delivery the Consumer holds)
// until it is confirmed, trying again with back-off (settleBackoffMin doubling to
// settleBackoffMax) while its error may pass: the delay topology missing for a moment
// (ErrUnroutable), a nack, a lost connection. It stops at ctx's end (the settle timeout) and
// at an error that publishing again cannot mend (ErrInvalidInput, ErrUnknownTarget, ErrClosed)
// and returns the last error; when ctx ended, the error wraps both the last publish's own
// error (one that is not ctx's) and ctx's. The delivery stays unacked meanwhile, so a failing
// publish does not give it back to the queue at once and again: every give-back counts toward
// the quorum queue's delivery limit.
func (c *Consumer) settlePublish(ctx context.Context, in Info, publish func() (amqpdelay.Receipt, error)) (amqpdelay.Receipt, error) {
	b := backoff.NewExponentialBackOff()
	b.InitialInterval, b.MaxInterval, b.MaxElapsedTime = settleBackoffMin, settleBackoffMax, 0
	var r amqpdelay.Receipt
	// The last publish error that is not ctx's own: why the publishes failed, when ctx ends
	// while one is in flight or while backoff.Retry waits (it then returns ctx's error).
	var last error
	err := backoff.Retry(func() error {
		var err error
		r, err = publish()
		if err != nil && (ctx.Err() == nil || !errors.Is(err, ctx.Err())) {
			last = err
		}
		switch {
		case err == nil:
			return nil
		case ctx.Err() != nil, errors.Is(err, amqpdelay.ErrInvalidInput), errors.Is(err, amqpdelay.ErrUnknownTarget),
			errors.Is(err, amqpdelay.ErrClosed):
			return backoff.Permanent(err)
		}
		c.log.Debug().Err(err).Str("id", in.ID).Msg("consumer: publishing the copy failed; trying again")
		return err
	}, backoff.WithContext(b, ctx))
	if err != nil && ctx.Err() != nil && last != nil && !errors.Is(last, ctx.Err()) {
		err = fmt.Errorf("%w (tried again until the settle timeout ended: %w)", last, ctx.Err())
	}
	return r, err
}

// The back-off of settlePublish.
const (
	settleBackoffMin = 100 * time.Millisecond
	settleBackoffMax = 5 * time.Second
)

// keepHeaders returns a copy of the delivered headers with the original routing key, target
// and first due time recorded (once) in the Consumer's own headers.
func keepHeaders(orig amqp.Table, origKey string) amqp.Table {
	h := make(amqp.Table, len(orig)+8)
	for k, v := range orig {
		h[k] = v
	}
	if _, ok := h[HeaderRoutingKey]; !ok {
		h[HeaderRoutingKey] = origKey
	}
	if _, ok := h[HeaderTarget]; !ok {
		t, _ := orig[route.TargetHeader].(string)
		h[HeaderTarget] = t // "" when the first delivery had none
	}
	if _, ok := h[HeaderDue]; !ok {
		if ms, ok, fits := route.HeaderInt(orig[route.DueHeader]); ok && fits {
			h[HeaderDue] = ms
		}
	}
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

// publishingOf is the copy of d to publish, with headers h less CC and BCC. Expiration and
// UserId are left out: a per-message TTL would expire the copy inside the delay topology, and
// RabbitMQ refuses a UserId other than the publishing connection's user. CC and BCC are left
// out because RabbitMQ routes a message with its CC and BCC keys too: through the retry exchange
// or the default exchange (parking, Replay), the CC header a delivery still carries from its
// first publish would send the copy to every queue it names, not to its own queue alone.
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

// copyOf is publishingOf(d, h) with, for a delivery without a MessageId, its derived id
// (Info.ID) as MessageId: the amqpdelay Publisher would give the copy a random one, and every
// copy of the message must keep its id.
func copyOf(d amqp.Delivery, h amqp.Table, in Info) amqp.Publishing {
	p := publishingOf(d, h)
	if p.MessageId == "" && in.IDDerived == DerivedMissing {
		p.MessageId = in.ID
	}
	return p
}

// call runs the handler, turning a panic into a *PanicError (with its stack trace), and an error whose Error method
// panics (a typed nil pointer returned as the error, typically) into one that does not: the
// Consumer reads the text for the failure record and the logs.
func (c *Consumer) call(ctx context.Context, d amqp.Delivery) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = newPanicError(v)
		}
	}()
	if err = c.h(ctx, d); err != nil {
		err = readableError(err)
	}
	return err
}

// readableError returns err, or, when err.Error() panics, an error saying so that names err's type.
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

// renew extends the lease every third of it until stop is closed; when the lease is found lost
// (another holder has it, or it was marked done), it cancels the handler's context.
func (c *Consumer) renew(id, token string, cancel context.CancelFunc, stop <-chan struct{}, done chan<- struct{}) {
	defer close(done)
	t := time.NewTicker(c.o.lease / 3)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		ctx, ccancel := context.WithTimeout(context.Background(), c.o.lease/3)
		ok, err := c.store.Extend(ctx, c.queue, id, token, c.o.lease)
		ccancel()
		switch {
		case err != nil:
			c.log.Warn().Err(err).Str("id", id).Msg("consumer: extend the lease")
		case !ok:
			c.log.Warn().Str("id", id).Msg("consumer: lease lost (another handler claimed the id, or it was marked done); cancelling the handler")
			cancel()
			return
		}
	}
}

// done marks id handled, trying again with back-off (settleBackoffMin doubling to
// settleBackoffMax) until the store takes it or ctx (the settle timeout) ends. The delivery
// stays unacked meanwhile: a mark given up on leaves the id unremembered once the lease
// expires, and a copy arriving after that runs the handler again.
func (c *Consumer) done(ctx context.Context, id, token string) error {
	err := c.storeWrite(ctx, func() error { return c.store.Done(ctx, c.queue, id, token, c.o.keep) })
	if err != nil {
		c.log.Warn().Err(err).Str("id", id).Msg("consumer: mark handled failed until the settle timeout; a copy arriving " +
			"once the lease expired may run the handler again")
	}
	return err
}

// releaseBudget bounds release: best effort, since the lease expires by itself (a retry copy
// that arrives before then is deferred as a busy one is).
const releaseBudget = 2 * time.Second

// release gives up the lease so that a retry copy can claim the id, trying again with
// back-off for at most releaseBudget (or the lease, when shorter), on a context of its own.
func (c *Consumer) release(id, token string) {
	ctx, cancel := context.WithTimeout(context.Background(), min(releaseBudget, c.o.lease))
	defer cancel()
	if err := c.storeWrite(ctx, func() error { return c.store.Release(ctx, c.queue, id, token) }); err != nil {
		c.log.Warn().Err(err).Str("id", id).Msg("consumer: release the lease (it expires by itself)")
	}
}

// storeWrite runs write until it succeeds or ctx ends, with settlePublish's back-off; the error
// is the last write's, joined with ctx's when ctx ended.
func (c *Consumer) storeWrite(ctx context.Context, write func() error) error {
	b := backoff.NewExponentialBackOff()
	b.InitialInterval, b.MaxInterval, b.MaxElapsedTime = settleBackoffMin, settleBackoffMax, 0
	var last error
	err := backoff.Retry(func() error {
		err := write()
		if err != nil && (ctx.Err() == nil || !errors.Is(err, ctx.Err())) {
			last = err
		}
		if err != nil && ctx.Err() != nil {
			return backoff.Permanent(err)
		}
		return err
	}, backoff.WithContext(b, ctx))
	if err != nil && last != nil && !errors.Is(last, err) {
		err = fmt.Errorf("%w (tried again until: %w)", last, err)
	}
	return err
}

// ack acks f's delivery and reports e (Unsettled when the ack fails).
func (c *Consumer) ack(f *flight, e Event) {
	if err := f.d.Ack(false); err != nil {
		e = Event{Kind: Unsettled, Info: e.Info, Err: fmt.Errorf("consumer: ack after %s: %w", e.Kind, err), At: time.Now()}
	}
	c.emit(e)
}

// reject rejects f's delivery without requeue (its queue dead-letters it, or drops it) when no
// copy of it can be parked, and reports it as Rejected.
func (c *Consumer) reject(f *flight, why error, in Info) {
	c.log.Error().Err(why).Str("id", in.ID).Str("queue", c.queue).Msg("consumer: rejected a message that cannot be parked")
	kind := Rejected
	if err := f.d.Reject(false); err != nil {
		kind, why = Unsettled, errors.Join(why, err)
	}
	c.emit(Event{Kind: kind, Info: in, Err: why, At: time.Now()})
}

// The two ways of giving a delivery back to its queue (see "Giving a delivery back" in the
// package documentation).
const (
	// failed: this message failed (its retry or parking copy could not be published, or no copy
	// of it can be): basic.reject with requeue, which RabbitMQ 4.3+ counts toward a quorum
	// queue's delivery limit, so that the ready queue still parks it in the end.
	failed = true
	// notFailed: the Consumer cannot work on it now (shutting down, the delay topology or the
	// store unavailable for a deferred copy): basic.nack with requeue, which RabbitMQ 4.3+ does
	// not count.
	notFailed = false
)

// nack gives f's delivery back to the queue: with basic.reject (requeue) when the message
// failed (failed), else with basic.nack (requeue). Both count on RabbitMQ before 4.3.
func (c *Consumer) nack(f *flight, why error, in Info, failedMsg bool) {
	c.log.Warn().Err(why).Str("id", in.ID).Bool("failed", failedMsg).Msg("consumer: giving the message back to the queue")
	kind := Requeued
	var err error
	if failedMsg {
		err = f.d.Reject(true)
	} else {
		err = f.d.Nack(false, true)
	}
	if err != nil {
		kind, why = Unsettled, errors.Join(why, err)
	}
	c.emit(Event{Kind: kind, Info: in, Err: why, At: time.Now()})
}

// fitWaits fits o's waits to m, the longest delay the topology carries: every wait the
// Consumer asks for (a retry, a deferred or an early copy) goes through the ladder, and a wait
// beyond its maximum could never be published, so the delivery would be given back to the queue
// again and again. A default backoff is shortened to fit; one the caller set is refused.
func (o *options) fitWaits(m time.Duration) error {
	var errs []error
	if fit := time.Duration(float64(m) / (1 + o.backoff.Jitter)); o.backoff.longest() > float64(m) && !o.backoffSet {
		o.backoff.Max = max(fit, time.Millisecond)
		o.backoff.Initial = min(o.backoff.Initial, o.backoff.Max)
	} else if o.backoff.longest() > float64(m) {
		errs = append(errs, fmt.Errorf("%w: Options.Backoff.Max %v with Jitter %v waits up to %s, beyond %v, the longest delay "+
			"the topology's ladder carries (retries wait in it): want Backoff.Max from Backoff.Initial (%v) to %v",
			ErrInvalidConfig, o.backoff.Max, o.backoff.Jitter, floatDuration(o.backoff.longest()), m, o.backoff.Initial, fit))
	}
	if o.busyDelay > m {
		errs = append(errs, fmt.Errorf("%w: Options.BusyDelay %v: want 1ms to %v, the longest delay the topology's ladder carries",
			ErrInvalidConfig, o.busyDelay, m))
	}
	o.maxDelay = m
	if o.busyDelay == 0 {
		o.busyDelay = min(max(o.lease/4, time.Second), m)
	}
	return errors.Join(errs...)
}
