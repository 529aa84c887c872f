package consumer_test

import (
	"context"
	"encoding/json"
	"errors"
	"os/signal"
	"syscall"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/redis/go-redis/v9"

	"github.com/delaykit/rabbitdelay/amqpdelay"
	"github.com/delaykit/rabbitdelay/consumer"
)

// A consumer of the ready queue orders.timeouts: 16 handlers at a time, 5 attempts with
// back-off, a Redis store shared by every instance, and the lateness of each message.
func Example() {
	cfg, err := amqpdelay.ConfigFromEnv() // the AMQPDELAY_* variables of `rabbitdelay apply`
	if err != nil {
		panic(err)
	}
	opt, _ := redis.ParseURL("redis://127.0.0.1:6379/0")
	handle := func(ctx context.Context, d amqp.Delivery) error {
		var order struct{ ID int }
		if err := json.Unmarshal(d.Body, &order); err != nil {
			return consumer.Permanent(err) // parked at once: it will never parse
		}
		in, _ := consumer.InfoFrom(ctx) // in.Attempt, in.Due, in.Late
		_ = in
		return cancelOrder(ctx, order.ID) // an error: retried after the back-off
	}
	c, err := consumer.New(cfg, "orders.timeouts", handle, consumer.Options{
		Concurrency: 16,
		Backoff:     consumer.Backoff{MaxAttempts: 5, Initial: time.Second, Max: time.Minute},
		Store:       consumer.NewRedisStore(redis.NewClient(opt), ""),
	})
	if err != nil {
		panic(err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	if err := c.Run(ctx); err != nil { // until SIGTERM; then a graceful shutdown
		panic(err)
	}
}

func cancelOrder(context.Context, int) error { return errors.New("not implemented") }
