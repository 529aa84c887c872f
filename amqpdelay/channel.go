package amqpdelay

import (
	"context"
	"errors"
	"fmt"
	"sync"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/delaykit/rabbitdelay/internal/amqpconn"
)

// pubChan is one channel in confirm mode shared by many goroutines: publishes are serialized
// around the write only, so confirms are pipelined. One dispatcher receives returns and
// confirms in wire order; RabbitMQ sends a mandatory message's basic.return before its
// basic.ack. A return names only the message ID: one publish per ID is in flight on a channel.
type pubChan struct {
	ch  *amqp.Channel
	sem chan struct{} // held while writing a publish
	// serial, when not nil, is held from before the write until the confirm, so that a refusal
	// closing the channel (403, 404, 406) answers that one publish alone.
	serial   chan struct{}
	frameMax int // negotiated, in bytes (0: unknown)

	pmu     sync.Mutex // guards the maps; never held while calling into amqp091
	pending map[uint64]*inflight
	byID    map[string]*inflight
	deadErr error // set under pmu when the channel is gone; then dead is closed
	dead    chan struct{}
}

type inflight struct {
	id       string
	done     chan struct{}
	returned bool
	retCode  uint16
	retText  string
	lostErr  error // non-nil: the channel closed first
}

// errNotSent: the channel was unusable before the write; retrying risks no duplicate.
var errNotSent = errors.New("amqpdelay: channel unusable, message not sent")

// openPubChan opens a channel in confirm mode; onDead is called once it is gone.
func openPubChan(conn *amqp.Connection, onDead func(), serial bool) (*pubChan, error) {
	ch, err := conn.Channel()
	if err != nil {
		return nil, fmt.Errorf("open channel: %w", err)
	}
	if err := ch.Confirm(false); err != nil {
		_ = ch.Close()
		return nil, fmt.Errorf("enable publisher confirms: %w", err)
	}
	pc := &pubChan{
		ch:       ch,
		frameMax: conn.Config.FrameSize,
		sem:      make(chan struct{}, 1),
		pending:  make(map[uint64]*inflight),
		byID:     make(map[string]*inflight),
		dead:     make(chan struct{}),
	}
	if serial {
		pc.serial = make(chan struct{}, 1)
	}
	closes := ch.NotifyClose(make(chan *amqp.Error, 1))
	confirms := ch.NotifyPublish(make(chan amqp.Confirmation, confirmBuffer))
	returns := ch.NotifyReturn(make(chan amqp.Return))
	go pc.dispatch(confirms, returns, closes, onDead)
	return pc, nil
}

func (pc *pubChan) dispatch(confirms <-chan amqp.Confirmation, returns <-chan amqp.Return, closes <-chan *amqp.Error, onDead func()) {
	for confirms != nil || returns != nil {
		select {
		case r, ok := <-returns:
			if !ok {
				returns = nil
				continue
			}
			pc.pmu.Lock()
			if f := pc.byID[r.MessageId]; f != nil {
				f.returned, f.retCode, f.retText = true, r.ReplyCode, r.ReplyText
			}
			pc.pmu.Unlock()
		case c, ok := <-confirms:
			if !ok {
				confirms = nil
				continue
			}
			pc.pmu.Lock()
			f := pc.pending[c.DeliveryTag]
			if f != nil {
				delete(pc.pending, c.DeliveryTag)
				if pc.byID[f.id] == f {
					delete(pc.byID, f.id)
				}
			}
			pc.pmu.Unlock()
			if f != nil {
				close(f.done)
			}
		}
	}
	// The close error, if any, was queued before the listeners closed.
	cause := amqpconn.CloseReason(closes, 0, amqp.ErrClosed)
	pc.pmu.Lock()
	pc.deadErr = cause
	lost := pc.pending
	pc.pending, pc.byID = nil, nil
	pc.pmu.Unlock()
	for _, f := range lost {
		f.lostErr = cause
		close(f.done)
	}
	close(pc.dead)
	if onDead != nil {
		onDead()
	}
}

func (pc *pubChan) isDead() bool {
	select {
	case <-pc.dead:
		return true
	default:
		return false
	}
}

