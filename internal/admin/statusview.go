package admin

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"
)

// statusView is one reading of the management API for [Status]; its zero value is "no
// management API".
type statusView struct {
	policy   *policyRead
	objects  map[string]*vhostObject
	queues   map[string]ManagedQueue
	bindings []Binding
	cluster  *ClusterStatus
	delayed  int64            // messages the plugin exchange holds, -1 when unknown
	dlxAgain map[string]int64 // messages_dlx read again (recheckDeadLettering); nil when not
}

// statusView reads, in parallel, policyView, clusterView and the plugin's messages.
func (m *Management) statusView(ctx context.Context, p *Plan) (*statusView, error) {
	v := &statusView{delayed: -1}
	reads := []func() error{
		func() (err error) { v.policy, err = m.policyView(ctx, p); return err },
		func() (err error) { v.queues, v.cluster, v.bindings, err = m.clusterView(ctx, p); return err },
	}
	if p.HasPlugin() {
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
