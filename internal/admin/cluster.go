package admin

import (
	"cmp"
	"context"
	"fmt"
	"net/http"
	"slices"
	"sort"
	"strings"

	"github.com/delaykit/rabbitdelay/internal/delayspec"
	"github.com/delaykit/rabbitdelay/internal/text"
)

// Clusters. A quorum queue has members (replicas) on several nodes and one leader among them,
// which takes every publish, expiry and dead-lettering of the queue. The management API's
// queue view names them: leader (the node of the leader, "" while the node recorded as
// leader is unreachable), members (every node with a replica) and online (the members whose
// replica process is alive); rabbit_quorum_queue:format/1 and leader/1 compute them when the
// queue is listed (RabbitMQ 3.10 and 4.0).

// ClusterNode is one node of the broker's cluster, as GET /api/nodes lists it.
type ClusterNode struct {
	// Name is the Erlang node name, rabbit@host.
	Name string `json:"name"`
	// Running is false for a node the cluster knows but cannot reach (stopped, crashed, cut
	// off). Nil when unknown: /api/nodes needs the monitoring (or administrator) user tag, and
	// without it the nodes are taken from the queues' members.
	Running *bool `json:"running,omitempty"`
}

// NodeLeaders is what one node does for the topology's quorum queues.
type NodeLeaders struct {
	ClusterNode
	// DelayQueues is how many delay queues (ladder and bucket queues) have their leader on
	// this node.
	DelayQueues int `json:"delay_queue_leaders"`
	// Leaders is how many of the plan's quorum queues (delay, parking and ready queues) have
	// their leader on this node.
	Leaders int `json:"leaders"`
	// Members is how many of the plan's quorum queues have a member (replica) on this node.
	Members int `json:"members"`
}

// DegradedQueue is a quorum queue of the plan with fewer online members than members, or with
// no leader. A quorum queue keeps working while a majority of its members is online; without
// a leader it takes no publish, expires nothing and dead-letters nothing.
type DegradedQueue struct {
	Queue string `json:"queue"`
	// Leader is the leader's node, "" when there is none.
	Leader string `json:"leader"`
	// Members are the nodes with a replica; Offline those of them whose replica is not online.
	Members []string `json:"members"`
	Offline []string `json:"offline"`
}

// NoLeader reports whether the queue has no reachable leader.
func (d DegradedQueue) NoLeader() bool { return d.Leader == "" }

// DeadLetterWait is dead-lettering waiting on an unreachable node: queues holding messages in
// their dead-letter state (messages_dlx) while Node, a member of the queue or of a queue it
// dead-letters into, is offline. On RabbitMQ 3.10, when the node leading a quorum queue with
// at-least-once dead-lettering dies, the new leader does not take over the messages already in
// its dead-letter state: they stay until that node comes back (forget_cluster_node alone does
// not release them). A dead-letter target without a majority online confirms nothing, so its
// sources keep their messages too.
type DeadLetterWait struct {
	// Node is the unreachable node.
	Node string `json:"node"`
	// Running is false when the cluster reports the node down, nil when unknown (see
	// [ClusterNode.Running]); true means the node runs but the queues' replicas on it do not.
	Running *bool `json:"running,omitempty"`
	// Queues are the queues holding messages in dead-letter state, in plan order.
	Queues []WaitingQueue `json:"queues"`
	// Messages is the sum of their messages_dlx.
	Messages int64 `json:"messages"`
}

// WaitingQueue is a queue and the messages it holds in its dead-letter state: a queue of a
// [DeadLetterWait], or of [StatusReport.DeadLettering].
type WaitingQueue struct {
	Name string `json:"name"`
	// MessagesDLX is the number of messages in its dead-letter state.
	MessagesDLX int64 `json:"messages_dlx"`
}

func (q WaitingQueue) String() string { return fmt.Sprintf("%s (%d)", q.Name, q.MessagesDLX) }

// Error describes the wait and what to do, for an operator.
func (w DeadLetterWait) Error() string { return deadLetterWaitText(w, "<vhost>") }

