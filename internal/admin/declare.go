package admin

import (
	"fmt"

	amqp "github.com/rabbitmq/amqp091-go"
)

// planObject is an exchange or queue of a plan; its step declares it.
type planObject struct {
	step
	typ    string // the exchange type
	args   amqp.Table
	plugin bool // the delayed-message plugin's exchange
}

// objectsOf lists p's exchanges, then queues; a queue with a Slot is declared through
// nodes[Slot mod len(nodes)] when nodes are given.
func objectsOf(p *Plan, nodes []*amqp.Connection) []planObject {
	var objects []planObject
	for _, e := range p.Exchanges {
		objects = append(objects, planObject{step{KindExchange, e.Name, declareExchange(e)}, e.Type, e.Args, e.Role == RolePlugin})
	}
	for _, q := range p.Queues {
		decl := declareQueue(q)
		if q.Slot >= 0 && len(nodes) > 0 {
			decl = declareQueueOn(q, nodes[q.Slot%len(nodes)])
		}
		objects = append(objects, planObject{step: step{KindQueue, q.Name, decl}, args: q.Args})
	}
	return objects
}

// survey finds, with passive declarations, which of p's objects (objectsOf) exist, by key.
func survey(r *runner, p *Plan, objects []planObject) (map[string]bool, error) {
	l, err := lookUp(r.ctx, r.conn, p, r.workers)
	if err != nil {
		return nil, fmt.Errorf("topology: look up existing objects: %w", err)
	}
	ok, err := found(l.errs, func(i int) string { return fmt.Sprintf("look up %s %q", objects[i].kind, objects[i].name) })
	exists := map[string]bool{}
	for i, o := range objects {
		exists[o.key()] = err == nil && ok[i]
	}
	return exists, err
}

func declareExchange(e Exchange) job {
	return func(ch *amqp.Channel) error {
		return ch.ExchangeDeclare(e.Name, e.Type, true, false, false, false, e.Args)
	}
}

func declareQueue(q Queue) job {
	return func(ch *amqp.Channel) error {
		_, err := ch.QueueDeclare(q.Name, true, false, false, false, q.Args)
		return err
	}
}

// declareQueueOn declares q on a channel of its own on conn, the node that is to lead q.
func declareQueueOn(q Queue, conn *amqp.Connection) job {
	return func(*amqp.Channel) error {
		ch, err := conn.Channel()
		if err != nil {
			return fmt.Errorf("topology: open channel to place queue %q: %w", q.Name, err)
		}
		defer ch.Close()
		_, err = ch.QueueDeclare(q.Name, true, false, false, false, q.Args)
		return err
	}
}

func declareBinding(b Binding) job {
	return func(ch *amqp.Channel) error {
		if b.DestinationType == DestExchange {
			return ch.ExchangeBind(b.Destination, b.RoutingKey, b.Source, false, b.Args)
		}
		return ch.QueueBind(b.Destination, b.RoutingKey, b.Source, false, b.Args)
	}
}
