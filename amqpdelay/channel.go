package amqpdelay

import (
	"context"
	"errors"
	"fmt"
	"sync"

	amqp "github.com/rabbitmq/amqp091-go"
)

// pubChan is one AMQP channel in confirm mode shared by many publishing goroutines.
//
// Publishes are serialized only around the write (sem); each then waits for its own
// confirmation, so confirms are pipelined. One dispatcher goroutine receives basic.return
// (unbuffered) and the confirmations (buffered, confirmBuffer) in wire order. RabbitMQ sends a
// mandatory message's basic.return before its basic.ack
// (https://www.rabbitmq.com/docs/confirms#when-publishes-are-confirmed), so a publish's return
// is recorded before the publish completes. A return carries no delivery tag, only the
// properties, so at most one publish per message ID is in flight on a channel.
type pubChan struct {
	ch  *amqp.Channel
	sem chan struct{} // capacity 1: held while writing a publish
	// serial, when not nil (capacity 1), is held from before the write until the confirm: one
	// publish at a time, so a refusal that closes the channel (403, 404, 406) can only be
	// the answer to the one publish in flight, and costs no other publish its confirm.
	serial chan struct{}
	// frameMax is the connection's negotiated frame_max in bytes (0: unknown): the content
	// header of a publish must fit in one frame.
	frameMax int

	pmu     sync.Mutex // guards the maps; never held while calling into amqp091
	pending map[uint64]*inflight
	byID    map[string]*inflight
	deadErr error // set (under pmu) when the channel is gone; then dead is closed

	dead chan struct{}
}

// inflight is one publish waiting for its confirmation.
type inflight struct {
	id       string
	done     chan struct{}
	returned bool
	retCode  uint16
	retText  string
	lostErr  error // non-nil: the channel closed first
}

// errNotSent reports that the channel was unusable before the message was written: the
// publish can be retried on another channel without risk of a duplicate.
var errNotSent = errors.New("amqpdelay: channel unusable, message not sent")

// openPubChan opens a channel in confirm mode on conn; serial makes it carry one publish at
// a time (pubChan.serial). onDead is called once the channel is gone.
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
	// The channel is closed: its close error (if any) was queued before the listeners closed.
	var cause error = amqp.ErrClosed
	select {
	case e, ok := <-closes:
		if ok && e != nil {
			cause = e
		}
	default:
	}
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

// publish writes m and waits for its confirmation; size is m's contentHeaderSize in bytes and
// reserve the header room in bytes to leave free in the frame (deadLetterReserve). An error
// wrapping errNotSent means nothing was written and the caller may use another channel; an
// error amqp091 gives for a message it cannot encode wraps ErrInvalidInput and must not be
// retried.
func (pc *pubChan) publish(ctx context.Context, exchange, key string, mandatory bool, m *amqp.Publishing, size, reserve int) error {
	if problem := headerTooLarge(size, pc.frameMax, reserve); problem != "" {
		return fmt.Errorf("%w: %s", ErrInvalidInput, problem)
	}
	if pc.serial != nil {
		select {
		case pc.serial <- struct{}{}:
		case <-pc.dead:
			return errNotSent
		case <-ctx.Done():
			return ctxErr(ctx, "waiting to publish alone on the channel for publishes the broker may refuse")
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
		// The answer is the deferred confirmation's, not the listener's Ack: amqp091 settles
		// the deferred confirmation of a tag before any listener hears of it
		// (confirms.One and confirms.Multiple), and amqp091-go v1.16 hands a listener the Ack
		// of a later basic.ack with multiple=true for a tag it had already received a
		// basic.nack for out of order (confirms.Multiple ignores the nack it holds for
		// resequencing). RabbitMQ sends that order (rabbit_channel's coalesce_and_send: a nack
		// of a higher tag while a lower one is unconfirmed, then a multiple ack). The listener
		// is used for its order only: the publish's basic.return, if any, came before.
		return fmt.Errorf("%w (exchange %q, routing key %q)", ErrNacked, exchange, key)
	}
	return nil
}

// write sends m as the publish f, once no other publish of the same message ID is in flight on
// pc (a return names only the message ID), and returns amqp091's record of its answer. An
// error wrapping errNotSent means nothing was written.
func (pc *pubChan) write(ctx context.Context, exchange, key string, mandatory bool, m *amqp.Publishing, f *inflight) (*amqp.DeferredConfirmation, error) {
	for {
		select {
		case pc.sem <- struct{}{}:
		case <-pc.dead:
			return nil, errNotSent
		case <-ctx.Done():
			return nil, ctxErr(ctx, "waiting to publish")
		}
		// Read the tag before taking pmu: amqp091's reader goroutine holds the lock behind
		// GetNextPublishSeqNo while it hands a confirmation to the dispatcher, which may be
		// waiting for pmu. Holding sem, no other publish can change the tag meanwhile.
		tag := pc.ch.GetNextPublishSeqNo()
		pc.pmu.Lock()
		if pc.deadErr != nil {
			pc.pmu.Unlock()
			<-pc.sem
			return nil, errNotSent
		}
		if prev := pc.byID[f.id]; prev != nil {
			pc.pmu.Unlock()
			<-pc.sem
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
				// amqp091 could not encode the message and has closed the connection because
				// of it; the same message would close the next connection too: never retry.
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

// serialTurn waits until no publish holds pc's serial slot (if pc has one), without keeping
// the slot: a publish queued behind others can then see whether what made it risky was settled
// by the publishes before it (refusals.go) and take a shared channel instead. An error wrapping
// errNotSent means the channel is gone.
func (pc *pubChan) serialTurn(ctx context.Context) error {
	if pc.serial == nil {
		return nil // a broker with too few channels: the serial slot shares a channel
	}
	select {
	case pc.serial <- struct{}{}:
		<-pc.serial
		return nil
	case <-pc.dead:
		return errNotSent
	case <-ctx.Done():
		return ctxErr(ctx, "waiting to publish alone on the channel for publishes the broker may refuse")
	}
}

// confirmBuffer is the capacity of the Go channel that receives a pubChan's confirmations, so
// that amqp091's reader goroutine hands them over without waiting for the dispatcher.
const confirmBuffer = 4096
