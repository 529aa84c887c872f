// Command metrics serves the Prometheus metrics of a rabbitdelay Publisher and Consumer on
// /metrics, publishes a few delayed messages, consumes them, and prints the rabbitdelay_ series.
//
// It reads the AMQPDELAY_* variables of `rabbitdelay apply`. Run it from this directory:
//
//	go run . -listen :9530
//
// The topology's own metrics (messages waiting per level, parking, leaders) come from
// `rabbitdelay exporter`; see docs/operations.md.
package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/delaykit/rabbitdelay/amqpdelay"
	"github.com/delaykit/rabbitdelay/consumer"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:9530", "address to serve /metrics on")
	queue := flag.String("queue", "orders.timeouts", "ready queue bound to the orders exchange")
	flag.Parse()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	reg := prometheus.NewRegistry() // yours: the global registry is never touched
	go func() { fail(http.ListenAndServe(*listen, promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))) }()

	cfg, err := amqpdelay.ConfigFromEnv()
	fail(err)
	cfg.Metrics = reg
	p, err := amqpdelay.NewPublisher(ctx, cfg)
	fail(err)
	defer p.Close()
	c, err := consumer.New(cfg, *queue, func(context.Context, amqp.Delivery) error { return nil },
		consumer.Options{Metrics: reg})
	fail(err)
	runCtx, stop := context.WithTimeout(ctx, 8*time.Second)
	defer stop()
	go func() { fail(c.Run(runCtx)) }()

	for i := range 5 {
		_, err := p.Publish(ctx, "orders", fmt.Sprintf("order.%d.reminder", i), amqp.Publishing{Body: []byte("hi")}, time.Duration(i+1)*time.Second)
		fail(err)
	}
	<-runCtx.Done() // the consumer handles them as they fall due

	resp, err := http.Get("http://" + *listen + "/metrics")
	fail(err)
	defer resp.Body.Close()
	for sc := bufio.NewScanner(resp.Body); sc.Scan(); {
		if line := sc.Text(); strings.HasPrefix(line, "rabbitdelay_") && !strings.Contains(line, "_bucket{") {
			fmt.Println(line)
		}
	}
}

func fail(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "metrics:", err)
		os.Exit(1)
	}
}
