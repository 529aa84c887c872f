package topology

import "context"

// Snapshot is what the management API says about a plan's topology at one moment: the
// figures `declare exporter` serves. It is read without AMQP, so it has no view of objects
// the management API does not list (it has no "missing exchange" check; see [Status]).
type Snapshot struct {
	// Queues are the vhost's queues by name (every queue, not only the plan's).
	Queues map[string]ManagedQueue
	// Cluster is where the plan's quorum queues live (see [ClusterStatus]).
	Cluster *ClusterStatus
	// PolicyProblems are the policy keys in effect that break a guarantee, and warnings
	// ([Management.PolicyProblems]).
	PolicyProblems []PolicyProblem
}

// Snapshot reads the vhost's queues, the cluster's nodes, the vhost's bindings and the
// policies in effect, each once: GET /api/queues/<vhost>, /api/nodes (skipped without the
// monitoring tag), /api/bindings/<vhost>, and what [Management.PolicyProblems] reads. ctx
// bounds every request. Errors wrap ErrManagement.
func (m *Management) Snapshot(ctx context.Context, p *Plan) (*Snapshot, error) {
	queues, err := m.Queues(ctx)
	if err != nil {
		return nil, err
	}
	nodes, err := m.Nodes(ctx)
	if err != nil {
		return nil, err
	}
	bindings, err := m.bindings(ctx)
	if err != nil {
		return nil, err
	}
	problems, err := m.PolicyProblems(ctx, p)
	if err != nil {
		return nil, err
	}
	return &Snapshot{Queues: queues, Cluster: clusterOf(p, queues, nodes, bindings), PolicyProblems: problems}, nil
}
