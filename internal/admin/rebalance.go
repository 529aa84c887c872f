package admin

import (
	"context"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"time"
)

// RebalanceOptions tune [Management.Rebalance].
type RebalanceOptions struct {
	// DryRun reports the leaders per node and the commands, and moves nothing.
	DryRun bool
	// Poll is how often the leaders are read while RabbitMQ moves them; 0 means 1 s.
	Poll time.Duration
	// Settle is how long the leaders must stay unchanged, once the rebalance was asked for,
	// before Rebalance considers RabbitMQ done; 0 means 10 s. Rebalance also returns as soon
	// as the leaders are balanced ([LeadersBalanced]) after a move, and when ctx ends.
	Settle time.Duration
}

// RebalanceReport is what [Management.Rebalance] did.
type RebalanceReport struct {
	// Before and After are the leaders per node before the rebalance and when Rebalance
	// returned (After equals Before when nothing was asked for).
	Before []NodeLeaders `json:"before"`
	After  []NodeLeaders `json:"after"`
	// Requested says whether POST /api/rebalance/queues was sent.
	Requested bool `json:"requested"`
	// Reason says why it was not (already balanced, dry run, a single running node).
	Reason string `json:"reason,omitempty"`
	// Moved is how many of the plan's quorum queues have another leader afterwards.
	Moved int `json:"moved"`
	// Command is the rabbitmq-queues command that rebalances only the plan's quorum queues,
	// to run on a cluster node (the HTTP API cannot restrict a rebalance).
	Command string `json:"command"`
}

// RebalanceCommand returns the rabbitmq-queues command that moves the leaders of p's quorum
// queues in vhost, and only theirs, for an operator on a cluster node: `rabbitmq-queues
// rebalance quorum` with a vhost pattern matching exactly vhost and a queue pattern (PCRE,
// rabbit_amqqueue:rebalance matches it with re:run) matching the parking and delay queues by
// the naming rule ([Names.DelayQueuesPattern], the delay-queue policy's pattern; an earlier
// ladder's queues under the same prefix match too) and the other queues by name.
func (p *Plan) RebalanceCommand(vhost string) string {
	if vhost == "" {
		vhost = "/"
	}
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

// leaders returns the leader node of each of p's quorum queues ("" when none).
func leaders(p *Plan, queues map[string]ManagedQueue) map[string]string {
	out := map[string]string{}
	for _, q := range p.Queues {
		if mq, ok := queues[q.Name]; ok && mq.isQuorum() {
			out[q.Name] = mq.Leader
		}
	}
	return out
}

// Rebalance moves the leaders of quorum queues so that each running node leads about as
// many, through the management API, and reports the leaders of p's quorum queues per node
// before and after. When p's delay queues are already balanced ([LeadersBalanced]), or with
// opts.DryRun, it moves nothing.
//
// RabbitMQ's endpoint, POST /api/rebalance/queues (rabbit_mgmt_wm_rebalance_queues), takes no
// filter: it rebalances every replicated queue of every vhost and needs the administrator tag.
// Each move is a Raft leadership transfer, no message lost. To move only the topology's
// queues, run [RebalanceReport.Command] on a cluster node instead.
//
// Rebalance then reads the leaders every opts.Poll until they are balanced, stay unchanged for
// opts.Settle, or ctx ends (it returns the report so far and ctx's error). Errors wrap
// ErrManagement; a refusal (401/403) says the administrator tag is needed.
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

// waitSettled reads the leaders of p's quorum queues every opts.Poll, into rep, until they are
// balanced after a move, stay unchanged for opts.Settle, or ctx ends; start are the leaders
// before the rebalance.
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
