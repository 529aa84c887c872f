package integration

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/delaykit/rabbitdelay/consumer"
	"github.com/delaykit/rabbitdelay/topology"
	"github.com/delaykit/rabbitdelay/ttlbuckets"
)

// TestConsumerEarlyBeyondHold: deliveries that arrive before their due time by more than
// consumer.EarlyHold were handed to the handler at once, early. Each member, published straight
// to the queue with a rabbitdelay-due header in the future by a plain client:
//   - due 4 s ahead (beyond the 2 s hold): sent back through the delay topology for the time
//     left (one Deferred event wrapping ErrEarly), then handled, not before its due time;
//   - due 7 s ahead on a topology whose ladder carries at most 4.095 s: sent back twice (the
//     ladder's maximum, then the rest), handled not before its due time;
//   - due 1 s ahead (within the hold): held, handled not before its due time, not deferred.
//
// Each is handled once and counts no attempt.
func TestConsumerEarlyBeyondHold(t *testing.T) {
	t.Parallel()
	f := newConsumerFixture(t, func(s *topology.Spec) {
		s.Ladder = ttlbuckets.Ladder{Unit: time.Millisecond, Radix: 16, Max: 4095 * time.Millisecond}
	})
	type call struct {
		at time.Time
		in consumer.Info
	}
	var mu sync.Mutex
	calls := map[string][]call{}
	evs := newConsumerEvents()
	c := newConsumer(t, f.cfg, f.work, func(ctx context.Context, d amqp.Delivery) error {
		in, _ := consumer.InfoFrom(ctx)
		mu.Lock()
		calls[d.MessageId] = append(calls[d.MessageId], call{at: time.Now(), in: in})
		mu.Unlock()
		return nil
	}, consumer.WithConcurrency(4), consumer.WithObserver(evs.observe))
	runConsumer(t, c)
	ch := f.env.Channel(t)
	now := time.Now()
	due := map[string]time.Time{"beyond": now.Add(4 * time.Second), "beyond-ladder": now.Add(7 * time.Second), "within": now.Add(time.Second)}
	for id, at := range due {
		rawToQueue(t, ch, f.work, amqp.Publishing{MessageId: id, Body: []byte("x"), Headers: amqp.Table{ttlbuckets.DueHeader: at.UnixMilli()}})
	}
	waitFor(t, time.Minute, "the three handled", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(calls) == 3
	})
	time.Sleep(time.Second) // a second handling would show now
	mu.Lock()
	defer mu.Unlock()
	for id, at := range due {
		cs := calls[id]
		if len(cs) != 1 {
			t.Errorf("%s handled %d times, want 1", id, len(cs))
			continue
		}
		if dueMs := time.UnixMilli(at.UnixMilli()); cs[0].at.Before(dueMs) || cs[0].in.Attempt != 1 {
			t.Errorf("%s: handled %v before its due time (attempt %d)", id, dueMs.Sub(cs[0].at), cs[0].in.Attempt)
		}
	}
	deferred := map[string]int{}
	evs.mu.Lock()
	for _, e := range evs.all {
		if e.Kind == consumer.Deferred {
			deferred[e.Info.ID]++
			if !errors.Is(e.Err, consumer.ErrEarly) || e.Delay > 4095*time.Millisecond {
				t.Errorf("Deferred event of %s: err %v, delay %v; want ErrEarly and at most the ladder's 4.095s", e.Info.ID, e.Err, e.Delay)
			}
		}
	}
	evs.mu.Unlock()
	if deferred["beyond"] != 1 || deferred["beyond-ladder"] != 2 || deferred["within"] != 0 {
		t.Errorf("deferred %v; want beyond 1, beyond-ladder 2, within 0", deferred)
	}
}
