package admin

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"

	"github.com/delaykit/rabbitdelay/internal/delayspec"
	"github.com/delaykit/rabbitdelay/internal/text"
)

// ClusterNode is one node of the broker's cluster, as GET /api/nodes lists it.
type ClusterNode struct {
	Name string `json:"name"` // rabbit@host
	// Running is false for a node the cluster cannot reach; nil when unknown (/api/nodes
	// needs the monitoring tag).
	Running *bool `json:"running,omitempty"`
}

// NodeLeaders is what one node does for the plan's quorum queues.
type NodeLeaders struct {
	ClusterNode
	DelayQueues int `json:"delay_queue_leaders"` // delay queues it leads
	Leaders     int `json:"leaders"`             // quorum queues it leads
	Members     int `json:"members"`             // quorum queues with a replica on it
}

// DegradedQueue is a quorum queue of the plan with members offline or no leader (then it takes
// no publish, expires and dead-letters nothing).
type DegradedQueue struct {
	Queue   string   `json:"queue"`
	Leader  string   `json:"leader"` // "" when none
	Members []string `json:"members"`
	Offline []string `json:"offline"` // members not online
}

// NoLeader reports whether the queue has no reachable leader.
func (d DegradedQueue) NoLeader() bool { return d.Leader == "" }

// DeadLetterWait is dead-lettering waiting on an unreachable node: queues holding messages in
// dead-letter state while Node, a member of theirs or of a queue they dead-letter into, is
// offline (on 3.10 a new leader does not take over messages already in that state).
type DeadLetterWait struct {
	Node string `json:"node"`
	// Running is as [ClusterNode.Running]; true means only the replicas on it are down.
	Running  *bool          `json:"running,omitempty"`
	Queues   []WaitingQueue `json:"queues"`   // in plan order
	Messages int64          `json:"messages"` // the sum of their messages_dlx
}

// WaitingQueue is a queue and the messages it holds in its dead-letter state.
type WaitingQueue struct {
	Name        string `json:"name"`
	MessagesDLX int64  `json:"messages_dlx"`
}

// String is "name (messages)".
func (q WaitingQueue) String() string { return fmt.Sprintf("%s (%d)", q.Name, q.MessagesDLX) }

// Error describes the wait and what to do, for an operator.
func (w DeadLetterWait) Error() string { return deadLetterWaitText(w, "<vhost>") }

func deadLetterWaitText(w DeadLetterWait, vhost string) string {
	state := "offline"
	if w.Running != nil && !*w.Running {
		state = "down"
	}
	return fmt.Sprintf("dead-lettering waiting on unreachable node %s (%s): %s in dead-letter state (messages_dlx) in %s "+
		"cannot move on while this node, a member of these queues or of the queues they dead-letter into, is unreachable. "+
		"Bring the node back (the messages then move on by themselves); if it is gone for good, remove it properly: "+
		"`rabbitmq-queues delete_member -p %s <queue> %s` for each quorum queue it was a member of, then `rabbitmqctl forget_cluster_node %s` "+
		"on a running node (on 3.10.8 forget_cluster_node alone did not release messages already in dead-letter state)",
		w.Node, state, text.Plural(int(w.Messages), "message"), text.Join(w.Queues, ", "), shellQuote(vhost), w.Node, w.Node)
}

// ClusterStatus is where the plan's quorum queues live in the cluster (management API only).
type ClusterStatus struct {
	Nodes    []NodeLeaders    `json:"nodes"`    // sorted by name
	Balanced bool             `json:"balanced"` // see [LeadersBalanced]
	Degraded []DegradedQueue  `json:"degraded,omitempty"`
	Waits    []DeadLetterWait `json:"dead_letter_waits,omitempty"` // by node
	// SharedLeaders are ladder queues (Spec.Shards > 1) two or more of whose shards have their
	// leader on one node (unavoidable when Shards exceeds the running nodes); not a failure.
	SharedLeaders []SharedLeader `json:"shared_leaders,omitempty"`
	Shards        int            `json:"shards"` // Spec.Shards
}

