package admin

import (
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/delaykit/rabbitdelay/internal/route"
)

// Retry routing: the way the consumer package (github.com/delaykit/rabbitdelay/consumer) sends a
// failed message back, after a delay, to the one queue it came from, never to the other queues
// bound to the same target exchange.
//
//	<prefix>.retry          direct exchange, alternate exchange <prefix>.unroutable (-> parking)
//	D -> <prefix>.retry     {x-match: all, rabbitdelay-target: <prefix>.retry}
//	<prefix>.retry -> Q     binding key Q, for every ready queue Q
//
// A consumer's retry Publisher has <prefix>.retry as its only target and publishes with the
// queue's name as routing key: the delay paths keep the routing key, D hands the due message to
// <prefix>.retry, which routes it by that key to Q alone. The consumer binds a queue that is not
// a ready queue of the specification itself (the same binding); [Status] lists such bindings in
// RetryBindings, as expected, not as unplanned ([Plan.ConsumerRetryBinding]). A retry whose
// queue has no such binding goes to the alternate exchange and waits in the parking queue.

// addRetry adds the retry routing to p (called by NewPlan, before the bindings are sorted by
// tier and before the policies are computed): the retry exchange, D's
// binding to it and one binding per ready queue.
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

// ConsumerRetryBinding reports whether b is the binding a consumer makes for its queue Q when
// Q is not a ready queue of the specification: from the retry exchange to queue Q with binding
// key Q and no arguments (the consumer package's Run declares it unless told not to). It is
// expected, not unplanned: the retry Publisher of Q's consumer publishes with routing key Q, so
// the binding routes only Q's own retries, back to Q, and changes where no other message goes.
// A binding from the retry exchange with any other key, arguments or an exchange as
// destination would route a queue's retries elsewhere, and stays unplanned.
func (p *Plan) ConsumerRetryBinding(b Binding) bool {
	return b.Source == p.Names.Retry() && b.DestinationType == DestQueue && b.RoutingKey == b.Destination && len(b.Args) == 0
}

// RoleRetry is the retry exchange and its bindings (see [Names.Retry]).
const RoleRetry Role = "retry"
