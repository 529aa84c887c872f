package admin

import (
	"cmp"
	"context"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"time"
)

// RebalanceOptions tune [Management.Rebalance].
type RebalanceOptions struct {
	DryRun bool          // reports the leaders per node and the commands, and moves nothing
	Poll   time.Duration // how often the leaders are read while RabbitMQ moves them; 0 means 1 s
	// Settle is how long the leaders must stay unchanged before Rebalance returns; 0 means
	// 10 s. It also returns once they are balanced after a move, and when ctx ends.
	Settle time.Duration
}

// RebalanceReport is what [Management.Rebalance] did.
type RebalanceReport struct {
	// Before and After are the leaders per node before and when Rebalance returned.
	Before    []NodeLeaders `json:"before"`
	After     []NodeLeaders `json:"after"`
	Requested bool          `json:"requested"`        // POST /api/rebalance/queues was sent
	Reason    string        `json:"reason,omitempty"` // why it was not
	Moved     int           `json:"moved"`            // quorum queues with another leader after
	// Command is [Plan.RebalanceCommand] (the HTTP API cannot restrict a rebalance).
	Command string `json:"command"`
}

// RebalanceCommand returns the `rabbitmq-queues rebalance quorum` command that moves only the
// leaders of p's quorum queues in vhost, to run on a cluster node: its queue pattern (PCRE)
// matches the delay and parking queues by [Names.DelayQueuesPattern], the others by name.
func (p *Plan) RebalanceCommand(vhost string) string {
	vhost = cmp.Or(vhost, "/")
	delay := p.Names.DelayQueuesPattern()
	alts := []string{strings.TrimSuffix(strings.TrimPrefix(delay, "^"), "$")}
	re := regexp.MustCompile(delay)
	for _, q := range p.Queues {
		if !re.MatchString(q.Name) {
			alts = append(alts, regexp.QuoteMeta(q.Name))
		}
	}
	return fmt.Sprintf("rabbitmq-queues rebalance quorum --vhost-pattern %s --queue-pattern %s",
		shellQuote(exactPattern([]string{vhost})), shellQuote("^(?:"+strings.Join(alts, "|")+")$"))
}

func leaders(p *Plan, queues map[string]ManagedQueue) map[string]string {
	out := map[string]string{}
	for _, q := range p.Queues {
		if mq, ok := queues[q.Name]; ok && mq.isQuorum() {
			out[q.Name] = mq.Leader
		}
	}
	return out
}

// Rebalance asks RabbitMQ (POST /api/rebalance/queues, administrator tag) to spread the quorum
// queues' leaders of every vhost over the running nodes (Raft leadership transfers, no message
// lost), unless p's delay queues are balanced ([LeadersBalanced]) or with opts.DryRun, and
// reports p's leaders per node before and after, polling as [RebalanceOptions] say. When ctx
// ends it returns the report so far and ctx's error. Errors wrap ErrManagement; a refusal
// (401/403) names the administrator tag.
func (m *Management) Rebalance(ctx context.Context, p *Plan, opts RebalanceOptions) (*RebalanceReport, error) {
	if opts.Poll <= 0 {
		opts.Poll = time.Second
	}
	if opts.Settle <= 0 {
		opts.Settle = 10 * time.Second
	}
	rep := &RebalanceReport{Command: p.RebalanceCommand(m.vhost)}
	before, err := m.Cluster(ctx, p)
	if err != nil {
		return rep, err
	}
	rep.Before, rep.After = before.Nodes, before.Nodes
	running := 0
	for _, n := range before.Nodes {
		if n.Running == nil || *n.Running {
			running++
		}
	}
	switch {
	case running < 2:
		rep.Reason = "fewer than two running nodes: nothing to spread"
	case before.Balanced:
		rep.Reason = "the delay queues' leaders are already balanced"
	case opts.DryRun:
		rep.Reason = "dry run"
	}
	if rep.Reason != "" {
		return rep, nil
	}
	queues, err := m.Queues(ctx)
	if err != nil {
		return rep, err
	}
	start := leaders(p, queues)
	if err := m.do(ctx, http.MethodPost, "api/rebalance/queues", nil, nil); err != nil {
		if s := httpStatus(err); s == http.StatusUnauthorized || s == http.StatusForbidden {
			return rep, fmt.Errorf("topology: rebalance: %w: POST /api/rebalance/queues needs a user with the administrator tag "+
				"(rabbitmqctl set_user_tags <user> administrator), or run on a cluster node: %s", err, rep.Command)
		}
		return rep, fmt.Errorf("topology: rebalance: %w", err)
	}
	rep.Requested = true
	return rep, m.waitSettled(ctx, p, opts, rep, start)
}

// waitSettled reads p's leaders into rep every opts.Poll until they settle; start are the
// leaders before.
func (m *Management) waitSettled(ctx context.Context, p *Plan, opts RebalanceOptions, rep *RebalanceReport, start map[string]string) error {
	last, lastChange := start, time.Now()
	t := time.NewTicker(opts.Poll)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return fmt.Errorf("topology: rebalance: leaders still moving when the deadline came (%d moved so far); "+
				"RabbitMQ goes on in the background: run rabbitdelay status later: %w", rep.Moved, ctx.Err())
		case <-t.C:
		}
		var queues map[string]ManagedQueue
		var nodes []ClusterNode
		err := parallel(
			func() (err error) { queues, err = m.Queues(ctx); return err },
			func() (err error) { nodes, err = m.Nodes(ctx); return err })
		if err != nil {
			return err
		}
		now := leaders(p, queues)
		c := clusterOf(p, queues, nodes, nil)
		rep.After, rep.Moved = c.Nodes, 0
		changed := false
		for q, l := range now {
			if l != start[q] {
				rep.Moved++
			}
			changed = changed || l != last[q]
		}
		if changed {
			last, lastChange = now, time.Now()
		}
		if (rep.Moved > 0 && c.Balanced) || time.Since(lastChange) >= opts.Settle {
			return nil
		}
	}
}
