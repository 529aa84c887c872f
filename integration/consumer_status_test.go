//go:build integration

package integration

import (
	"context"
	"errors"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/delaykit/rabbitdelay/amqpdelay"
	"github.com/delaykit/rabbitdelay/consumer"
	"github.com/delaykit/rabbitdelay/integration/brokertest"
	"github.com/delaykit/rabbitdelay/internal/admin"
	"github.com/delaykit/rabbitdelay/internal/delayspec"
)

// TestConsumerRetryBindingStatus: a Consumer of a queue that is not a ready queue of the
// specification binds it to <prefix>.retry by its own name; status lists that binding among the
// consumers' retry bindings and passes. A binding from the retry exchange with another queue's
// name as key (it would hand that queue's retries to a second queue) is unplanned: status fails
// with ErrUnhealthy naming it.
func TestConsumerRetryBindingStatus(t *testing.T) {
	t.Parallel()
	env := brokertest.NewEnv(t)
	m := topoNeedManagement(t, env)
	target := env.Name("orders")
	spec := testSpec(env, delayspec.Target{Name: target, Type: "topic"})
	spec.ReadyQueues = delayspec.ReadyQueues{{Queue: env.Name("work"), Exchange: target, BindingKey: "o.#"}}
	p, _, err := polApply(t, env, m, spec)
	if err != nil {
		t.Fatal(err)
	}
	jobs, audit := env.Name("jobs"), env.Name("audit")
	ch := env.Channel(t)
	for _, q := range []string{jobs, audit} {
		if _, err := ch.QueueDeclare(q, true, false, false, false, amqp.Table{"x-queue-type": "quorum"}); err != nil {
			t.Fatal(err)
		}
		if err := ch.QueueBind(q, "j.#", target, false, nil); err != nil {
			t.Fatal(err)
		}
	}
	handled := make(chan struct{}, 1)
	c := newConsumer(t, amqpdelay.Config{URL: env.URL, Prefix: spec.Prefix}, jobs, func(ctx context.Context, d amqp.Delivery) error {
		select {
		case handled <- struct{}{}:
		default:
		}
		return nil
	}, consumer.Options{})
	stop := runConsumer(t, c)
	pub := newPublisher(t, env, spec)
	ctx := topoTestCtx(t, 2*time.Minute)
	if _, err := pub.Publish(ctx, target, "j.1", amqp.Publishing{MessageId: "j1", Body: []byte("x")}, 0); err != nil {
		t.Fatal(err)
	}
	select {
	case <-handled: // Run has bound the queue before consuming
	case <-ctx.Done():
		t.Fatal("the consumer of the extra queue handled nothing")
	}
	stop()
	conn := env.Dial(t)
	rep, err := admin.Status(ctx, conn, p, admin.StatusOptions{Management: m})
	if err != nil || len(rep.UnplannedBindings) != 0 || len(rep.RetryBindings) != 1 || rep.RetryBindings[0].Destination != jobs ||
		rep.RetryBindings[0].RoutingKey != jobs {
		t.Fatalf("status with a consumer's retry binding: %v, unplanned %v, retry bindings %v; want no error and one retry binding to %s",
			err, rep.UnplannedBindings, rep.RetryBindings, jobs)
	}
	if err := ch.QueueBind(audit, jobs, p.Names.Retry(), false, nil); err != nil {
		t.Fatal(err)
	}
	rep, err = admin.Status(ctx, conn, p, admin.StatusOptions{Management: m})
	if !errors.Is(err, admin.ErrUnhealthy) || len(rep.UnplannedBindings) != 1 || rep.UnplannedBindings[0].Destination != audit ||
		len(rep.RetryBindings) != 1 {
		t.Fatalf("status with %s bound to the retry exchange by key %s: %v, unplanned %v, retry bindings %v; want ErrUnhealthy naming it",
			audit, jobs, err, rep.UnplannedBindings, rep.RetryBindings)
	}
	t.Logf("unhealthy as expected: %v", err)
}
