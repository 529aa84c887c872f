package consumer

import (
	"context"
	"errors"
	"fmt"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/delaykit/rabbitdelay/amqpdelay"
	"github.com/delaykit/rabbitdelay/revoke"
)

// openRevocations starts the reader of the revocation stream (package revoke) on the Consumer's
// connection settings; it returns once the reader has caught up with the stream.
func (c *Consumer) openRevocations(ctx context.Context) (*revoke.Revocations, error) {
	r, err := revoke.New(ctx, c.cfg, revoke.Options{Logger: c.log, ConnectionName: c.o.name + "-revocations"})
	if err != nil {
		return nil, fmt.Errorf("consumer: read the revocation stream (or set Options.NoRevocations): %w", err)
	}
	return r, nil
}

// revoked reports whether f's delivery is done with before its handler: revoked (acked, Event
// Revoked), or of unknown standing. When the stream cannot answer within ctx (missing, its
// connection lost), the delivery is deferred (deferCopy, with a settle timeout of its own): a
// copy comes back after the busy delay and is asked about again, and the delivery is acked, so
// that trouble with the stream does not count toward the queue's delivery limit as a give-back
// would. It is given back to the queue only when the Consumer is closing, or when the copy
// cannot be published either.
func (c *Consumer) revoked(ctx context.Context, f *flight, in Info, pub *amqpdelay.Publisher, orig amqp.Table, origKey string) bool {
	gone, err := c.revs.Revoked(ctx, f.d)
	switch {
	case err == nil && !gone:
		return false
	case err != nil && !errors.Is(err, revoke.ErrClosed):
		err = fmt.Errorf("consumer: cannot tell whether the message is revoked, so it was deferred: %w", err)
		c.log.Warn().Err(err).Str("id", in.ID).Str("queue", c.queue).Msg("consumer: revocation check failed")
		dctx, cancel := c.settleCtx()
		defer cancel()
		c.deferCopy(dctx, f, pub, orig, origKey, in, err)
		return true
	}
	if !f.state.CompareAndSwap(stateHandling, stateSettling) {
		return true // shutdown gave it back meanwhile
	}
	if err != nil {
		c.nack(f, fmt.Errorf("consumer: cannot tell whether the message is revoked: %w", err), in, notFailed)
		return true
	}
	c.ack(f, Event{Kind: Revoked, Info: in, At: time.Now()})
	return true
}
