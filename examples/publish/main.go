// Command publish schedules one delayed message with rabbitdelay and prints how it travels.
//
// It reads AMQPDELAY_URL and AMQPDELAY_PREFIX; the topology must be declared first (`rabbitdelay
// apply`), and the Publisher reads the rest from what apply recorded. Run it from this directory:
//
//	go run . -delay 10s
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/delaykit/rabbitdelay/amqpdelay"
)

func main() {
	exchange := flag.String("exchange", "orders", "target exchange (one of the AMQPDELAY_TARGETS apply was given)")
	key := flag.String("key", "order.42.payment-timeout", "routing key the target routes it with when due")
	delay := flag.Duration("delay", 10*time.Second, "how long until the message is due")
	body := flag.String("body", `{"order_id":42}`, "message body")
	flag.Parse()

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	cfg, err := amqpdelay.ConfigFromEnv()
	if err != nil {
		fail(err)
	}
	p, err := amqpdelay.NewPublisher(ctx, cfg) // checks that the declared topology is the one cfg describes
	if err != nil {
		fail(err)
	}
	defer p.Close()

	msg := amqp.Publishing{ContentType: "application/json", Body: []byte(*body)}
	r, err := p.Publish(ctx, *exchange, *key, msg, *delay)
	if err != nil {
		fail(err) // nothing is known to be stored: publish again
	}
	// nil: the broker confirmed the message; it arrives at r.Due, never before.
	fmt.Printf("confirmed: id %s, path %s, %d hop(s), due %s (in %v, rounded up: %v)\n",
		r.ID(), r.Path, r.Hops, r.Due.Format("15:04:05.000"), r.Delay, r.Rounded)
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "publish:", err)
	os.Exit(1)
}
