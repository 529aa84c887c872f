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
)

var consumerBenchN = flag.Int("consumer-bench", 20000, "messages per case of BenchmarkConsumerThroughput")

// BenchmarkConsumerThroughput drains the same quorum queue, filled with -consumer-bench
// persistent messages each time, first with a raw amqp091-go consumer (manual acks, prefetch 8,
// one goroutine), then with a consumer.Consumer (8 handlers, prefetch 8, MemoryStore, a handler
// that does nothing), and reports both rates and their ratio (consumer/raw).
func BenchmarkConsumerThroughput(b *testing.B) {
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
			dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, "", f.work, false, false, amqp.Publishing{
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
	var raw, lib float64
	for b.Loop() {
		fill()
		ch, err := conn.Channel()
		if err != nil {
			b.Fatal(err)
		}
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
		raw = float64(n) / time.Since(start).Seconds()
		_ = ch.Close()

		fill()
		var handled atomic.Int64
		doneAll := make(chan struct{})
		c := newConsumer(b, f.cfg, f.work, func(ctx context.Context, d amqp.Delivery) error { return nil },
			consumer.WithConcurrency(8), consumer.WithObserver(func(e consumer.Event) {
				if e.Kind == consumer.Handled && handled.Add(1) == int64(n) {
					close(doneAll)
				}
			}))
		start = time.Now()
		stop := runConsumer(b, c)
		select {
		case <-doneAll:
		case <-time.After(10 * time.Minute):
			b.Fatalf("consumer handled %d of %d in 10 min", handled.Load(), n)
		}
		lib = float64(n) / time.Since(start).Seconds()
		stop()
	}
	b.ReportMetric(raw, "raw-msg/s")
	b.ReportMetric(lib, "consumer-msg/s")
	b.ReportMetric(lib/raw, "ratio")
}
