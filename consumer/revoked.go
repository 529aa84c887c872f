package consumer

import (
	"context"
	"fmt"
	"time"

	"github.com/delaykit/rabbitdelay/revoke"
)

// openRevocations starts the reader of the revocation stream (package revoke) on the Consumer's
// connection settings; it returns once the reader has caught up with the stream.
func (c *Consumer) openRevocations(ctx context.Context) (*revoke.Revocations, error) {
	r, err := revoke.New(ctx, c.cfg, revoke.WithLogger(c.log), revoke.WithConnectionName(c.o.name+"-revocations"))
	if err != nil {
		return nil, fmt.Errorf("consumer: read the revocation stream (or pass WithoutRevocations): %w", err)
	}
	return r, nil
}

// revoked reports whether f's delivery is revoked, and then acks it (Event Revoked). When the
// stream cannot answer within ctx, it gives the delivery back to the queue and reports true too:
// either way the caller is done with it.
func (c *Consumer) revoked(ctx context.Context, f *flight, in Info) bool {
	gone, err := c.revs.Revoked(ctx, f.d)
	if err == nil && !gone {
		return false
	}
	if !f.state.CompareAndSwap(stateHandling, stateSettling) {
		return true // shutdown gave it back meanwhile
	}
	if err != nil {
		c.nack(f, fmt.Errorf("consumer: cannot tell whether the message is revoked: %w", err), in)
		return true
	}
	c.ack(f, Event{Kind: Revoked, Info: in, At: time.Now()})
	return true
}
