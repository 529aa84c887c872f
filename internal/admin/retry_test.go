package admin

import (
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/delaykit/rabbitdelay/internal/delayspec"
	"github.com/delaykit/rabbitdelay/internal/route"
)

// TestPlanRetryRouting: the retry exchange (direct, alternate exchange <prefix>.unroutable), its
// target marker, D's binding to it on rabbitdelay-target, and one binding per ready queue whose
// key is the queue's name.
func TestPlanRetryRouting(t *testing.T) {
	p := mustPlan(t, delayspec.Spec{Prefix: "app", Targets: delayspec.Targets{{Name: "orders", Type: "topic"}},
		ReadyQueues: delayspec.ReadyQueues{{Queue: "a", Exchange: "orders", BindingKey: "k.#"}, {Queue: "b", Exchange: "orders", BindingKey: "k.#"}}})
	retry := p.Names.Retry()
	if retry != "app.retry" {
		t.Fatalf("Names.Retry() = %q", retry)
	}
	x, ok := p.Exchange(retry)
	if !ok || x.Type != amqp.ExchangeDirect || x.Args["alternate-exchange"] != "app.unroutable" || x.Role != RoleRetry {
		t.Errorf("retry exchange %+v", x)
	}
	want := map[string]bool{
		"app.dispatch -> app.retry (exchange) {rabbitdelay-target=app.retry, x-match=all}": false,
		"app.retry -> a key=a": false,
		"app.retry -> b key=b": false,
	}
	for _, b := range p.Bindings {
		if b.Role != RoleRetry {
			continue
		}
		if _, ok := want[b.String()]; !ok {
			t.Errorf("unexpected retry binding %s", b)
		}
		want[b.String()] = true
	}
	for b, seen := range want {
		if !seen {
			t.Errorf("missing retry binding %s", b)
		}
	}
	if _, ok := p.Bindings[0].Args[route.TargetHeader]; ok && p.Bindings[0].Tier != 0 {
		t.Errorf("bindings not sorted by tier")
	}
	// A consumer's retry Publisher has the retry exchange as its only target: the name must be
	// a valid target.
	if err := (delayspec.Spec{Prefix: "app", Targets: delayspec.Targets{{Name: retry}}}).Validate(); err != nil {
		t.Errorf("the retry exchange as a target: %v", err)
	}
}