func deadLetterWaitText(w DeadLetterWait, vhost string) string {
	state := "offline"
	if w.Running != nil && !*w.Running {
		state = "down"
	}
	queues := make([]string, len(w.Queues))
	for i, q := range w.Queues {
		queues[i] = q.String()
	}
	return fmt.Sprintf("dead-lettering waiting on unreachable node %s (%s): %s in dead-letter state (messages_dlx) in %s "+
		"cannot move on while this node, a member of these queues or of the queues they dead-letter into, is unreachable. "+
		"Bring the node back (the messages then move on by themselves); if it is gone for good, remove it properly: "+
		"`rabbitmq-queues delete_member -p %s <queue> %s` for each quorum queue it was a member of, then `rabbitmqctl forget_cluster_node %s` "+
		"on a running node (on 3.10.8 forget_cluster_node alone did not release messages already in dead-letter state)",
		w.Node, state, text.Plural(int(w.Messages), "message"), strings.Join(queues, ", "), shellQuote(vhost), w.Node, w.Node)
}

// ClusterStatus is where the plan's quorum queues live in the cluster (management API only).
type ClusterStatus struct {
	// Nodes are the cluster's nodes, sorted by name, with what each leads.
	Nodes []NodeLeaders `json:"nodes"`
	// Balanced says the delay queues' leaders are spread over the running nodes: no two
	// running nodes lead a number of delay queues differing by more than the larger of 2
	// and a tenth of the delay queues (see [LeadersBalanced]).
	Balanced bool `json:"balanced"`
	// Degraded are the plan's quorum queues with members offline or no leader.
	Degraded []DegradedQueue `json:"degraded,omitempty"`
	// Waits are dead-lettering waiting on an unreachable node, by node.
	Waits []DeadLetterWait `json:"dead_letter_waits,omitempty"`
	// SharedLeaders are the ladder queues (Spec.Shards > 1) two or more of whose shards have
	// their leader on the same node: that node dead-letters those shards' share of a burst
	// too. Unavoidable when Shards exceeds the running nodes; otherwise the shards were
	// declared without [ApplyOptions.Nodes], existed before, or their leaders moved (a node
	// restart, a rebalance). It does not make Status fail.
	SharedLeaders []SharedLeader `json:"shared_leaders,omitempty"`
	// Shards is the plan's number of shards of the ladder (Spec.Shards).
	Shards int `json:"shards"`
}

// SharedLeader is one ladder queue whose shards share a leader node: the shards (queue names,
// by shard) that Node leads.
type SharedLeader struct {
	Level  int      `json:"level"`
	Digit  int      `json:"digit"`
	Node   string   `json:"node"`
	Queues []string `json:"queues"`
}

// Offline returns the nodes that are members of a degraded queue and offline, sorted, with how
// many of the plan's quorum queues have a member offline there.
func (c *ClusterStatus) Offline() map[string]int {
	out := map[string]int{}
	for _, d := range c.Degraded {
		for _, n := range d.Offline {
			out[n]++
		}
	}
	return out
}

// Nodes returns the vhost's cluster nodes from GET /api/nodes. A refusal for lack of the
// monitoring tag (401, 403) returns nil and no error: callers then take the nodes from the
// queues' members. Other errors wrap ErrManagement.
func (m *Management) Nodes(ctx context.Context) ([]ClusterNode, error) {
	var out []ClusterNode
	if err := m.get(ctx, "api/nodes?columns=name,running", &out); err != nil {
		if s := httpStatus(err); s == http.StatusUnauthorized || s == http.StatusForbidden {
			return nil, nil
		}
		return nil, err
	}
	slices.SortFunc(out, func(a, b ClusterNode) int { return cmp.Compare(a.Name, b.Name) })
	return out, nil
}

// isQuorum reports whether the management API's view of a queue is a quorum queue's.
func (q ManagedQueue) isQuorum() bool { return q.Type == string(delayspec.Quorum) }

// offline returns the queue's members that are not online, in member order.
func (q ManagedQueue) offline() []string {
	var out []string
	for _, n := range q.Members {
		if !slices.Contains(q.Online, n) {
			out = append(out, n)
		}
	}
	return out
}