// publish writes m and waits for its confirmation; size is m's contentHeaderSize and reserve
// the header room to leave free in the frame (deadLetterReserve), in bytes. errNotSent: nothing
// was written; ErrInvalidInput for a message amqp091 cannot encode: never retry.
func (pc *pubChan) publish(ctx context.Context, exchange, key string, mandatory bool, m *amqp.Publishing, size, reserve int) error {
	if problem := headerTooLarge(size, pc.frameMax, reserve); problem != "" {
		return fmt.Errorf("%w: %s", ErrInvalidInput, problem)
	}
	if pc.serial != nil {
		if err := pc.takeSerial(ctx); err != nil {
			return err
		}
		defer func() { <-pc.serial }()
	}
	f := &inflight{id: m.MessageId, done: make(chan struct{})}
	dc, err := pc.write(ctx, exchange, key, mandatory, m, f)
	if err != nil {
		return err
	}
	select {
	case <-f.done:
	case <-ctx.Done():
		return ctxErr(ctx, "waiting for the broker's confirmation (the message may still be stored and delivered)")
	}
	switch {
	case f.lostErr != nil:
		return fmt.Errorf("%w (exchange %q, routing key %q): %w", ErrConnectionLost, exchange, key, f.lostErr)
	case f.returned:
		return fmt.Errorf("%w: the broker returned it: %d %s (exchange %q, routing key %q)", ErrUnroutable, f.retCode, f.retText, exchange, key)
	case !dc.Acked():
		// The deferred confirmation, not the listener's Ack, which amqp091-go v1.16 gets wrong
		// for a nack before a multiple ack (RabbitMQ's coalesce_and_send sends that order).
		return fmt.Errorf("%w (exchange %q, routing key %q)", ErrNacked, exchange, key)
	}
	return nil
}

// write sends m as f, once no other publish of its message ID is in flight on pc. errNotSent:
// nothing was written.
func (pc *pubChan) write(ctx context.Context, exchange, key string, mandatory bool, m *amqp.Publishing, f *inflight) (*amqp.DeferredConfirmation, error) {
	for {
		select {
		case pc.sem <- struct{}{}:
		case <-pc.dead:
			return nil, errNotSent
		case <-ctx.Done():
			return nil, ctxErr(ctx, "waiting to publish")
		}
		// The tag before pmu: amqp091's reader holds GetNextPublishSeqNo's lock while it hands
		// a confirm to the dispatcher, which may wait for pmu. sem keeps the tag.
		tag := pc.ch.GetNextPublishSeqNo()
		pc.pmu.Lock()
		if prev := pc.byID[f.id]; pc.deadErr != nil || prev != nil {
			dead := pc.deadErr != nil
			pc.pmu.Unlock()
			<-pc.sem
			if dead {
				return nil, errNotSent
			}
			select {
			case <-prev.done:
				continue
			case <-pc.dead:
				return nil, errNotSent
			case <-ctx.Done():
				return nil, ctxErr(ctx, "waiting for an earlier publish of the same message ID")
			}
		}
		pc.pending[tag] = f
		pc.byID[f.id] = f
		pc.pmu.Unlock()
		dc, err := pc.ch.PublishWithDeferredConfirmWithContext(ctx, exchange, key, mandatory, false, *m)
		if err != nil {
			pc.pmu.Lock()
			if pc.pending != nil && pc.pending[tag] == f {
				delete(pc.pending, tag)
				delete(pc.byID, f.id)
			}
			pc.pmu.Unlock()
			<-pc.sem
			if ctx.Err() != nil {
				return nil, ctxErr(ctx, "publishing")
			}
			if !isIOError(err) {
				// amqp091 closed the connection over it; it would close the next one too.
				return nil, fmt.Errorf("%w: amqp091 could not encode the message (exchange %s, routing key %s) and closed the connection; "+
					"the Publisher reconnects: %w", ErrInvalidInput, preview(exchange), preview(key), err)
			}
			return nil, fmt.Errorf("%w: %w", errNotSent, err)
		}
		<-pc.sem
		return dc, nil
	}
}

func ctxErr(ctx context.Context, doing string) error {
	return fmt.Errorf("amqpdelay: context ended while %s: %w", doing, ctx.Err())
}

// serialTurn waits for pc's serial slot without keeping it, so that a publish queued there can
// see whether the publishes before it settled what made it risky. errNotSent: pc is gone.
func (pc *pubChan) serialTurn(ctx context.Context) error {
	if pc.serial == nil {
		return nil
	}
	if err := pc.takeSerial(ctx); err != nil {
		return err
	}
	<-pc.serial
	return nil
}

func (pc *pubChan) takeSerial(ctx context.Context) error {
	select {
	case pc.serial <- struct{}{}:
		return nil
	case <-pc.dead:
		return errNotSent
	case <-ctx.Done():
		return ctxErr(ctx, "waiting to publish alone on the channel for publishes the broker may refuse")
	}
}

// confirmBuffer lets amqp091's reader hand confirms over without waiting for the dispatcher.
const confirmBuffer = 4096
