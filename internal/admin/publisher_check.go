package admin

import (
	"context"
	"fmt"

	"github.com/delaykit/rabbitdelay/internal/delayspec"
)

// UnboundTargets returns the targets of spec that the dispatch exchange is not bound to (one
// request), for amqpdelay.Config.Management. Errors wrap ErrInvalidSpec for an invalid spec,
// or are the management API's.
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

// UnsafePolicies returns the [Failing] [Management.PolicyProblems] of spec's topology, one line
// each. Errors wrap ErrInvalidSpec for an invalid spec, or are the management API's.
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