// clusterOf works out the [ClusterStatus] of p from the vhost's queues, the cluster's nodes
// (nil when unknown) and the vhost's bindings (for the queues a queue dead-letters into).
func clusterOf(p *Plan, queues map[string]ManagedQueue, nodes []ClusterNode, bindings []Binding) *ClusterStatus {
	c := &ClusterStatus{}
	byNode := map[string]*NodeLeaders{}
	node := func(name string) *NodeLeaders {
		if n, ok := byNode[name]; ok {
			return n
		}
		n := &NodeLeaders{ClusterNode: ClusterNode{Name: name}}
		byNode[name] = n
		return n
	}
	for _, n := range nodes {
		node(n.Name).Running = n.Running
	}
	for _, q := range p.Queues {
		mq, ok := queues[q.Name]
		if !ok || !mq.isQuorum() {
			continue
		}
		for _, m := range mq.Members {
			node(m).Members++
		}
		if mq.Leader != "" {
			l := node(mq.Leader)
			l.Leaders++
			if q.IsDelay() {
				l.DelayQueues++
			}
		}
		if off := mq.offline(); len(off) > 0 || mq.Leader == "" {
			c.Degraded = append(c.Degraded, DegradedQueue{Queue: q.Name, Leader: mq.Leader, Members: mq.Members, Offline: off})
		}
	}
	for _, n := range byNode {
		c.Nodes = append(c.Nodes, *n)
	}
	slices.SortFunc(c.Nodes, func(a, b NodeLeaders) int { return cmp.Compare(a.Name, b.Name) })
	c.Balanced = LeadersBalanced(c.Nodes)
	c.Waits = deadLetterWaits(p, queues, nodes, bindings)
	c.SharedLeaders = sharedLeaders(p, queues)
	c.Shards = p.Spec.Shards
	return c
}

// sharedLeaders finds the ladder queues whose shards share a leader node, in plan order of the
// shard-0 queues (none for a plan with one ladder).
func sharedLeaders(p *Plan, queues map[string]ManagedQueue) []SharedLeader {
	if p.Spec.Shards <= 1 {
		return nil
	}
	type key struct {
		level, digit      int
		lastHop, firstHop bool
		node              string
	}
	by := map[key][]string{}
	var order []key
	for _, q := range p.Queues {
		if q.Role != RoleLadder {
			continue
		}
		mq, ok := queues[q.Name]
		if !ok || mq.Leader == "" {
			continue
		}
		k := key{q.Level, q.Digit, q.LastHop, q.FirstHop, mq.Leader}
		if _, seen := by[k]; !seen {
			order = append(order, k)
		}
		by[k] = append(by[k], q.Name)
	}
	var out []SharedLeader
	for _, k := range order {
		if qs := by[k]; len(qs) > 1 {
			out = append(out, SharedLeader{Level: k.level, Digit: k.digit, Node: k.node, Queues: qs})
		}
	}
	return out
}

// LeadersBalanced reports whether the delay queues' leaders are spread over the running
// nodes (nodes whose state is unknown count as running): the most and the fewest leaders on
// one running node differ by at most the larger of 2 and a tenth of all delay queues with a
// leader. RabbitMQ's own rebalance aims at no node leading more than ceil(queues / running
// nodes) (rabbit_amqqueue:maybe_rebalance), and "balanced" placement at declaration time
// (see [LeaderLocatorBalanced]) races between declarations made in parallel, so a spread of a
// few queues is normal. A single running node is always balanced.
func LeadersBalanced(nodes []NodeLeaders) bool {
	lo, hi, total, running := -1, 0, 0, 0
	for _, n := range nodes {
		total += n.DelayQueues
		if n.Running != nil && !*n.Running {
			continue
		}
		running++
		if lo < 0 || n.DelayQueues < lo {
			lo = n.DelayQueues
		}
		hi = max(hi, n.DelayQueues)
	}
	if running < 2 {
		return true
	}
	return hi-lo <= max(2, total/10)
}

// deadLetterWaits finds, for every queue of the vhost holding messages in its dead-letter state,
// the offline members of that queue and of the quorum queues it dead-letters into, and groups
// the queues by offline node.
func deadLetterWaits(p *Plan, queues map[string]ManagedQueue, nodes []ClusterNode, bindings []Binding) []DeadLetterWait {
	running := map[string]*bool{}
	for _, n := range nodes {
		running[n.Name] = n.Running
	}
	byNode := map[string]*DeadLetterWait{}
	for _, q := range p.Queues {
		mq, ok := queues[q.Name]
		if !ok || mq.MessagesDLX <= 0 {
			continue
		}
		down := map[string]bool{}
		for _, n := range mq.offline() {
			down[n] = true
		}
		dlx, _ := q.Args["x-dead-letter-exchange"].(string)
		for _, t := range deadLetterTargets(p, bindings, dlx) {
			if tq, ok := queues[t]; ok && tq.isQuorum() {
				for _, n := range tq.offline() {
					down[n] = true
				}
			}
		}
		for n := range down {
			w, ok := byNode[n]
			if !ok {
				w = &DeadLetterWait{Node: n, Running: running[n]}
				byNode[n] = w
			}
			w.Queues = append(w.Queues, WaitingQueue{Name: q.Name, MessagesDLX: mq.MessagesDLX})
			w.Messages += mq.MessagesDLX
		}
	}
	out := make([]DeadLetterWait, 0, len(byNode))
	for _, w := range byNode {
		out = append(out, *w)
	}
	slices.SortFunc(out, func(a, b DeadLetterWait) int { return cmp.Compare(a.Node, b.Node) })
	if len(out) == 0 {
		return nil
	}
	return out
}

