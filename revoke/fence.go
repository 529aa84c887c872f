package revoke

import (
	"context"
	"fmt"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/delaykit/rabbitdelay/internal/amqpconn"
	"github.com/delaykit/rabbitdelay/internal/revlog"
)

// fenceReq asks the fencer for a fence with this time (Unix ms) and number.
type fenceReq struct {
	at  int64
	seq uint64
}

// fenceRead takes a fence record sent at at (Unix ms) into covered, and ownRead if it is ours.
func (r *Revocations) fenceRead(d *amqp.Delivery, at int64) {
	r.fmu.Lock()
	defer r.fmu.Unlock()
	grew := false
	if at > r.covered {
		r.covered, grew = at, true
	}
	seq, _ := d.Headers[revlog.SeqHeader].(int64)
	if who, _ := d.Headers[revlog.ReaderHeader].(string); who == r.self && seq > 0 && uint64(seq) > r.ownRead {
		r.ownRead, grew = uint64(seq), true
	}
	if grew {
		r.wake()
	}
}

// wake wakes the waiters; r.fmu is held.
func (r *Revocations) wake() {
	close(r.progress)
	r.progress = make(chan struct{})
}

func (r *Revocations) setTrouble(err error) { r.trouble.Store(&err) }

// fenceFailed forgets the fence in flight and wakes the waiters, which send another.
func (r *Revocations) fenceFailed() {
	r.fmu.Lock()
	r.sent, r.sentSeq = 0, 0
	r.wake()
	r.fmu.Unlock()
}

// fencer publishes the fences asked for, one at a time. Without a fence channel it drops the
// request: reconnect wakes the waiters. After a failed fence it backs off before it wakes them
// to ask again, so that a stream that refuses fences does not make them ask in a busy loop.
func (r *Revocations) fencer() {
	b := newBackOff()
	for {
		var req fenceReq
		select {
		case <-r.ctx.Done():
			return
		case req = <-r.fenceReq:
		}
		ch := r.fch.Load()
		if ch == nil {
			r.fencesFailed.Add(1)
			continue
		}
		ctx, cancel := context.WithTimeout(r.ctx, 10*time.Second)
		err := publishConfirmed(ctx, ch, r.stream, false, amqp.Publishing{
			Type: revlog.TypeFence, DeliveryMode: amqp.Persistent,
			Headers: amqp.Table{revlog.AtHeader: req.at, revlog.ReaderHeader: r.self, revlog.SeqHeader: int64(req.seq)},
		})
		cancel()
		if err != nil {
			r.o.Logger.Warn().Err(err).Msg("revoke: fence not written")
			r.fencesFailed.Add(1)
			r.setTrouble(fmt.Errorf("a fence was not written: %w", err))
			if !amqpconn.Sleep(r.ctx, b.NextBackOff()) {
				return
			}
			r.fenceFailed()
			continue
		}
		b.Reset()
		r.trouble.Store(nil)
		r.fences.Add(1)
	}
}

// wait returns once a fence sent at or after need (Unix ms, any reader's) and this reader's
// fence number seq (0: none) have been read back, sending a fence when none that would do is
// on its way.
func (r *Revocations) wait(ctx context.Context, need int64, seq uint64) error {
	for {
		r.fmu.Lock()
		if r.covered >= need && r.ownRead >= seq {
			r.fmu.Unlock()
			return nil
		}
		if r.sent < need || r.sentSeq < seq {
			// Time and number taken before the send: every record confirmed before that time,
			// and every number a waiter took as seqGen + 1 so far, precede it.
			req := fenceReq{at: max(time.Now().UnixMilli(), need), seq: r.seqGen + 1}
			select {
			case r.fenceReq <- req:
				r.sent, r.sentSeq, r.seqGen = req.at, req.seq, req.seq
			default: // the fencer is busy: wait for its outcome and look again
			}
		}
		progress := r.progress
		r.fmu.Unlock()
		select {
		case <-progress:
		case <-r.ctx.Done():
			return ErrClosed
		case <-ctx.Done():
			if t := r.trouble.Load(); t != nil {
				return fmt.Errorf("revoke: context ended while waiting for the revocation stream %q, which cannot be read "+
					"now (%w): %w", r.stream, *t, ctx.Err())
			}
			return fmt.Errorf("revoke: context ended while waiting for the revocation stream %q: %w", r.stream, ctx.Err())
		}
	}
}
