package consumer

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/delaykit/rabbitdelay/amqpdelay"
	"github.com/delaykit/rabbitdelay/internal/amqpconn"
	"github.com/delaykit/rabbitdelay/internal/delayspec"
	"github.com/delaykit/rabbitdelay/revoke"
)

// Handler handles one delivery: nil when the message is done (acked), an error to have it
// retried after the back-off, or one wrapped with [Permanent] to have it parked at once. ctx
// ends with the handler timeout or the shutdown's grace period; [InfoFrom] reads the delivery's
// [Info] from it. A panic is a [*PanicError]. The handler must not ack, nack or reject d.
type Handler func(ctx context.Context, d amqp.Delivery) error

// Consumer consumes one queue and runs a Handler for each message: see the package
// documentation. Create it with [New] and run it with [Consumer.Run].
type Consumer struct {
	cfg   amqpdelay.Config
	queue string
	h     Handler
	o     options
	names delayspec.Names
	ran   atomic.Bool
	pub   *amqpdelay.Publisher // the retry Publisher, set by Run
	revs  *revoke.Revocations  // set by Run unless Options.NoRevocations
	m     *consumerMetrics     // nil records nothing
}

// New returns a Consumer of queue that runs h, with the connection settings and delay topology
// (cfg.Prefix) of cfg, and opts. It does no I/O. Errors wrap ErrInvalidConfig and name every
// unusable value; Run finds waits longer than the topology's ladder carries.
func New(cfg amqpdelay.Config, queue string, h Handler, opts Options) (*Consumer, error) {
	o, err := opts.resolve()
	errs := []error{err}
	if queue == "" || len(queue) > delayspec.MaxNameLen {
		errs = append(errs, fmt.Errorf("%w: queue name %q: want 1 to %d bytes", ErrInvalidConfig, queue, delayspec.MaxNameLen))
	}
	if h == nil {
		errs = append(errs, fmt.Errorf("%w: nil handler", ErrInvalidConfig))
	}
	m, err := newConsumerMetrics(o.Metrics)
	if err := errors.Join(append(errs, err)...); err != nil {
		return nil, err
	}
	m.start(queue)
	return &Consumer{cfg: cfg, queue: queue, h: h, o: o, names: delayspec.Names{Prefix: cfg.Prefix}, m: m}, nil
}

// Queue returns the name of the queue the Consumer consumes.
func (c *Consumer) Queue() string { return c.queue }

// Run consumes until ctx ends, then stops taking messages, lets running handlers finish for up
// to [Options.ShutdownTimeout], gives the rest back (nack with requeue) and returns nil once
// every handler has returned. After a connection loss it reconnects with back-off.
//
// At start (within 60 s) it pings the store (a [RedisStore], or a Store with a method
// Ping(ctx) error), opens the retry Publisher and the connection, checks and binds the queue
// and reads the revocation stream; it returns a failure there: ErrStore, ErrInvalidConfig (a
// wait beyond the ladder's maximum), ErrQueueNotFound, amqpdelay.ErrTopologyMissing, a dial
// error, or ctx's error. A second call: ErrRunning.
func (c *Consumer) Run(ctx context.Context) error {
	if ctx == nil {
		return fmt.Errorf("%w: nil context (use context.Background())", ErrInvalidConfig)
	}
	if !c.ran.CompareAndSwap(false, true) {
		return ErrRunning
	}
	s, err := c.start(ctx)
	if c.pub != nil {
		defer func() {
			if err := c.pub.Close(); err != nil {
				c.o.Logger.Warn().Err(err).Msg("consumer: close the retry publisher")
			}
		}()
	}
	if c.revs != nil {
		defer c.revs.Close()
	}
	if err != nil {
		return err
	}
	for {
		lost := c.serve(ctx, s)
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
				"back with it and charged a delivery attempt", lost, c.queue, carefulDeliveries(c.o.Concurrency))
			c.o.Logger.Error().Err(lost).Str("queue", c.queue).Msg("consumer: an unreadable delivery closed the connection; reconnecting")
		} else {
			c.o.Logger.Warn().Err(lost).Str("queue", c.queue).Msg("consumer: connection lost; reconnecting")
		}
		c.emit(Event{Kind: Disconnected, Err: lost, At: time.Now()})
		if s = c.reconnect(ctx, unreadable); s == nil {
			return nil
		}
		c.o.Logger.Info().Str("queue", c.queue).Msg("consumer: reconnected")
		c.emit(Event{Kind: Reconnected, At: time.Now()})
	}
}

// start runs Run's start-up steps, within 60 s.
func (c *Consumer) start(ctx context.Context) (*session, error) {
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	if err := ping(ctx, c.o.Store); err != nil {
		return nil, fmt.Errorf("consumer: the store of handled ids does not answer, so no delivery could be claimed "+
			"(is Redis running, and are the address and password of its client right?): %w", err)
	}
	cfg, o := c.cfg, c.o
	pub, err := amqpdelay.NewPublisher(ctx, amqpdelay.Config{URL: cfg.URL, TLSCA: cfg.TLSCA, TLSCert: cfg.TLSCert, TLSKey: cfg.TLSKey,
		Prefix: cfg.Prefix, Logger: o.Logger, Channels: 1, ConnectionName: o.ConnectionName + "-retry", ReconnectMin: o.ReconnectMin, ReconnectMax: o.ReconnectMax})
	if err != nil {
		return nil, fmt.Errorf("consumer: start the retry Publisher (retries go through the delay topology to the retry exchange %q, "+
			"which `rabbitdelay apply` declares): %w", c.names.Retry(), err)
	}
	c.pub = pub
	if err := c.o.fitWaits(pub.MaxDelay()); err != nil {
		return nil, err
	}
	if !c.o.NoRevocations {
		r, err := revoke.New(ctx, c.cfg, revoke.Options{Logger: c.o.Logger, ConnectionName: c.o.ConnectionName + "-revocations"})
		if err != nil {
			return nil, fmt.Errorf("consumer: read the revocation stream (or set Options.NoRevocations): %w", err)
		}
		c.revs = r
	}
	return c.open(ctx, false)
}

// reconnect opens a new session with back-off, waiting before each attempt; nil once ctx ended.
func (c *Consumer) reconnect(ctx context.Context, careful bool) *session {
	b := amqpconn.NewBackOff(c.o.ReconnectMin, c.o.ReconnectMax, 1.5)
	for attempt := 1; amqpconn.Sleep(ctx, b.NextBackOff()); attempt++ {
		dctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		s, err := c.open(dctx, careful)
		cancel()
		if err == nil {
			return s
		}
		if ctx.Err() != nil {
			return nil
		}
		c.o.Logger.Warn().Err(err).Int("attempt", attempt).Msg("consumer: reconnect failed")
	}
	return nil
}

func (c *Consumer) emit(e Event) {
	c.m.observe(c.queue, e)
	if c.o.Observer != nil {
		c.o.Observer(e)
	}
}
