package amqpdelay

import (
	"context"
	"errors"
	"fmt"
	"strings"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/delaykit/rabbitdelay/topology"
)

// checkManaged, with WithManagementURL, asks the management API what AMQP cannot: whether
// the dispatch exchange is bound to every target now, whether a policy in effect breaks
// a guarantee (topology.Management.PolicyProblems), and on which exchanges the user has
// topic permissions (topicGuarded). It returns nil without a management URL,
// an error wrapping ErrTopologyMissing or ErrTopologyUnsafe, or the management API's error.
func (p *Publisher) checkManaged(ctx context.Context) error {
	if p.opts.mgmtURL == "" {
		return nil
	}
	vhost := "/"
	if u, err := amqp.ParseURI(p.cfg.conn().URLOrDefault()); err == nil && u.Vhost != "" {
		vhost = u.Vhost
	}
	m, err := topology.NewManagement(p.opts.mgmtURL, vhost)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	plan, err := p.cfg.Spec.Plan()
	if err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	var problems []error
	for _, t := range p.cfg.Spec.Targets {
		bound, err := m.DispatchBound(ctx, plan, t.Name)
		if err != nil {
			return fmt.Errorf("amqpdelay: check the binding of target %q: %w", t.Name, err)
		}
		if !bound {
			problems = append(problems, fmt.Errorf("%w: target exchange %q is not bound to the dispatch exchange %q (the management API "+
				"lists no such binding): run `rabbitdelay apply` with %q among AMQPDELAY_TARGETS", ErrTopologyMissing, t.Name, p.names.Dispatch(), t.Name))
		}
	}
	// The exchanges with a topic permission for the Publisher's user: direct publishes to
	// them go alone (refusal.go, check 5). A management user that may not read them (it needs
	// the administrator tag for another user) leaves the Publisher to learn them from refusals.
	if guarded, err := m.TopicPermissionExchanges(ctx, p.user); err == nil {
		for _, x := range guarded {
			p.refusals.topicGuarded.add(x)
		}
	}
	pps, err := m.PolicyProblems(ctx, plan)
	if err != nil {
		return fmt.Errorf("amqpdelay: read the policies in effect on the topology: %w", err)
	}
	if failing := topology.Failing(pps); len(failing) > 0 {
		lines := make([]string, len(failing))
		for i, pp := range failing {
			lines[i] = pp.Error()
		}
		problems = append(problems, fmt.Errorf("%w: %d policy problem(s): %s", ErrTopologyUnsafe, len(failing), strings.Join(lines, "; ")))
	}
	return errors.Join(problems...)
}
