package topology

import (
	"context"
	"fmt"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/rs/zerolog"
)

// StatusOptions tune [Status]. The zero value uses DefaultWorkers channels and no
// management API.
type StatusOptions struct {
	// Workers is the number of channels to inspect on in parallel; 0 means DefaultWorkers.
	Workers int
	// Management, when set, adds what AMQP cannot see: messages held in quorum queues'
	// dead-letter state (messages_dlx), unacknowledged messages, and the bindings.
	Management *Management
	// Logger receives a warning per delay queue with a consumer; the zero value logs nothing.
	Logger zerolog.Logger
}

// ExchangeStatus is one exchange of the plan and whether it exists.
type ExchangeStatus struct {
	Exchange
	Exists bool `json:"exists"`
}

// QueueStatus is one queue of the plan and what it holds.
type QueueStatus struct {
	Queue
	Exists bool `json:"exists"`
	// Ready is the number of messages ready for delivery (what a passive queue.declare
	// returns). For a delay queue these are the messages waiting for their TTL.
	Ready int `json:"ready"`
	// Consumers is the number of consumers. A delay queue must have none: a consumer takes
	// messages before they are due.
	Consumers int `json:"consumers"`
	// Messages is every message the queue holds (ready, unacknowledged, dead-letter state),
	// from the management API; -1 when unknown.
	Messages int64 `json:"messages"`
	// MessagesDLX is the number of messages a quorum queue holds in its dead-letter state
	// (at-least-once dead-lettering that has not completed, retried forever), from the
	// management API; -1 when unknown.
	MessagesDLX int64 `json:"messages_dlx"`
}

// BindingStatus is one binding of the plan and whether it exists.
type BindingStatus struct {
	Binding
	Exists bool `json:"exists"`
}

// StatusReport is what [Status] found.
type StatusReport struct {
	Exchanges []ExchangeStatus `json:"exchanges"`
	Queues    []QueueStatus    `json:"queues"`
	// Bindings is nil without the management API (AMQP cannot list bindings).
	Bindings []BindingStatus `json:"bindings,omitempty"`
	// Missing names every object of the plan that does not exist ("queue x", ...).
	Missing []string `json:"missing,omitempty"`
	// ConsumedDelayQueues names the delay queues that have consumers.
	ConsumedDelayQueues []string `json:"consumed_delay_queues,omitempty"`
	// Management says whether the management API was read.
	Management bool `json:"management"`
	// Unplanned are the exchanges and queues with the plan's prefix that the plan does not
	// have (management API only): left by an earlier specification. They do not make the
	// status incomplete.
	Unplanned []Unplanned `json:"unplanned,omitempty"`
}

// Parking returns the parking queue's status.
func (r *StatusReport) Parking() QueueStatus {
	for _, q := range r.Queues {
		if q.Role == RoleParking {
			return q
		}
	}
	return QueueStatus{}
}

// Status inspects the plan's objects on conn with passive declarations (read-only: it
// declares nothing): which exist, the messages waiting and consumers of every queue, and,
// with opts.Management, messages in quorum queues' dead-letter state and the bindings. It
// logs a warning for every delay queue with a consumer (a consumer takes delayed messages
// early). It returns the report and, when objects are missing, an error wrapping
// ErrIncomplete that names them; other errors are the broker's.
func Status(ctx context.Context, conn *amqp.Connection, p *Plan, opts StatusOptions) (*StatusReport, error) {
	rep := &StatusReport{}
	var jobs []job
	for _, e := range p.Exchanges {
		jobs = append(jobs, func(ch *amqp.Channel) error {
			return ch.ExchangeDeclarePassive(e.Name, e.Type, true, false, false, false, nil)
		})
	}
	queues := make([]amqp.Queue, len(p.Queues))
	for i, q := range p.Queues {
		jobs = append(jobs, func(ch *amqp.Channel) error {
			var err error
			queues[i], err = ch.QueueDeclarePassive(q.Name, true, false, false, false, nil)
			return err
		})
	}
	errs, err := runJobs(ctx, conn, opts.Workers, false, jobs)
	if err != nil {
		return rep, fmt.Errorf("topology: status: %w", err)
	}
	var managed map[string]ManagedQueue
	var bindings map[string]bool
	if opts.Management != nil {
		if managed, err = opts.Management.Queues(ctx); err != nil {
			return rep, err
		}
		if bindings, err = opts.Management.bindingKeys(ctx); err != nil {
			return rep, err
		}
		if rep.Unplanned, err = opts.Management.unplanned(ctx, p, managed); err != nil {
			return rep, err
		}
		rep.Management = true
	}
	check := func(i int, kind Kind, name string) (bool, error) {
		switch e := errs[i]; {
		case e == nil:
			return true, nil
		case code(e) == amqp.NotFound:
			rep.Missing = append(rep.Missing, string(kind)+" "+name)
			return false, nil
		default:
			return false, wrapBroker(e, fmt.Sprintf("look up %s %q", kind, name))
		}
	}
	for i, e := range p.Exchanges {
		ok, err := check(i, KindExchange, e.Name)
		if err != nil {
			return rep, err
		}
		rep.Exchanges = append(rep.Exchanges, ExchangeStatus{Exchange: e, Exists: ok})
	}
	for i, q := range p.Queues {
		ok, err := check(len(p.Exchanges)+i, KindQueue, q.Name)
		if err != nil {
			return rep, err
		}
		s := QueueStatus{Queue: q, Exists: ok, Messages: -1, MessagesDLX: -1}
		if ok {
			s.Ready, s.Consumers = queues[i].Messages, queues[i].Consumers
		}
		if m, found := managed[q.Name]; found {
			s.Messages, s.MessagesDLX = m.Messages, m.MessagesDLX
		}
		if ok && q.IsDelay() && s.Consumers > 0 {
			rep.ConsumedDelayQueues = append(rep.ConsumedDelayQueues, q.Name)
			opts.Logger.Warn().Str("queue", q.Name).Int("consumers", s.Consumers).
				Msg("a consumer is attached to a delay queue: it takes delayed messages before they are due; stop it")
		}
		rep.Queues = append(rep.Queues, s)
	}
	if bindings != nil {
		for _, b := range p.Bindings {
			ok := bindings[b.key()]
			if !ok {
				rep.Missing = append(rep.Missing, "binding "+b.String())
			}
			rep.Bindings = append(rep.Bindings, BindingStatus{Binding: b, Exists: ok})
		}
	}
	if len(rep.Missing) > 0 {
		return rep, fmt.Errorf("%w: %d objects missing (first: %s): run declare apply", ErrIncomplete, len(rep.Missing), rep.Missing[0])
	}
	return rep, nil
}