// deadLetterTargets returns the queues a message dead-lettered to exchange dlx can reach,
// sorted: through the vhost's bindings (exchange-to-exchange ones followed), the plan's
// alternate-exchange arguments (the dispatch exchange's) and the targets policy's alternate
// exchange. nil when dlx is "".
func deadLetterTargets(p *Plan, bindings []Binding, dlx string) []string {
	if dlx == "" {
		return nil
	}
	ae := map[string][]string{}
	for _, e := range p.Exchanges {
		if a, ok := e.Args["alternate-exchange"].(string); ok {
			ae[e.Name] = append(ae[e.Name], a)
		}
	}
	for _, t := range p.Spec.Targets {
		ae[t.Name] = append(ae[t.Name], p.Names.DueUnroutable())
	}
	from := map[string][]Binding{}
	for _, b := range bindings {
		from[b.Source] = append(from[b.Source], b)
	}
	seen, found := map[string]bool{dlx: true}, map[string]bool{}
	next := []string{dlx}
	for len(next) > 0 {
		x := next[0]
		next = next[1:]
		visit := func(e string) {
			if !seen[e] {
				seen[e] = true
				next = append(next, e)
			}
		}
		for _, b := range from[x] {
			if b.DestinationType == DestQueue {
				found[b.Destination] = true
			} else {
				visit(b.Destination)
			}
		}
		for _, a := range ae[x] {
			visit(a)
		}
	}
	out := make([]string, 0, len(found))
	for q := range found {
		out = append(out, q)
	}
	sort.Strings(out)
	return out
}

// Cluster returns where p's quorum queues live: the leaders per node, the queues with members
// offline or without a leader, and dead-lettering waiting on an unreachable node. It reads
// /api/queues, /api/nodes (skipped without the monitoring tag) and /api/bindings of the
// client's vhost. Errors wrap ErrManagement.
func (m *Management) Cluster(ctx context.Context, p *Plan) (*ClusterStatus, error) {
	_, c, _, err := m.clusterView(ctx, p) // snapshot.go
	return c, err
}

// degradedError describes the queues with members offline or without a leader, by node, for
// Status (ErrUnhealthy); nil when there are none.
func degradedError(c *ClusterStatus) error {
	if len(c.Degraded) == 0 {
		return nil
	}
	var noLeader []string
	for _, d := range c.Degraded {
		if d.NoLeader() {
			noLeader = append(noLeader, d.Queue)
		}
	}
	off := c.Offline()
	names := make([]string, 0, len(off))
	for n := range off {
		names = append(names, n)
	}
	sort.Strings(names)
	running := map[string]*bool{}
	for _, n := range c.Nodes {
		running[n.Name] = n.Running
	}
	var parts []string
	for _, n := range names {
		state := "replicas not running"
		if r := running[n]; r != nil && !*r {
			state = "node down"
		}
		parts = append(parts, fmt.Sprintf("%s (%s) for %s", n, state, text.Plural(off[n], "queue")))
	}
	msg := fmt.Sprintf("%d of the topology's quorum queues have members offline", len(c.Degraded))
	if len(parts) > 0 {
		msg += ": " + strings.Join(parts, "; ")
	}
	if len(noLeader) > 0 {
		shown := noLeader
		if len(shown) > 6 {
			shown = append(append([]string{}, noLeader[:6]...), fmt.Sprintf("... %d more", len(noLeader)-6))
		}
		msg += fmt.Sprintf("; %d have no leader (%s): they take no publish, expire nothing and dead-letter nothing until a majority "+
			"of their members is online and a leader is elected (a few seconds after a leader's node is lost)", len(noLeader), strings.Join(shown, ", "))
	}
	return fmt.Errorf("%w: %s. A quorum queue keeps working while a majority of its members is online, but the next node lost "+
		"can stop it: bring the node back; if it is gone for good, remove it properly (`rabbitmq-queues delete_member` for each "+
		"queue, then `rabbitmqctl forget_cluster_node`) and add a replacement (`rabbitmq-queues grow`). After a node returns, "+
		"its queues' leaders stay where they moved: run rabbitdelay rebalance", ErrUnhealthy, msg)
}
