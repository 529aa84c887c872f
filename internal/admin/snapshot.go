package admin

import (
	"context"

	"golang.org/x/sync/errgroup"
)

// Snapshot is what the management API says about a plan's topology at one moment: the
// figures `rabbitdelay exporter` serves. It is read without AMQP, so it has no view of objects
// the management API does not list (it has no "missing exchange" check; see [Status]).
type Snapshot struct {
	// Queues are the vhost's queues by name (every queue, not only the plan's).
	Queues map[string]ManagedQueue
	// Cluster is where the plan's quorum queues live (see [ClusterStatus]).
	Cluster *ClusterStatus
	// PolicyProblems are the policy keys in effect that break a guarantee, and warnings
	// ([Management.PolicyProblems]).
	PolicyProblems []PolicyProblem
	// StatsDisabled: the management API collects no queue statistics (its overview's
	// disable_stats, rabbitmq_management_agent.disable_metrics_collector = true), so the
	// queues' message counts and messages_dlx are unknown.
	StatsDisabled bool
	// Version is the RabbitMQ version the management API reports (its overview's
	// rabbitmq_version, e.g. "4.3.6"; "" when it does not say).
	Version string
}

// Snapshot reads, all at once, what [Management.Cluster] and [Management.PolicyProblems]
// read: the vhost's queues, the cluster's nodes (skipped without the monitoring tag), the
// vhost's bindings, exchanges and policies, the operator policies and the broker's overview
// (its version, and whether it collects statistics), once.
// ctx bounds every request. Errors wrap ErrManagement.
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

// clusterView reads the vhost's queues, the cluster's nodes and the vhost's bindings (in
// parallel), and works out where p's quorum queues live.
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

// parallel runs every f at once (management API requests: the broker answers each in a
// process of its own) and returns the first error, nil when all succeed.
func parallel(fs ...func() error) error {
	var g errgroup.Group
	for _, f := range fs {
		g.Go(f)
	}
	return g.Wait()
}
