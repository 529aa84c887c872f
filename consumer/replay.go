package consumer

import (
	"context"
	"fmt"
	"maps"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/delaykit/rabbitdelay/amqpdelay"
	"github.com/delaykit/rabbitdelay/internal/amqpconn"
	"github.com/delaykit/rabbitdelay/internal/delayspec"
)

// HeaderReplayed (int64, Unix ms) is when [Replay] sent a parked message back to its queue.
const HeaderReplayed = "rabbitdelay-replayed"

// Replay moves up to n messages that a Consumer of queue parked from the parking queue back to
// queue (n <= 0: all), and returns how many it moved. A moved message loses its failure record
// (attempt 1 again), UserId, CC and BCC, and gets HeaderReplayed. Each is confirmed before its
// parked copy is acked, so a failure midway loses nothing (a message may be in both queues).
// Other parked messages go to the back of the parking queue the same way (a nack would count
// toward the delivery limit on RabbitMQ 4.0 to 4.2). Run one Replay at a time per parking queue.
//
// ctx bounds the call. Errors: ErrQueueNotFound, a dial error, a refused or unconfirmed
// publish, an unreadable parked message (the error says how to take it out), or ctx's error.
func Replay(ctx context.Context, cfg amqpdelay.Config, queue string, n int) (moved int, err error) {
	if ctx == nil {
		return 0, fmt.Errorf("%w: nil context", ErrInvalidConfig)
	}
	if queue == "" {
		return 0, fmt.Errorf("%w: empty queue name", ErrInvalidConfig)
	}
	parking := delayspec.Names{Prefix: cfg.Prefix}.Parking()
	conn, err := amqpdelay.Dial(ctx, cfg, "rabbitdelay-replay")
	if err != nil {
		return 0, fmt.Errorf("consumer: replay: dial: %w", err)
	}
	defer func() { _ = amqpconn.Close(conn) }()
	closed := conn.NotifyClose(make(chan *amqp.Error, 1))
	ch, err := conn.Channel()
	if err != nil {
		return 0, fmt.Errorf("consumer: replay: open a channel: %w", err)
	}
	var count int
	for _, name := range []string{queue, parking} {
		q, err := ch.QueueDeclarePassive(name, true, false, false, false, nil)
		if amqpconn.IsNotFound(err) {
			return 0, fmt.Errorf("%w: replay: queue %q does not exist (404): check the name and the prefix (AMQPDELAY_PREFIX)", ErrQueueNotFound, name)
		} else if err != nil {
			return 0, fmt.Errorf("consumer: replay: check queue %q: %w", name, err)
		}
		count = q.Messages
	}
	if err := ch.Confirm(false); err != nil {
		return 0, fmt.Errorf("consumer: replay: confirm mode: %w", err)
	}
	returns := ch.NotifyReturn(make(chan amqp.Return, 1))
	for range count {
		if n > 0 && moved >= n {
			break
		}
		if err := ctx.Err(); err != nil {
			return moved, fmt.Errorf("consumer: replay: %w", err)
		}
		d, ok, err := ch.Get(parking, false)
		if err != nil {
			err = amqpconn.CloseReason(closed, time.Second, err) // when it was the connection that closed
			if isUnreadable(err) {
				return moved, fmt.Errorf("%w: consumer: replay: the message at the head of %q cannot be read by the client library "+
					"(amqp091-go), which closed the connection (typically a header table nested more than 32 deep or with more "+
					"than 8,192 entries, from a publisher other than amqpdelay's); it stays first in line: take it out by hand "+
					"(management UI, %s, Get messages, Ack mode \"Reject requeue false\"), then replay again", err, parking, parking)
			}
			return moved, fmt.Errorf("consumer: replay: get from %q: %w", parking, err)
		}
		if !ok {
			break
		}
		dest, err := replayOne(ctx, ch, returns, d, queue, parking)
		if err != nil {
			return moved, err
		}
		if dest == queue {
			moved++
		}
	}
	return moved, nil
}

// replayOne publishes d to queue when a Consumer of queue parked it, else to the back of
// parking, with a confirm, then acks d; it returns where d went. A failure nacks d: not counted
// toward the parking queue's delivery limit on 4.3+, as closing with it unacked would be.
func replayOne(ctx context.Context, ch *amqp.Channel, returns <-chan amqp.Return, d amqp.Delivery, queue, parking string) (string, error) {
	dest, h := parking, d.Headers
	if q, _ := d.Headers[HeaderQueue].(string); q == queue && d.Headers[HeaderParked] != nil {
		dest, h = queue, replayHeaders(d.Headers)
	}
	msg := publishingOf(d, h)
	msg.Expiration = d.Expiration
	err := func() error {
		dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, "", dest, true, false, msg)
		if err != nil {
			return fmt.Errorf("consumer: replay: publish to %q: %w", dest, err)
		}
		if acked, err := dc.WaitContext(ctx); err != nil || !acked {
			return fmt.Errorf("consumer: replay: queue %q did not confirm (acked %v): %w", dest, acked, err)
		}
		select {
		case r := <-returns:
			return fmt.Errorf("consumer: replay: queue %q returned the message (%d %s); it stays parked", dest, r.ReplyCode, r.ReplyText)
		default:
			return nil
		}
	}()
	if err != nil {
		_ = d.Nack(false, true)
		return "", err
	}
	if err := d.Ack(false); err != nil {
		return "", fmt.Errorf("consumer: replay: ack the parked copy (the message may now be in both queues): %w", err)
	}
	return dest, nil
}

func replayHeaders(h amqp.Table) amqp.Table {
	out := maps.Clone(h)
	for _, k := range []string{HeaderAttempt, HeaderFirstFailure, HeaderLastFailure, HeaderError, HeaderPanic, HeaderParked, HeaderParkReason, HeaderQueue} {
		delete(out, k)
	}
	out[HeaderReplayed] = time.Now().UnixMilli()
	return out
}
