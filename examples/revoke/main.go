// Command revoke publishes three delayed messages, revokes one and reschedules another, then
// consumes the ready queue with the consumer package (which drops revoked copies) and prints
// what arrives: the kept message on time, the rescheduled one at its new time, the revoked one
// never.
//
// It reads the AMQPDELAY_* variables of `rabbitdelay apply`. Run it from this directory:
//
//	go run . -queue orders.timeouts
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/delaykit/rabbitdelay/amqpdelay"
	"github.com/delaykit/rabbitdelay/consumer"
)

func main() {
	exchange := flag.String("exchange", "orders", "target exchange (one of the AMQPDELAY_TARGETS apply was given)")
	queue := flag.String("queue", "orders.timeouts", "ready queue bound to the exchange for order.#")
	flag.Parse()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	cfg, err := amqpdelay.ConfigFromEnv()
	check(err)
	p, err := amqpdelay.NewPublisher(ctx, cfg)
	check(err)
	defer p.Close()

	// Ids of their own per run: a revoked id stays revoked for the topology's retention.
	run := time.Now().Format("150405.000")
	send := func(id string, d time.Duration) {
		_, err := p.Publish(ctx, *exchange, "order."+id, amqp.Publishing{MessageId: id, Body: []byte(id)}, d)
		check(err)
	}
	send("kept-"+run, 3*time.Second)
	send("revoked-"+run, 3*time.Second)
	send("moved-"+run, 3*time.Second)

	check(p.Revoke(ctx, "revoked-"+run)) // nil once the broker confirmed the record
	r, err := p.Reschedule(ctx, *exchange, "order.moved-"+run,
		amqp.Publishing{MessageId: "moved-" + run, Body: []byte("moved-" + run)}, 6*time.Second)
	check(err) // the old copy of the id is dropped; this one arrives at r.Due
	fmt.Printf("published 3, revoked 1, rescheduled 1 to %s; consuming for 10 s\n", r.Due.Format("15:04:05"))

	c, err := consumer.New(cfg, *queue, func(ctx context.Context, d amqp.Delivery) error {
		in, _ := consumer.InfoFrom(ctx)
		fmt.Printf("arrived %s at %s (%v after due)\n", d.Body, time.Now().Format("15:04:05.000"), in.Late)
		return nil
	}, consumer.Options{Observer: func(e consumer.Event) {
		if e.Kind == consumer.Revoked {
			fmt.Printf("dropped a revoked copy of %s\n", e.Info.ID)
		}
	}})
	check(err)
	runCtx, stop := context.WithTimeout(context.Background(), 10*time.Second)
	defer stop()
	check(c.Run(runCtx))
}

func check(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "revoke:", err)
		os.Exit(1)
	}
}
