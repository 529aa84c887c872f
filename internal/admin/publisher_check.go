package admin

import (
	"context"
	"fmt"

	"github.com/delaykit/rabbitdelay/internal/delayspec"
)

// What amqpdelay.Config.Management asks at every Publisher connection (amqpdelay.ManagementCheck):
// the checks of the management API whose absence would lose or stall delayed messages, for a
// specification rather than a plan, so that the client never needs this package.

// UnboundTargets returns the targets of spec that the dispatch exchange is not bound to, as
// the management API lists its bindings now (one request; see [Management.DispatchBound]). Errors
// wrap ErrInvalidSpec for a spec that does not validate, or are the management API's.
func (m *Management) UnboundTargets(ctx context.Context, spec delayspec.Spec) ([]string, error) {
	p, err := NewPlan(spec)
	if err != nil {
		return nil, err
	}
	have, err := m.dispatchBindings(ctx, p)
	if err != nil {
		return nil, fmt.Errorf("topology: check the bindings of the dispatch exchange %q: %w", p.Names.Dispatch(), err)
	}
	var unbound []string
	for _, t := range p.Spec.Targets {
		if want, ok := p.dispatchBinding(t.Name); !ok || !have[want.key()] {
			unbound = append(unbound, t.Name)
		}
	}
	return unbound, nil
}

// UnsafePolicies returns one line per policy or operator policy in effect on the topology of
// spec in m's vhost that breaks a guarantee ([Management.PolicyProblems], the failing ones:
// [Failing]), each naming the key, the object and the fix. Errors wrap ErrInvalidSpec for a
// spec that does not validate, or are the management API's.
func (m *Management) UnsafePolicies(ctx context.Context, spec delayspec.Spec) ([]string, error) {
	p, err := NewPlan(spec)
	if err != nil {
		return nil, err
	}
	pps, err := m.PolicyProblems(ctx, p)
	if err != nil {
		return nil, err
	}
	var lines []string
	for _, pp := range Failing(pps) {
		lines = append(lines, pp.Error())
	}
	return lines, nil
}
