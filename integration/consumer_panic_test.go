//go:build integration

package integration

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/rs/zerolog"

	"github.com/delaykit/rabbitdelay/consumer"
)

// TestConsumerPanicStack: a handler that panics (twice: retried, then parked). The stack trace
// was thrown away, and the parked message said only "handler panicked: boom". Now each outcome
// Event's Err is a *consumer.PanicError whose stack names the handler's file and line, the
// Consumer's log has the stack at error level, and the parked message carries
// consumer.HeaderPanic: the panic's value and the first frames, the handler's file:line among
// them, within consumer.MaxPanicLen bytes. The messages beside it are handled.
func TestConsumerPanicStack(t *testing.T) {
	t.Parallel()
	f := newConsumerFixture(t)
	evs := newConsumerEvents()
	ok := newConsumerEffects()
	var panicLine atomic.Int64
	var logs lockedBuffer
	c := newConsumer(t, f.cfg, f.work, func(ctx context.Context, d amqp.Delivery) error {
		if d.MessageId == "panics" {
			_, _, line, _ := runtime.Caller(0)
			panicLine.Store(int64(line + 2)) // the line of the panic
			panic(fmt.Sprintf("boom in %s", d.MessageId))
		}
		ok.add(d.MessageId)
		return nil
	}, consumer.Options{
		Backoff:  consumer.Backoff{MaxAttempts: 2, Initial: 50 * time.Millisecond, Max: 100 * time.Millisecond},
		Observer: evs.observe,
		Logger:   zerolog.New(&logs),
	})
	f.publish(t, "panics", 10*time.Millisecond)
	for i := range 3 {
		f.publish(t, fmt.Sprintf("good-%d", i), 10*time.Millisecond)
	}
	stop := runConsumer(t, c)
	waitFor(t, time.Minute, "the panicking message parked and the others handled", func() bool {
		return evs.n(consumer.Parked) == 1 && ok.distinct() == 3
	})
	stop()
	where := fmt.Sprintf("integration/consumer_panic_test.go:%d", panicLine.Load())

	evs.mu.Lock()
	var outcomes int
	for _, e := range evs.all {
		if e.Kind != consumer.Retried && e.Kind != consumer.Parked {
			continue
		}
		outcomes++
		var pe *consumer.PanicError
		if !errors.As(e.Err, &pe) {
			t.Errorf("%v event: Err %v (%T), want a *consumer.PanicError", e.Kind, e.Err, e.Err)
			continue
		}
		if pe.Value != "boom in panics" || !bytes.Contains(pe.Stack, []byte(where)) {
			t.Errorf("%v event: panic value %v, stack:\n%s\nwant boom in panics and a stack naming %s", e.Kind, pe.Value, pe.Stack, where)
		}
	}
	evs.mu.Unlock()
	if outcomes != 2 {
		t.Errorf("%d Retried and Parked events, want 2 (attempt 1 retried, attempt 2 parked)", outcomes)
	}

	parked := getAll(t, f.env, f.spec.Names().Parking())
	if len(parked) != 1 {
		t.Fatalf("parking queue holds %d messages, want 1", len(parked))
	}
	summary, _ := parked[0].Headers[consumer.HeaderPanic].(string)
	if !strings.HasPrefix(summary, "panic: boom in panics; at ") || !strings.Contains(summary, where) || len(summary) > consumer.MaxPanicLen {
		t.Errorf("parked message's %s header %q (%d bytes): want the value and the frames naming %s, at most %d bytes",
			consumer.HeaderPanic, summary, len(summary), where, consumer.MaxPanicLen)
	}
	if text, _ := parked[0].Headers[consumer.HeaderError].(string); text != "consumer: handler panicked: boom in panics" {
		t.Errorf("parked message's %s header %q", consumer.HeaderError, text)
	}

	log := logs.String()
	if n := strings.Count(log, `"message":"consumer: handler panicked"`); n != 2 || !strings.Contains(log, where) ||
		!strings.Contains(log, `"level":"error"`) {
		t.Errorf("log has %d panic records; want 2, at error level, with stacks naming %s:\n%s", n, where, log)
	}
	t.Logf("%s: %s", consumer.HeaderPanic, summary)
}
