package consumer

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/delaykit/rabbitdelay/revoke"
)

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
