package admin

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"golang.org/x/sync/errgroup"
)

// statusView is one reading of the management API for [Status]; its zero value is "no
// management API".
type statusView struct {
	policy   *policyRead
	objects  map[string]*managedObject
	queues   map[string]ManagedQueue
	bindings []Binding
	cluster  *ClusterStatus
	delayed  int64            // messages the plugin exchange holds, -1 when unknown
	dlxAgain map[string]int64 // messages_dlx read again (recheckDeadLettering); nil when not
}

// statusView reads, in parallel, policyView, clusterView and (with plugin) the plugin's messages.
func (m *Management) statusView(ctx context.Context, p *Plan, plugin bool) (*statusView, error) {
	v := &statusView{delayed: -1}
	reads := []func() error{
		func() (err error) { v.policy, err = m.policyView(ctx, p); return err },
		func() (err error) { v.queues, v.cluster, v.bindings, err = m.clusterView(ctx, p); return err },
	}
	if plugin && p.HasPlugin() {
		reads = append(reads, func() error {
			n, found, err := m.MessagesDelayed(ctx, p.Names.PluginExchange())
			if found {
				v.delayed = n
			}
			return err
		})
	}
	if err := parallel(reads...); err != nil {
		return nil, err
	}
	v.objects = v.policy.objects()
	return v, nil
}

// exchangeNames are the vhost's exchanges outside p's naming rule, sorted.
func (v *statusView) exchangeNames(p *Plan) []string {
	if v.policy == nil {
		return nil
	}
	var out []string
	for _, x := range v.policy.exchanges {
		if !p.Names.Reserved(x.Name) {
			out = append(out, x.Name)
		}
	}
	slices.Sort(out)
	return out
}

const defaultDeadLetterRecheck = 6 * time.Second

// recheckDeadLettering waits wait when p's queues hold messages in dead-letter state, and reads
// their messages_dlx again into v.dlxAgain.
func (v *statusView) recheckDeadLettering(ctx context.Context, m *Management, p *Plan, wait time.Duration) error {
	var held []string
	for _, q := range p.Queues {
		if v.queues[q.Name].MessagesDLX > 0 && !slices.Contains(held, q.Name) {
			held = append(held, q.Name)
		}
	}
	if len(held) == 0 {
		return nil
	}
	select {
	case <-ctx.Done():
		return fmt.Errorf("topology: status: waiting to read the dead-letter state of %s again: %w", strings.Join(held, ", "), ctx.Err())
	case <-time.After(wait):
	}
	again, err := m.Queues(ctx)
	if err != nil {
		return err
	}
	v.dlxAgain = make(map[string]int64, len(held))
	for _, name := range held {
		v.dlxAgain[name] = again[name].MessagesDLX // a queue deleted meanwhile: 0
	}
	return nil
}

// stillDeadLettering is the smaller messages_dlx of queue's two readings.
func (v *statusView) stillDeadLettering(queue string, first int64) int64 {
	if first <= 0 {
		return 0
	}
	if v.dlxAgain == nil {
		return first
	}
	return max(min(first, v.dlxAgain[queue]), 0)
}

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
	v, err := m.statusView(ctx, p, false)
	if err != nil {
		return nil, err
	}
	o := v.policy.overview
	return &Snapshot{Queues: v.queues, Cluster: v.cluster, PolicyProblems: v.policy.problems, StatsDisabled: o.DisableStats, Version: o.Version}, nil
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
