package amqpdelay

import (
	"context"
	"fmt"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// askOnCheckChannel runs ask on a channel of its own on the current connection, for the
// checks made before a publish (permitted, hasTopology). One check is outstanding at a time
// (checkSem), even when the publishes that started them have given up, so checks take at most
// one channel of the connection's channel_max; the semaphore is released by the check itself,
// when the broker has answered (or the connection is gone), not when ctx ends: a broker that
// blocks its connections (a memory alarm) would otherwise collect one open check channel per
// timed-out publish. During an outage it waits for the connection.
//
// It returns the broker's answer (checkAnswer), or, when none came, ErrClosed or ctx's error
// (wrapped, naming doing). skip, when not nil, is asked once the turn has come: true ends the
// check with an empty answer.
func (p *Publisher) askOnCheckChannel(ctx context.Context, doing string, skip func() bool, ask func(*amqp.Channel) error) (checkAnswer, error) {
	var s *session
	for s == nil {
		if _, err := p.acquire(ctx, generalSlots); err != nil { // waits through an outage
			return checkAnswer{}, err
		}
		s = p.sess.Load()
	}
	select {
	case p.checkSem <- struct{}{}:
	case <-p.closeCtx.Done():
		return checkAnswer{}, ErrClosed
	case <-ctx.Done():
		return checkAnswer{}, fmt.Errorf("amqpdelay: context ended while waiting to %s: %w", doing, ctx.Err())
	}
	if skip != nil && skip() {
		<-p.checkSem
		return checkAnswer{}, nil
	}
	done := make(chan error, 1)
	go func() {
		defer func() { <-p.checkSem }()
		ch, err := s.conn.Channel()
		if err != nil {
			done <- err
			return
		}
		closed := ch.NotifyClose(make(chan *amqp.Error, 1))
		if err = ask(ch); err == nil {
			_ = ch.Close()
			done <- nil
			return
		}
		t := time.NewTimer(5 * time.Second)
		defer t.Stop()
		select {
		case e, ok := <-closed:
			if ok && e != nil {
				err = e
			}
		case <-t.C:
		}
		done <- err
	}()
	select {
	case err := <-done:
		return checkAnswer{err: err, lost: err != nil && s.conn.IsClosed()}, nil
	case <-p.closeCtx.Done():
		return checkAnswer{}, ErrClosed
	case <-ctx.Done():
		return checkAnswer{}, fmt.Errorf("amqpdelay: context ended while waiting to %s: %w", doing, ctx.Err())
	}
}

// checkAnswer is what the broker answered a check (askOnCheckChannel): err is the error of the
// check's calls or, when the broker closed the channel, the close's reason (a call that meets
// the closed channel, a later one than the call the broker refused, gets only amqp091's 504
// "channel/connection is not open"); lost reports that the connection closed meanwhile (err
// then says nothing: ask again on the next connection). err nil: the check passed.
type checkAnswer struct {
	err  error
	lost bool
}