// SharedLeader is one ladder queue whose shards (queue names, by shard) Node leads.
type SharedLeader struct {
	Level  int      `json:"level"`
	Digit  int      `json:"digit"`
	Node   string   `json:"node"`
	Queues []string `json:"queues"`
}

// Offline returns the offline members of degraded queues, with how many queues each.
func (c *ClusterStatus) Offline() map[string]int {
	out := map[string]int{}
	for _, d := range c.Degraded {
		for _, n := range d.Offline {
			out[n]++
		}
	}
	return out
}

// Nodes returns the cluster's nodes from GET /api/nodes, sorted; nil, nil without the
// monitoring tag (401, 403). Errors wrap ErrManagement.
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

func (q ManagedQueue) isQuorum() bool { return q.Type == string(delayspec.Quorum) }

func (q ManagedQueue) offline() []string {
	var out []string
	for _, n := range q.Members {
		if !slices.Contains(q.Online, n) {
			out = append(out, n)
		}
	}
	return out
}

// clusterOf works out p's [ClusterStatus] from the queues, nodes (nil when unknown) and
// bindings.
func clusterOf(p *Plan, queues map[string]ManagedQueue, nodes []ClusterNode, bindings []Binding) *ClusterStatus {
	c := &ClusterStatus{}
	byNode := map[string]*NodeLeaders{}
	node := func(name string) *NodeLeaders {
		if byNode[name] == nil {
			byNode[name] = &NodeLeaders{ClusterNode: ClusterNode{Name: name}}
		}
		return byNode[name]
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
	for _, name := range slices.Sorted(maps.Keys(byNode)) {
		c.Nodes = append(c.Nodes, *byNode[name])
	}
	c.Balanced = LeadersBalanced(c.Nodes)
	c.Waits = deadLetterWaits(p, queues, nodes, bindings)
	c.SharedLeaders = sharedLeaders(p, queues)
	c.Shards = p.Spec.Shards
	return c
}

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

// LeadersBalanced reports whether the delay queues' leaders are spread over the running nodes
// (unknown counts as running): the most and fewest on one node differ by at most the larger of
// 2 and a tenth of the delay queues with a leader (parallel "balanced" placement races, so a
// few is normal). A single running node is always balanced.
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

// deadLetterWaits groups the queues holding messages in dead-letter state by the offline
// members of theirs and of the quorum queues they dead-letter into.
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
			if byNode[n] == nil {
				byNode[n] = &DeadLetterWait{Node: n, Running: running[n]}
			}
			byNode[n].Queues = append(byNode[n].Queues, WaitingQueue{Name: q.Name, MessagesDLX: mq.MessagesDLX})
			byNode[n].Messages += mq.MessagesDLX
		}
	}
	var out []DeadLetterWait
	for _, n := range slices.Sorted(maps.Keys(byNode)) {
		out = append(out, *byNode[n])
	}
	return out
}

// deadLetterTargets returns the queues a message dead-lettered to exchange dlx can reach,
// sorted: through bindings and the alternate exchanges of the plan and its targets policy.
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
	return slices.Sorted(maps.Keys(found))
}

// Cluster returns where p's quorum queues live, from /api/queues, /api/nodes and
// /api/bindings. Errors wrap ErrManagement.
func (m *Management) Cluster(ctx context.Context, p *Plan) (*ClusterStatus, error) {
	_, c, _, err := m.clusterView(ctx, p)
	return c, err
}

// degradedError is ErrUnhealthy describing the degraded queues by node; nil when none.
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
	running := map[string]*bool{}
	for _, n := range c.Nodes {
		running[n.Name] = n.Running
	}
	var parts []string
	for _, n := range slices.Sorted(maps.Keys(off)) {
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
