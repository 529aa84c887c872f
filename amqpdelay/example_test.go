package amqpdelay_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/rs/zerolog"

	"github.com/delaykit/rabbitdelay/amqpdelay"
)

// A service publishes an order time-out due in 15 minutes, with the broker and prefix the
// rabbitdelay CLI was given (AMQPDELAY_URL, AMQPDELAY_PREFIX), and logs to stderr. Publish returns once the broker has
// confirmed the message. (Needs a broker and `rabbitdelay apply`, so it has no Output.)
func Example() {
	cfg, err := amqpdelay.ConfigFromEnv()
	if err != nil {
		log.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cfg.Logger = zerolog.New(os.Stderr).With().Timestamp().Logger()
	p, err := amqpdelay.NewPublisher(ctx, cfg)
	if err != nil {
		log.Fatal(err)
	}
	defer p.Close()

	r, err := p.Publish(ctx, "orders", "order.timeout.eu", amqp.Publishing{
		ContentType: "application/json",
		Body:        []byte(`{"order":"A-1001"}`),
	}, 15*time.Minute)
	switch {
	case errors.Is(err, amqpdelay.ErrUnknownTarget):
		log.Fatal("add orders to AMQPDELAY_TARGETS and run rabbitdelay apply: ", err)
	case err != nil:
		log.Fatal(err)
	}
	fmt.Printf("%s path, due %s\n", r.Path, r.Due.Format(time.RFC3339))
}

// A consumer of a ready queue reads when a delivery was due and how late it is. The
// delivery here is built by hand, as the broker would deliver it.
func ExampleDue() {
	d := amqp.Delivery{Headers: amqp.Table{"rabbitdelay-due": int64(1_767_225_600_000)}}
	due, ok := amqpdelay.Due(d)
	fmt.Println(ok, due.UTC().Format(time.RFC3339))

	_, ok = amqpdelay.Due(amqp.Delivery{}) // not published through amqpdelay
	fmt.Println(ok)
	// Output:
	// true 2026-01-01T00:00:00Z
	// false
}

// A retry: the consumer publishes the delivery it could not process back with a longer
// delay. The Publisher strips the x-death headers the delay queues added, so the broker's
// dead-letter cycle detection does not drop the retry. (Needs a broker: no Output.)
func ExamplePublisher_Publish_retry() {
	var p *amqpdelay.Publisher // from NewPublisher
	var d amqp.Delivery        // from a ready queue
	ctx := context.Background()
	attempt, _ := d.Headers["attempt"].(int64)
	headers := amqp.Table{}
	for k, v := range d.Headers {
		headers[k] = v
	}
	headers["attempt"] = attempt + 1
	backoff := time.Duration(1<<min(attempt, 10)) * time.Second
	if _, err := p.Publish(ctx, "jobs", d.RoutingKey, amqp.Publishing{
		Headers: headers, ContentType: d.ContentType, Body: d.Body, MessageId: d.MessageId,
	}, backoff); err != nil {
		_ = d.Nack(false, true) // keep it in the ready queue; try again later
		return
	}
	_ = d.Ack(false)
}

func ExamplePath_String() {
	for _, p := range []amqpdelay.Path{amqpdelay.PathDirect, amqpdelay.PathBucket, amqpdelay.PathLadder, amqpdelay.PathPlugin} {
		fmt.Println(p)
	}
	// Output:
	// direct
	// bucket
	// ladder
	// plugin
}

func ExampleStrategy() {
	for _, s := range []amqpdelay.Strategy{amqpdelay.Auto, amqpdelay.PreferPlugin, amqpdelay.PluginOnly, amqpdelay.LadderOnly} {
		fmt.Println(s)
	}
	_ = amqpdelay.Config{Strategy: amqpdelay.LadderOnly} // never the plugin: replicated queues only
	// Output:
	// auto
	// prefer-plugin
	// plugin-only
	// ladder-only
}
