//go:build integration

package integration

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/delaykit/rabbitdelay/amqpdelay"
)

// TestPublisherDeferred: one goroutine starts 2,000 deferred publishes (direct, bucket-free
// ladder delays of 1-3 s) with at most 64 in flight, waits for each outcome, and every message
// arrives once, never early; a bad publish among them fails on its own Deferred and costs no
// other publish its confirm.
func TestPublisherDeferred(t *testing.T) {
	t.Parallel()
	f := newDirectFixture(t, amqpdelay.Config{MaxInFlight: 64, Channels: 1})
	const n = 2000
	ds := make([]*amqpdelay.Deferred, n)
	var bad *amqpdelay.Deferred
	for i := range n {
		if i == n/2 {
			// A delayed message may not carry a per-message TTL: refused before sending.
			m := textMsg("bad")
			m.Expiration = "1000"
			d, err := f.p.PublishDeferred(f.ctx, f.target, "k", m, time.Second)
			if err != nil {
				t.Fatalf("start the bad publish: %v", err)
			}
			bad = d
		}
		delay := time.Duration(0)
		if i%2 == 1 {
			delay = time.Second + time.Duration(i%2000)*time.Millisecond
		}
		m := textMsg(strconv.Itoa(i))
		m.Headers = amqp.Table{"i": int64(i)}
		d, err := f.p.PublishDeferred(f.ctx, f.target, "k", m, delay)
		if err != nil {
			t.Fatalf("start publish %d: %v", i, err)
		}
		m.Headers["i"] = int64(-1) // the Publisher copied the table: this must not reach the broker
		ds[i] = d
	}
	if _, err := bad.Wait(f.ctx); !errors.Is(err, amqpdelay.ErrInvalidInput) {
		t.Errorf("bad publish: err = %v, want ErrInvalidInput", err)
	}
	//lint:ignore SA1012 a nil context is the input under test
	if _, err := ds[0].Wait(nil); !errors.Is(err, amqpdelay.ErrInvalidInput) { //nolint:staticcheck
		t.Errorf("Wait(nil): err = %v, want ErrInvalidInput", err)
	}
	ids := make(map[string]int, n)
	for i, d := range ds {
		r, err := d.Wait(f.ctx)
		if err != nil {
			t.Fatalf("publish %d: %v", i, err)
		}
		want := amqpdelay.PathDirect
		if i%2 == 1 {
			want = amqpdelay.PathLadder
		}
		if r.Path != want {
			t.Errorf("publish %d took %v, want %v", i, r.Path, want)
		}
		select {
		case <-d.Done():
		default:
			t.Errorf("publish %d: Wait returned before Done was closed", i)
		}
		ids[r.MessageID] = i
	}
	seen := make(map[int]bool, n)
	for len(seen) < n {
		a := nextDelivery(t, f.got, maxLateness)
		i, ok := ids[a.d.MessageId]
		if !ok {
			t.Fatalf("unexpected delivery %q (%s)", a.d.MessageId, a.d.Body)
		}
		if seen[i] {
			t.Fatalf("message %d delivered twice", i)
		}
		seen[i] = true
		if got := a.d.Headers["i"]; got != int64(i) {
			t.Errorf("message %d: header i = %v, want %d", i, got, i)
		}
		if i%2 == 1 {
			checkOnTime(t, a)
		}
	}
}

// TestPublisherDeferredClosed: PublishDeferred after Close returns ErrClosed and starts
// nothing; one given an ended context returns its error; Close waits for those in flight.
func TestPublisherDeferredClosed(t *testing.T) {
	t.Parallel()
	f := newDirectFixture(t, amqpdelay.Config{MaxInFlight: 1})
	d, err := f.p.PublishDeferred(f.ctx, f.target, "k", textMsg("first"), 0)
	if err != nil {
		t.Fatalf("start: %v", err)
	}
	// The one slot is taken until the first publish ends: a context that ends meanwhile is
	// reported, and nothing is started.
	ended, cancel := context.WithCancel(context.Background())
	cancel()
	if d2, err := f.p.PublishDeferred(ended, f.target, "k", textMsg("second"), 0); err == nil {
		// The first may have ended already and freed its slot: then the second ran with an
		// ended context, and its outcome says so.
		if _, err := d2.Wait(f.ctx); !errors.Is(err, context.Canceled) {
			t.Errorf("second publish with an ended context: %v, want context.Canceled", err)
		}
	} else if !errors.Is(err, context.Canceled) {
		t.Errorf("PublishDeferred with an ended context: %v, want context.Canceled", err)
	}
	if err := f.p.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	select {
	case <-d.Done():
	default:
		t.Error("Close returned while a deferred publish was still running")
	}
	if _, err := d.Wait(f.ctx); err != nil {
		t.Errorf("first publish: %v", err)
	}
	if _, err := f.p.PublishDeferred(f.ctx, f.target, "k", textMsg("late"), 0); !errors.Is(err, amqpdelay.ErrClosed) {
		t.Errorf("PublishDeferred after Close: %v, want ErrClosed", err)
	}
	a := nextDelivery(t, f.got, maxLateness)
	if string(a.d.Body) != "first" {
		t.Errorf("delivered %q, want first", a.d.Body)
	}
}
