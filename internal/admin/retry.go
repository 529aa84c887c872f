package admin

import (
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/delaykit/rabbitdelay/internal/route"
)

// addRetry adds the consumer package's retry routing, which sends a failed message back after
// a delay to the one queue Q it came from: the direct exchange <prefix>.retry (alternate
// exchange <prefix>.unroutable), D's binding to it, and a binding with key Q per ready queue
// Q (consumers bind other queues themselves: [Plan.ConsumerRetryBinding]).
func (p *Plan) addRetry() {
	n := p.Names
	retry := n.Retry()
	p.Exchanges = append(p.Exchanges,
		Exchange{Name: retry, Type: amqp.ExchangeDirect, Args: amqp.Table{"alternate-exchange": n.Unroutable()}, Role: RoleRetry, Level: -1},
	)
	for _, r := range p.Spec.ReadyQueues {
		p.Bindings = append(p.Bindings, Binding{Source: retry, Destination: r.Queue, DestinationType: DestQueue,
			RoutingKey: r.Queue, Role: RoleRetry})
	}
	p.Bindings = append(p.Bindings, Binding{Source: n.Dispatch(), Destination: retry, DestinationType: DestExchange,
		Args: amqp.Table{"x-match": "all", route.TargetHeader: retry}, Role: RoleRetry})
}

// ConsumerRetryBinding reports whether b is the binding a consumer makes for its queue Q when Q
// is not a ready queue: retry exchange to queue Q, key Q, no arguments. It routes only Q's own
// retries, so it is expected; any other binding from the retry exchange is unplanned.
func (p *Plan) ConsumerRetryBinding(b Binding) bool {
	return b.Source == p.Names.Retry() && b.DestinationType == DestQueue && b.RoutingKey == b.Destination && len(b.Args) == 0
}

// RoleRetry is the retry exchange and its bindings (see [Names.Retry]).
const RoleRetry Role = "retry"
