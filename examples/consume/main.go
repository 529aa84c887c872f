// Command consume reads a ready queue with rabbitdelay's consumer package: a handler per message,
// retries with back-off through the delay topology, parking after the last attempt, and, with
// REDIS_URL set, an exactly-once effect per message id across instances.
//
// It reads the AMQPDELAY_* variables of `rabbitdelay apply` and, optionally, REDIS_URL. Run it from
// this directory, then publish to the queue's exchange (examples/publish):
//
//	go run . -queue orders.timeouts
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/redis/go-redis/v9"

	"github.com/delaykit/rabbitdelay/amqpdelay"
	"github.com/delaykit/rabbitdelay/consumer"
)

func main() {
	queue := flag.String("queue", "orders.timeouts", "ready queue to consume (one of AMQPDELAY_READY_QUEUES)")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()

	cfg, err := amqpdelay.ConfigFromEnv()
	if err != nil {
		fail(err)
	}
	var store consumer.Store = &consumer.MemoryStore{} // one process
	if url := os.Getenv("REDIS_URL"); url != "" {
		opt, err := redis.ParseURL(url)
		if err != nil {
			fail(err)
		}
		store = consumer.NewRedisStore(redis.NewClient(opt), "") // every instance shares it
	}

	handle := func(ctx context.Context, d amqp.Delivery) error {
		in, _ := consumer.InfoFrom(ctx)
		fmt.Printf("%s: attempt %d of %d, %v after due: %s\n", d.RoutingKey, in.Attempt, in.MaxAttempts, in.Late, d.Body)
		switch string(d.Body) {
		case "bad":
			return consumer.Permanent(errors.New("cannot read this body")) // parked at once
		case "flaky":
			return errors.New("downstream unavailable") // retried after the back-off, parked after the last attempt
		}
		return nil // acked
	}
	c, err := consumer.New(cfg, *queue, handle, consumer.Options{
		Concurrency: 8,
		Backoff:     consumer.Backoff{MaxAttempts: 3, Initial: time.Second, Max: 10 * time.Second},
		Store:       store,
		Observer: func(e consumer.Event) {
			if e.Err != nil {
				fmt.Printf("  %v: %v\n", e.Kind, e.Err)
			}
		},
	})
	if err != nil {
		fail(err)
	}
	fmt.Printf("consuming %s; Ctrl-C stops (running handlers finish first)\n", *queue)
	if err := c.Run(ctx); err != nil {
		fail(err)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "consume:", err)
	os.Exit(1)
}
