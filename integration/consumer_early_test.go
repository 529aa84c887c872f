//go:build integration

package integration

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/delaykit/rabbitdelay/consumer"
	"github.com/delaykit/rabbitdelay/internal/delayspec"
	"github.com/delaykit/rabbitdelay/internal/route"
	"github.com/delaykit/rabbitdelay/ttlbuckets"
)

// TestConsumerEarlyBeyondHold: deliveries that arrive before their due time by more than
// consumer.EarlyHold were handed to the handler at once, early. Each member, published straight
// to the queue with a rabbitdelay-due header in the future by a plain client:
//   - due 6 s ahead (beyond the 2 s hold): sent back through the delay topology for the time
//     left (a Deferred event wrapping ErrEarly), then handled, not before its due time;
//   - due 12 s ahead on a topology whose ladder carries at most 4.095 s: sent back more than
//     once, the first time for the ladder's maximum, handled not before its due time;
//   - due 1 s ahead (within the hold): held, handled not before its due time, not deferred.
//
// Each is handled once and counts no attempt. How many trips a message takes depends on how
// long each delivery takes (a busy machine), so the counts are bounds, not exact figures.
func TestConsumerEarlyBeyondHold(t *testing.T) {
	t.Parallel()
	f := newConsumerFixture(t, func(s *delayspec.Spec) {
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
	}, consumer.Options{Concurrency: 4, Observer: evs.observe})
	runConsumer(t, c)
	ch := f.env.Channel(t)
	now := time.Now()
	due := map[string]time.Time{"beyond": now.Add(6 * time.Second), "beyond-ladder": now.Add(12 * time.Second), "within": now.Add(time.Second)}
	for id, at := range due {
		rawToQueue(t, ch, f.work, amqp.Publishing{MessageId: id, Body: []byte("x"), Headers: amqp.Table{route.DueHeader: at.UnixMilli()}})
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
	capped := false // beyond-ladder's first trip takes the ladder's maximum
	evs.mu.Lock()
	for _, e := range evs.all {
		if e.Kind == consumer.Deferred {
			deferred[e.Info.ID]++
			if !errors.Is(e.Err, consumer.ErrEarly) || e.Delay > 4095*time.Millisecond {
				t.Errorf("Deferred event of %s: err %v, delay %v; want ErrEarly and at most the ladder's 4.095s", e.Info.ID, e.Err, e.Delay)
			}
			if e.Info.ID == "beyond-ladder" && e.Delay == 4095*time.Millisecond {
				capped = true
			}
		}
	}
	evs.mu.Unlock()
	if deferred["beyond"] < 1 || deferred["beyond-ladder"] < 2 || deferred["within"] != 0 || !capped {
		t.Errorf("deferred %v (a trip of the ladder's maximum: %v); want beyond at least 1, beyond-ladder at least 2 with a trip of 4.095s, within 0",
			deferred, capped)
	}
}
