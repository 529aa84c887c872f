//go:build integration && bench

package integration

import (
	"context"
	"flag"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/delaykit/rabbitdelay/consumer"
	"github.com/delaykit/rabbitdelay/internal/route"
)

var consumerBenchN = flag.Int("consumer-bench", 20000, "messages per case of BenchmarkConsumerThroughput")

// BenchmarkConsumerThroughput drains the same quorum queue, filled with -consumer-bench
// persistent messages each time, with a raw amqp091-go consumer (manual acks, prefetch 8, one
// goroutine), then with a consumer.Consumer (8 handlers, prefetch 8, MemoryStore, a handler that
// does nothing), then with the raw consumer again, and reports the raw rate (over both of its
// drains), the Consumer's rate (from its first handled message to its last) and their ratio
// (consumer/raw), and start-s, the seconds from Run's call to the first handled message (the
// dial, the retry Publisher's topology check, the revocation reader's catch-up). Cases:
//
//	due             the messages carry rabbitdelay-due (their publish time), as delayed messages
//	                that fell due do: the revocation check (on by default) needs a fence read back
//	                from the revocation stream only up to the bound (100 ms) before due, which one
//	                fence covers for the whole backlog
//	direct          no rabbitdelay-due (published without rabbitdelay): the revocation check of
//	                each delivery waits for a fence sent after it arrived (one round trip to the
//	                stream, shared by the deliveries waiting at the time)
//	no-revocations  no rabbitdelay-due, consumer.Options.NoRevocations
func BenchmarkConsumerThroughput(b *testing.B) {
	for _, c := range []struct {
		name string
		due  bool
		opts consumer.Options
	}{
		{"due", true, consumer.Options{}},
		{"direct", false, consumer.Options{}},
		{"no-revocations", false, consumer.Options{NoRevocations: true}},
	} {
		b.Run(c.name, func(b *testing.B) { benchConsumer(b, c.due, c.opts) })
	}
}

func benchConsumer(b *testing.B, due bool, opts consumer.Options) {
	f := newConsumerFixture(b)
	n := *consumerBenchN
	conn := f.env.Dial(b)
	fill := func() {
		ch, err := conn.Channel()
		if err != nil {
			b.Fatal(err)
		}
		defer ch.Close()
		if err := ch.Confirm(false); err != nil {
			b.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		var pending []*amqp.DeferredConfirmation
		for i := range n {
			var h amqp.Table
			if due {
				h = amqp.Table{route.DueHeader: time.Now().UnixMilli()}
			}
			dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, "", f.work, false, false, amqp.Publishing{Headers: h,
				DeliveryMode: amqp.Persistent, MessageId: fmt.Sprintf("b%d-%d", time.Now().UnixNano(), i), Body: make([]byte, 100)})
			if err != nil {
				b.Fatal(err)
			}
			pending = append(pending, dc)
			if len(pending) == 256 || i == n-1 {
				for _, dc := range pending {
					if ok, err := dc.WaitContext(ctx); !ok || err != nil {
						b.Fatalf("confirm: %v %v", ok, err)
					}
				}
				pending = pending[:0]
			}
		}
	}
	var raw, lib, startup float64
	// rawDrain drains the queue with the raw consumer and returns how long it took.
	rawDrain := func() time.Duration {
		fill()
		ch, err := conn.Channel()
		if err != nil {
			b.Fatal(err)
		}
		defer ch.Close()
		if err := ch.Qos(8, 0, false); err != nil {
			b.Fatal(err)
		}
		start := time.Now()
		ds, err := ch.Consume(f.work, "raw", false, false, false, false, nil)
		if err != nil {
			b.Fatal(err)
		}
		for range n {
			d := <-ds
			if err := d.Ack(false); err != nil {
				b.Fatal(err)
			}
		}
		return time.Since(start)
	}
	for b.Loop() {
		// The raw consumer drains before and after the Consumer, and its rate is taken over
		// both: a machine whose load changes during the run moves both sides alike.
		rawTook := rawDrain()
		fill()
		var handled atomic.Int64
		var firstAt atomic.Int64 // the first Handled event's time, Unix ns
		doneAll := make(chan struct{})
		o := opts
		o.Concurrency = 8
		o.Observer = func(e consumer.Event) {
			if e.Kind != consumer.Handled {
				return
			}
			switch handled.Add(1) {
			case 1:
				firstAt.Store(e.At.UnixNano())
			case int64(n):
				close(doneAll)
			}
		}
		c := newConsumer(b, f.cfg, f.work, func(ctx context.Context, d amqp.Delivery) error { return nil }, o)
		start := time.Now()
		stop := runConsumer(b, c)
		select {
		case <-doneAll:
		case <-time.After(10 * time.Minute):
			b.Fatalf("consumer handled %d of %d in 10 min", handled.Load(), n)
		}
		// The rate from the first handled message on: Run's start (the retry Publisher's
		// topology check, the revocation reader's catch-up) is reported apart, as start-s.
		end, first := time.Now(), time.Unix(0, firstAt.Load())
		lib = float64(n-1) / end.Sub(first).Seconds()
		startup = first.Sub(start).Seconds()
		stop()
		rawTook += rawDrain()
		raw = float64(2*n) / rawTook.Seconds()
	}
	b.ReportMetric(raw, "raw-msg/s")
	b.ReportMetric(lib, "consumer-msg/s")
	b.ReportMetric(lib/raw, "ratio")
	b.ReportMetric(startup, "start-s")
}
