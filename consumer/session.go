package consumer

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/delaykit/rabbitdelay/amqpdelay"
	"github.com/delaykit/rabbitdelay/internal/amqpconn"
)

// session is one connection and its consuming channel.
type session struct {
	conn       *amqp.Connection
	ch         *amqp.Channel
	tag        string
	deliveries <-chan amqp.Delivery
	closed     chan *amqp.Error
	flights    sync.Map // of *flight: those in progress

	// careful counts down the deliveries to read with a prefetch of 1 after an unreadable one.
	careful atomic.Int64
}

// carefulDeliveries is how many deliveries a session opened after an unreadable one reads with
// a prefetch of 1: twice the lost prefetch, so those in flight with it have come back first.
func carefulDeliveries(concurrency int) int { return 2 * concurrency }

// isUnreadable reports whether the client closed the connection as it could not parse a frame.
// amqp091-go closes it with a client FrameError on every read error, a reset or EOF too: only
// its two parse errors (ErrSyntax, ErrFrame) count.
func isUnreadable(err error) bool {
	var ae *amqp.Error
	if !errors.As(err, &ae) || ae.Server || (ae.Code != amqp.FrameError && ae.Code != amqp.SyntaxError) {
		return false
	}
	return strings.Contains(ae.Reason, amqp.ErrSyntax.Reason) || strings.Contains(ae.Reason, amqp.ErrFrame.Reason)
}

// open dials, checks the queue, binds it to the retry exchange and starts consuming; careful
// starts with a prefetch of 1.
func (c *Consumer) open(ctx context.Context, careful bool) (*session, error) {
	conn, err := amqpdelay.Dial(ctx, c.cfg, c.o.ConnectionName)
	if err != nil {
		return nil, fmt.Errorf("consumer: dial: %w", err)
	}
	fail := func(err error) (*session, error) {
		_ = amqpconn.Close(conn)
		return nil, err
	}
	// Before the consume: an unreadable delivery may close the connection at once.
	closed := conn.NotifyClose(make(chan *amqp.Error, 1))
	ch, err := conn.Channel()
	if err != nil {
		return fail(fmt.Errorf("consumer: open a channel: %w", err))
	}
	if _, err := ch.QueueDeclarePassive(c.queue, true, false, false, false, nil); amqpconn.IsNotFound(err) {
		return fail(fmt.Errorf("%w: queue %q does not exist in this vhost (RabbitMQ's passive declare answered 404): declare it "+
			"(a ready queue of `rabbitdelay apply`, AMQPDELAY_READY_QUEUES) or correct the name: %w", ErrQueueNotFound, c.queue, err))
	} else if err != nil {
		return fail(fmt.Errorf("consumer: check queue %q: %w", c.queue, err))
	}
	if !c.o.NoRetryBinding {
		if err := ch.QueueBind(c.queue, c.queue, c.names.Retry(), false, nil); err != nil {
			return fail(fmt.Errorf("consumer: bind queue %q to the retry exchange %q with key %q (run `rabbitdelay apply`, or pass "+
				"Options.NoRetryBinding when the queue is a ready queue and this user may not bind): %w", c.queue, c.names.Retry(), c.queue, err))
		}
	}
	prefetch := c.o.Concurrency
	if careful {
		prefetch = 1
	}
	if err := ch.Qos(prefetch, 0, false); err != nil {
		return fail(fmt.Errorf("consumer: set prefetch %d: %w", prefetch, err))
	}
	tag := fmt.Sprintf("%s-%s", c.o.ConnectionName, newToken()[:8])
	deliveries, err := ch.Consume(c.queue, tag, false, false, false, false, nil)
	if err != nil {
		return fail(fmt.Errorf("consumer: consume queue %q: %w", c.queue, err))
	}
	s := &session{conn: conn, ch: ch, tag: tag, deliveries: deliveries, closed: closed}
	if careful {
		s.careful.Store(int64(carefulDeliveries(c.o.Concurrency)))
	}
	return s, nil
}

// serve runs the workers of s until ctx ends (then it shuts down and returns nil) or the
// deliveries end (it returns why).
func (c *Consumer) serve(ctx context.Context, s *session) error {
	// Handlers' contexts end at the hard deadline of a shutdown, not when ctx ends.
	base, cancelBase := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelBase()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range c.o.Concurrency {
		wg.Go(func() { c.work(base, s, stop) })
	}
	workers := make(chan struct{})
	go func() { wg.Wait(); close(workers) }()

	select {
	case <-workers:
		why := amqpconn.CloseReason(s.closed, 0, errors.New("the broker closed the consuming channel"))
		_ = amqpconn.Close(s.conn)
		return fmt.Errorf("consumer: consuming %q ended: %w", c.queue, why)
	case <-ctx.Done():
	}
	close(stop)
	c.shutdown(s, workers, cancelBase)
	return nil
}

func (c *Consumer) work(base context.Context, s *session, stop <-chan struct{}) {
	for {
		select {
		case <-stop:
			return
		case d, ok := <-s.deliveries:
			if !ok {
				return
			}
			select {
			case <-stop: // a delivery that raced the shutdown
				c.giveBack(d, "shutting down")
				continue
			default:
			}
			if s.careful.Load() > 0 && s.careful.Add(-1) == 0 {
				if err := s.ch.Qos(c.o.Concurrency, 0, false); err != nil {
					c.o.Logger.Warn().Err(err).Msg("consumer: set the prefetch back to the concurrency")
				}
			}
			c.process(base, s, d)
		}
	}
}

// shutdown lets running handlers finish within the shutdown timeout, then gives the rest back
// and cancels their contexts, and closes the session once workers is closed.
func (c *Consumer) shutdown(s *session, workers <-chan struct{}, cancelBase context.CancelFunc) {
	// Deliveries sent before the cancel are nacked: closing the channel with them unacked would
	// count toward a quorum queue's delivery limit on RabbitMQ 4.3.
	_ = s.ch.Cancel(s.tag, false)
	drained := make(chan struct{})
	go func() {
		defer close(drained)
		for d := range s.deliveries {
			c.giveBack(d, "shutting down")
		}
	}()
	grace := time.NewTimer(c.o.ShutdownTimeout)
	defer grace.Stop()
	select {
	case <-workers:
	case <-grace.C:
		s.flights.Range(func(k, _ any) bool {
			if f := k.(*flight); f.state.CompareAndSwap(stateHandling, stateReturned) {
				c.giveBack(f.d, "shutdown timeout")
			}
			return true
		})
		cancelBase()
		<-workers
	}
	select {
	case <-drained:
	case <-time.After(5 * time.Second): // the channel then returns the rest as it closes
	}
	_ = s.ch.Close()
	if err := amqpconn.Close(s.conn); err != nil && !errors.Is(err, amqp.ErrClosed) {
		c.o.Logger.Warn().Err(err).Msg("consumer: close connection")
	}
}

// giveBack returns d to the queue at shutdown with a nack (not counted as a failure).
func (c *Consumer) giveBack(d amqp.Delivery, why string) {
	in := Info{Queue: c.queue}
	in.ID, in.IDDerived = c.identify(d)
	c.report(in, Requeued, errors.New(why), d.Nack(false, true))
}
