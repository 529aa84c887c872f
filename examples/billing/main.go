// Command billing runs a monthly-billing-style job with package schedule: every instance declares
// the same schedule at start and runs the scheduler; each occurrence reaches the billing
// exchange once, however many instances run. It also consumes the occurrences from one queue
// and prints them, with which instance fired each and how late it was.
//
// A real monthly bill would be Cron "0 1 28 * *" in its zone; the example fires every -every
// (10 s by default) so one sees it work. It reads the AMQPDELAY_* variables of `rabbitdelay apply`,
// whose AMQPDELAY_TARGETS must include the target exchange, e.g.
//
//	export AMQPDELAY_TARGETS=billing:topic AMQPDELAY_READY_QUEUES=billing.runs=billing:bill.#
//	rabbitdelay apply
//	go run . &   go run . &   # two instances: each occurrence printed once, by one of them
//	rabbitdelay schedules         # the schedule, its next occurrence, the last fired and by whom
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/delaykit/rabbitdelay/amqpdelay"
	"github.com/delaykit/rabbitdelay/schedule"
)

func main() {
	exchange := flag.String("exchange", "billing", "target exchange (one of the AMQPDELAY_TARGETS apply was given)")
	queue := flag.String("queue", "billing.runs", "queue to print the occurrences from (\"\": print nothing)")
	every := flag.Duration("every", 10*time.Second, "the schedule's interval (ignored with -cron)")
	cronExpr := flag.String("cron", "", `cron expression instead of -every, e.g. "0 1 28 * *"`)
	zone := flag.String("zone", "Europe/Berlin", "IANA time zone of -cron")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	cfg, err := amqpdelay.ConfigFromEnv()
	if err != nil {
		fail(err)
	}
	start, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	s, err := schedule.New(start, cfg, schedule.Options{})
	if err != nil {
		fail(err)
	}
	defer s.Close()
	job := schedule.Schedule{
		Name:       "billing.monthly",
		Exchange:   *exchange,
		RoutingKey: "bill.run",
		Message:    amqp.Publishing{ContentType: "application/json", Body: []byte(`{"job":"generate-bills"}`)},
		Missed:     schedule.MissedLatest, // after an outage of every instance: one catch-up run
	}
	if *cronExpr != "" {
		job.Cron, job.Zone = *cronExpr, *zone
	} else {
		job.Interval = *every
	}
	if err := s.Declare(start, job); err != nil { // every instance, at start: idempotent
		fail(err)
	}
	fmt.Printf("instance %s: declared %s\n", s.Instance(), job)
	if *queue != "" {
		go printOccurrences(ctx, cfg, *queue)
	}
	if err := s.Run(ctx); err != nil { // until interrupted; one instance at a time fires
		fail(err)
	}
}

// printOccurrences is a plain AMQP consumer of the queue bound to the target exchange.
func printOccurrences(ctx context.Context, cfg amqpdelay.Config, queue string) {
	conn, err := amqpdelay.Dial(ctx, cfg, "billing-example-consumer")
	if err != nil {
		fmt.Fprintln(os.Stderr, "billing: consumer:", err)
		return
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		return
	}
	ds, err := ch.ConsumeWithContext(ctx, queue, "", false, false, false, false, nil)
	if err != nil {
		fmt.Fprintln(os.Stderr, "billing: consume:", err)
		return
	}
	for d := range ds {
		fmt.Printf("bill run %s (fired by %v, %v ms late)\n", d.MessageId, d.Headers[schedule.InstanceHeader], d.Headers[schedule.LateHeader])
		_ = d.Ack(false)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "billing:", err)
	os.Exit(1)
}
