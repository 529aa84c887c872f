package amqpdelay

import (
	"context"
	"errors"
	"fmt"
	"strings"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/delaykit/rabbitdelay/internal/delayspec"
)

// ManagementCheck asks the broker's management API, for one vhost, what AMQP cannot see.
// topology.NewManagement returns one (with the management URL and the vhost of Config.URL): the
// package that talks to the management API is the administration side's, and the Publisher
// only asks. Each check stays because its absence
// loses, stalls or lets through messages at runtime:
//
//   - UnboundTargets: a target the dispatch exchange is not bound to parks every due message
//     for it (a binding deleted by hand after apply, which the spec record does not show).
//   - UnsafePolicies: a policy in effect on the delay queues (message-ttl, expires, a length
//     limit, ...) delivers early, drops or stalls delayed messages.
//   - TopicPermissionExchanges: dead-lettering is not checked against permissions, so a
//     topic permission the Publisher's own probe cannot find (a deny-list pattern) would be
//     passed by delayed messages.
type ManagementCheck interface {
	// VHost is the vhost the check reads; NewPublisher refuses one other than Config.URL's.
	VHost() string
	// UnboundTargets returns the targets of spec that the dispatch exchange is not bound to,
	// as the management API lists the bindings now.
	UnboundTargets(ctx context.Context, spec delayspec.Spec) ([]string, error)
	// UnsafePolicies returns one line per policy or operator policy in effect on spec's
	// topology that breaks a guarantee, each naming the key, the object and the fix.
	UnsafePolicies(ctx context.Context, spec delayspec.Spec) ([]string, error)
	// TopicPermissionExchanges returns the exchanges of the vhost on which user has a topic
	// permission; an error when the management user may not read them.
	TopicPermissionExchanges(ctx context.Context, user string) ([]string, error)
}

// checkManaged, with Config.Management, asks the management API what AMQP cannot (see
// [ManagementCheck]) at every connection. It returns nil without one, an error wrapping
// ErrTopologyMissing or ErrTopologyUnsafe, or the management API's error.
func (p *Publisher) checkManaged(ctx context.Context) error {
	m := p.opts.management
	if m == nil {
		return nil
	}
	var problems []error
	unbound, err := m.UnboundTargets(ctx, p.spec)
	if err != nil {
		return fmt.Errorf("amqpdelay: check the dispatch exchange's bindings to the targets: %w", err)
	}
	for _, t := range unbound {
		problems = append(problems, fmt.Errorf("%w: target exchange %q is not bound to the dispatch exchange %q (the management API "+
			"lists no such binding): run `rabbitdelay apply` with %q among AMQPDELAY_TARGETS", ErrTopologyMissing, t, p.names.Dispatch(), t))
	}
	// The exchanges with a topic permission for the Publisher's user: direct publishes to
	// them go alone (refusal.go, check 5). A management user that may not read them (it needs
	// the administrator tag for another user) leaves the Publisher to learn them from refusals.
	if guarded, err := m.TopicPermissionExchanges(ctx, p.user); err == nil {
		for _, x := range guarded {
			p.refusals.topicGuarded.add(x)
		}
	}
	unsafe, err := m.UnsafePolicies(ctx, p.spec)
	if err != nil {
		return fmt.Errorf("amqpdelay: read the policies in effect on the topology: %w", err)
	}
	if len(unsafe) > 0 {
		problems = append(problems, fmt.Errorf("%w: %d policy problem(s): %s", ErrTopologyUnsafe, len(unsafe), strings.Join(unsafe, "; ")))
	}
	return errors.Join(problems...)
}

// vhostOf is the vhost of the AMQP URL (or the first of an address list), "/" by default.
func vhostOf(url string) string {
	first, _, _ := strings.Cut(url, ",")
	if u, err := amqp.ParseURI(strings.TrimSpace(first)); err == nil && u.Vhost != "" {
		return u.Vhost
	}
	return "/"
}
