package admin

import (
	"context"

	"golang.org/x/sync/errgroup"
)

// Snapshot is what the management API says about a plan's topology at one moment (what
// `rabbitdelay exporter` serves), read without AMQP: unlike [Status], it cannot see missing
// exchanges.
type Snapshot struct {
	Queues         map[string]ManagedQueue // all the vhost's queues by name
	Cluster        *ClusterStatus          // where the plan's quorum queues live
	PolicyProblems []PolicyProblem         // as [Management.PolicyProblems] returns them
	// StatsDisabled: the overview says disable_stats, so message counts are unknown
	StatsDisabled bool
	Version       string // overview's rabbitmq_version ("" when it does not say)
}

// Snapshot reads, in parallel and once, what [Management.Cluster] and
// [Management.PolicyProblems] read, and the overview. Errors wrap ErrManagement.
func (m *Management) Snapshot(ctx context.Context, p *Plan) (*Snapshot, error) {
	var s Snapshot
	var v *policyRead
	err := parallel(
		func() (err error) { v, err = m.policyView(ctx, p); return err },
		func() (err error) { s.Queues, s.Cluster, _, err = m.clusterView(ctx, p); return err })
	if err != nil {
		return nil, err
	}
	s.PolicyProblems, s.StatsDisabled, s.Version = v.problems, v.overview.DisableStats, v.overview.Version
	return &s, nil
}

// clusterView reads the queues, nodes and bindings in parallel and where p's quorum queues live.
func (m *Management) clusterView(ctx context.Context, p *Plan) (map[string]ManagedQueue, *ClusterStatus, []Binding, error) {
	var queues map[string]ManagedQueue
	var nodes []ClusterNode
	var bindings []Binding
	err := parallel(
		func() (err error) { queues, err = m.Queues(ctx); return err },
		func() (err error) { nodes, err = m.Nodes(ctx); return err },
		func() (err error) { bindings, err = m.bindings(ctx); return err })
	if err != nil {
		return nil, nil, nil, err
	}
	return queues, clusterOf(p, queues, nodes, bindings), bindings, nil
}

func parallel(fs ...func() error) error {
	var g errgroup.Group
	for _, f := range fs {
		g.Go(f)
	}
	return g.Wait()
}
