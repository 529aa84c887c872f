package consumer

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/delaykit/rabbitdelay/revoke"
)

// revoked reports whether f's delivery is done with before its handler: revoked (acked, Event
// Revoked), or of unknown standing. When the stream cannot answer within ctx (missing, its
// connection lost), the delivery is deferred for the busy delay, with a settle timeout of its
// own, and acked: trouble with the stream must not count toward the queue's delivery limit as
// a give-back would. It is given back only when the Consumer is closing, or when the copy
// cannot be published either.
func (c *Consumer) revoked(ctx context.Context, f *flight) bool {
	gone, err := c.revs.Revoked(ctx, f.d)
	switch {
	case err == nil && !gone:
		return false
	case err != nil && !errors.Is(err, revoke.ErrClosed):
		err = fmt.Errorf("consumer: cannot tell whether the message is revoked, so it was deferred: %w", err)
		c.log.Warn().Err(err).Str("id", f.in.ID).Str("queue", c.queue).Msg("consumer: revocation check failed")
		dctx, cancel := c.settleCtx()
		defer cancel()
		c.deferFor(dctx, f, c.o.busyDelay, err)
		return true
	}
	if !f.settle() {
		return true // shutdown gave it back meanwhile
	}
	if err != nil {
		c.nack(f, fmt.Errorf("consumer: cannot tell whether the message is revoked: %w", err), notFailed)
		return true
	}
	c.ack(f, Event{Kind: Revoked, Info: f.in, At: time.Now()})
	return true
}
