package admin

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/delaykit/rabbitdelay/internal/delayspec"
	"github.com/delaykit/rabbitdelay/ttlbuckets"
)

const (
	nodeA = "rabbit@a"
	nodeB = "rabbit@b"
	nodeC = "rabbit@c"
)

// queuesJSON is GET /api/queues/%2F?columns=... as RabbitMQ 3.10.8 answers it for a 3-node
// cluster with node c killed: a quorum queue led by a with c offline, one whose leader was on c
// (leader "" until the election), a classic queue (no leader/members/online), and a queue whose
// statistics are not collected yet (no messages fields).
const queuesJSON = `[
 {"name":"q.led-by-a","type":"quorum","arguments":{"x-queue-type":"quorum"},"messages":5,"messages_dlx":2,"consumers":0,
  "leader":"rabbit@a","members":["rabbit@a","rabbit@b","rabbit@c"],"online":["rabbit@a","rabbit@b"]},
 {"name":"q.no-leader","type":"quorum","arguments":{},"leader":"","members":["rabbit@c","rabbit@a","rabbit@b"],"online":["rabbit@a","rabbit@b"]},
 {"name":"q.classic","type":"classic","arguments":{},"messages":1,"consumers":1,"node":"rabbit@b"},
 {"name":"q.odd","type":"quorum","arguments":{},"leader":null,"members":"","online":[]}
]`

// TestManagementQueuesMembers: the queue view's leader, members and online fields are read as
// RabbitMQ gives them, including the empty forms ("" and null leader, "" members).
func TestManagementQueuesMembers(t *testing.T) {
	var gotQuery string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		gotQuery = r.URL.RawQuery
		_, _ = w.Write([]byte(queuesJSON))
	}))
	defer srv.Close()
	m, err := NewManagement(srv.URL, "/")
	if err != nil {
		t.Fatal(err)
	}
	qs, err := m.Queues(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, col := range []string{"leader", "members", "online", "type"} {
		if !strings.Contains(gotQuery, col) {
			t.Errorf("query %q does not ask for %s", gotQuery, col)
		}
	}
	a := qs["q.led-by-a"]
	if a.Type != "quorum" || a.Leader != nodeA || !slices.Equal(a.Members, []string{nodeA, nodeB, nodeC}) ||
		!slices.Equal(a.Online, []string{nodeA, nodeB}) || a.MessagesDLX != 2 {
		t.Errorf("q.led-by-a = %+v", a)
	}
	if off := a.offline(); !slices.Equal(off, []string{nodeC}) {
		t.Errorf("q.led-by-a offline = %v, want [%s]", off, nodeC)
	}
	if nl := qs["q.no-leader"]; nl.Leader != "" || len(nl.Members) != 3 {
		t.Errorf("q.no-leader = %+v", nl)
	}
	if c := qs["q.classic"]; c.Type != "classic" || c.Leader != "" || c.Members != nil || c.isQuorum() {
		t.Errorf("q.classic = %+v", c)
	}
	if o := qs["q.odd"]; o.Leader != "" || o.Members != nil || o.Online != nil || o.Messages != -1 || o.MessagesDLX != -1 {
		t.Errorf("q.odd = %+v", o)
	}
}

// clusterPlan is a small quorum plan (radix 4, 3 levels: 9 ladder queues) with one bucket and
// a ready queue, and its queues led round-robin by a, b and c, all members online.
func clusterPlan(t *testing.T) (*Plan, map[string]ManagedQueue) {
	t.Helper()
	p := mustPlan(t, delayspec.Spec{Prefix: "cl", Targets: delayspec.Targets{{Name: "orders", Type: "topic"}}, Buckets: delayspec.Delays{30 * time.Second},
		ReadyQueues: delayspec.ReadyQueues{{Queue: "orders.ready", Exchange: "orders", BindingKey: "#"}},
		Ladder:      ttlbuckets.Ladder{Radix: 4, Max: 63 * time.Millisecond}, Plugin: delayspec.PluginOff})
	all := []string{nodeA, nodeB, nodeC}
	qs := map[string]ManagedQueue{}
	for i, q := range p.Queues {
		qs[q.Name] = ManagedQueue{Name: q.Name, Type: "quorum", Leader: all[i%3], Members: all, Online: all, MessagesDLX: 0}
	}
	return p, qs
}

func running(v bool) *bool { return &v }

// TestClusterOfCounts: leaders per node (delay queues and all), members per node, nothing
// degraded when every member is online; then a node down: its queues degraded, named offline.
func TestClusterOfCounts(t *testing.T) {
	p, qs := clusterPlan(t)
	if n := len(p.DelayQueues()); n != 22 {
		t.Fatalf("plan has %d delay queues, want 22 (9 ladder, 6 last-hop, 6 first-hop, 1 bucket)", n)
	}
	nodes := []ClusterNode{{Name: nodeA, Running: running(true)}, {Name: nodeB, Running: running(true)}, {Name: nodeC, Running: running(true)}}
	c := clusterOf(p, qs, nodes, nil)
	delay, lead := 0, 0
	for _, n := range c.Nodes {
		delay += n.DelayQueues
		lead += n.Leaders
		if n.Members != len(p.Queues) {
			t.Errorf("node %s: %d members, want %d", n.Name, n.Members, len(p.Queues))
		}
	}
	if delay != 22 || lead != len(p.Queues) || len(c.Nodes) != 3 || !c.Balanced || len(c.Degraded) != 0 || c.Waits != nil {
		t.Fatalf("cluster = %+v (delay leaders %d, leaders %d)", c, delay, lead)
	}

	// Node c dies: its leaders move to a, the queues have c offline; one queue has no leader yet.
	onlineAB := []string{nodeA, nodeB}
	for name, q := range qs {
		if q.Leader == nodeC {
			q.Leader = nodeA
		}
		q.Online = onlineAB
		qs[name] = q
	}
	stuck := p.DelayQueues()[0].Name
	q := qs[stuck]
	q.Leader = ""
	qs[stuck] = q
	nodes[2].Running = running(false)
	c = clusterOf(p, qs, nodes, nil)
	if len(c.Degraded) != len(p.Queues) {
		t.Errorf("%d degraded queues, want all %d", len(c.Degraded), len(p.Queues))
	}
	if off := c.Offline(); len(off) != 1 || off[nodeC] != len(p.Queues) {
		t.Errorf("Offline() = %v, want %s for every queue", off, nodeC)
	}
	for _, n := range c.Nodes {
		if n.Name == nodeC && (n.Leaders != 0 || n.Running == nil || *n.Running) {
			t.Errorf("node c = %+v, want no leaders, not running", n)
		}
	}
	err := degradedError(c)
	for _, want := range []string{nodeC + " (node down) for", "have no leader (" + stuck, "rabbitmq-queues delete_member", "forget_cluster_node", "rabbitdelay rebalance"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("degradedError = %v, want it to say %q", err, want)
		}
	}
	if !errors.Is(err, ErrUnhealthy) {
		t.Errorf("degradedError is not ErrUnhealthy: %v", err)
	}
}

// TestLeadersBalanced: the tolerance is the larger of 2 and a tenth of the delay queues, among
// running nodes only.
func TestLeadersBalanced(t *testing.T) {
	mk := func(counts ...int) []NodeLeaders {
		var out []NodeLeaders
		for i, c := range counts {
			out = append(out, NodeLeaders{ClusterNode: ClusterNode{Name: fmt.Sprintf("n%d", i)}, DelayQueues: c})
		}
		return out
	}
	down := mk(120, 0, 0)
	down[1].Running, down[2].Running = running(false), running(false)
	tests := []struct {
		name  string
		nodes []NodeLeaders
		want  bool
	}{
		{"even", mk(40, 40, 40), true},
		{"apply's race", mk(41, 40, 39), true},
		{"all on one", mk(120, 0, 0), false},
		{"after a restart", mk(53, 37, 30), false},
		{"within a tenth", mk(46, 40, 34), true},
		{"small topology", mk(2, 1, 0), true},
		{"small, all on one", mk(3, 0, 0), false},
		{"single node", mk(120), true},
		{"other nodes down", down, true},
	}
	for _, tt := range tests {
		if got := LeadersBalanced(tt.nodes); got != tt.want {
			t.Errorf("%s: LeadersBalanced = %v, want %v", tt.name, got, tt.want)
		}
	}
}

// TestDeadLetterWaits: messages_dlx in a queue whose own member is offline, or whose dead-letter
// target (reached through the vhost's bindings) has a member offline, is dead-lettering waiting
// on that node, with the node, the queues and what to do; with every member online it is not.
func TestDeadLetterWaits(t *testing.T) {
	p, qs := clusterPlan(t)
	var bindings []Binding
	for _, b := range p.Bindings {
		bindings = append(bindings, b)
	}
	bucket := p.Queues[len(p.Queues)-1]
	if bucket.Role != RoleBucket {
		t.Fatalf("last queue %s is not the bucket", bucket.Name)
	}
	if got := deadLetterTargets(p, bindings, bucket.DeadLetterExchange); !slices.Equal(got, []string{"cl.parking", "orders.ready"}) {
		t.Fatalf("dead-letter targets of %s = %v, want the parking and ready queues", bucket.Name, got)
	}
	ladder0 := p.Queue
	top, _ := ladder0(p.Names.LadderQueue(0, 1))
	targets := deadLetterTargets(p, bindings, top.DeadLetterExchange)
	if !slices.Contains(targets, p.Names.LadderQueue(1, 3)) || !slices.Contains(targets, "orders.ready") || slices.Contains(targets, top.Name) {
		t.Fatalf("dead-letter targets of %s = %v, want the next level's queues and what D reaches", top.Name, targets)
	}

	q := qs[bucket.Name]
	q.MessagesDLX = 7
	qs[bucket.Name] = q
	if w := deadLetterWaits(p, qs, nil, bindings); w != nil {
		t.Fatalf("every member online: waits %+v, want none (nothing routes them)", w)
	}

	// The ready queue the bucket dead-letters into has node c offline.
	r := qs["orders.ready"]
	r.Online = []string{nodeA, nodeB}
	qs["orders.ready"] = r
	nodes := []ClusterNode{{Name: nodeA, Running: running(true)}, {Name: nodeB, Running: running(true)}, {Name: nodeC, Running: running(false)}}
	w := deadLetterWaits(p, qs, nodes, bindings)
	if len(w) != 1 || w[0].Node != nodeC || w[0].Messages != 7 || len(w[0].Queues) != 1 || w[0].Queues[0] != (WaitingQueue{bucket.Name, 7}) {
		t.Fatalf("waits = %+v, want node c holding %s (7)", w, bucket.Name)
	}
	text := deadLetterWaitText(w[0], "/")
	for _, want := range []string{"dead-lettering waiting on unreachable node rabbit@c (down)", bucket.Name + " (7)",
		"Bring the node back", "rabbitmq-queues delete_member -p '/' <queue> rabbit@c", "rabbitmqctl forget_cluster_node rabbit@c"} {
		if !strings.Contains(text, want) {
			t.Errorf("text does not say %q:\n%s", want, text)
		}
	}
	if strings.Contains(text, "until something routes") || strings.Contains(text, "nothing routes") {
		t.Errorf("text blames routing: %s", text)
	}

	// A ladder queue with its own member on b offline (b running: its replica is not).
	l := qs[top.Name]
	l.MessagesDLX, l.Online = 3, []string{nodeA, nodeC}
	qs[top.Name] = l
	w = deadLetterWaits(p, qs, nodes, bindings)
	if len(w) != 2 || w[0].Node != nodeB || w[0].Queues[0].Name != top.Name || w[1].Node != nodeC {
		t.Fatalf("waits = %+v, want b (%s) and c", w, top.Name)
	}
	if text := w[0].Error(); !strings.Contains(text, "rabbit@b (offline)") {
		t.Errorf("a running node whose replicas are not running: %s", text)
	}
}

// TestRebalanceCommand: the command's queue pattern matches exactly the plan's queues.
func TestRebalanceCommand(t *testing.T) {
	p, _ := clusterPlan(t)
	cmd := p.RebalanceCommand("")
	if !strings.HasPrefix(cmd, "rabbitmq-queues rebalance quorum --vhost-pattern '^(?:/)$' --queue-pattern '^(?:") {
		t.Fatalf("command = %s", cmd)
	}
	pat := cmd[strings.Index(cmd, "--queue-pattern '")+len("--queue-pattern '") : len(cmd)-1]
	re := regexp.MustCompile(pat)
	for _, q := range p.Queues {
		if !re.MatchString(q.Name) {
			t.Errorf("pattern does not match %s", q.Name)
		}
	}
	for _, other := range []string{"cl.parking2", "orders", "xorders.ready", "cl.ladder.00.01.x", "clxladder.00.01", "cl.bucket.5s", "cl.dispatch"} {
		if re.MatchString(other) {
			t.Errorf("pattern matches %s", other)
		}
	}
}

// fakeRebalance is a management API whose quorum queues are all led by a until POST
// /api/rebalance/queues, after which they are led by a, b and c in turn.
type fakeRebalance struct {
	mu     sync.Mutex
	p      *Plan
	lead   map[string]string
	posted int
	status int // answer to the POST
}

func (f *fakeRebalance) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	switch {
	case r.Method == http.MethodPost && r.URL.Path == "/api/rebalance/queues":
		f.posted++
		w.WriteHeader(f.status)
	case r.URL.Path == "/api/nodes":
		_, _ = w.Write([]byte(`[{"name":"rabbit@a","running":true},{"name":"rabbit@b","running":true},{"name":"rabbit@c","running":true}]`))
	case r.URL.Path == "/api/bindings/%2F" || r.URL.Path == "/api/bindings//":
		_, _ = w.Write([]byte(`[]`))
	case strings.HasPrefix(r.URL.Path, "/api/queues/"):
		if f.posted > 0 { // RabbitMQ has moved the leaders: round-robin over a, b and c
			for i, q := range f.p.Queues {
				f.lead[q.Name] = []string{nodeA, nodeB, nodeC}[i%3]
			}
		}
		var parts []string
		for _, q := range f.p.Queues {
			parts = append(parts, fmt.Sprintf(`{"name":%q,"type":"quorum","leader":%q,"members":["rabbit@a","rabbit@b","rabbit@c"],"online":["rabbit@a","rabbit@b","rabbit@c"]}`, q.Name, f.lead[q.Name]))
		}
		_, _ = w.Write([]byte("[" + strings.Join(parts, ",") + "]"))
	default:
		http.NotFound(w, r)
	}
}

// TestRebalance: an unbalanced topology is rebalanced through POST /api/rebalance/queues and the
// report counts the moves; a balanced one, or a dry run, posts nothing; a 401 names the tag.
func TestRebalance(t *testing.T) {
	p, _ := clusterPlan(t)
	newFake := func(status int) (*fakeRebalance, *Management, func()) {
		f := &fakeRebalance{p: p, lead: map[string]string{}, status: status}
		for _, q := range p.Queues {
			f.lead[q.Name] = nodeA
		}
		srv := httptest.NewServer(f)
		m, err := NewManagement(srv.URL, "/")
		if err != nil {
			t.Fatal(err)
		}
		return f, m, srv.Close
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	opts := RebalanceOptions{Poll: time.Millisecond, Settle: 200 * time.Millisecond}

	f, m, done := newFake(http.StatusNoContent)
	rep, err := m.Rebalance(ctx, p, RebalanceOptions{DryRun: true})
	if err != nil || rep.Requested || f.posted != 0 || rep.Reason != "dry run" {
		t.Errorf("dry run: %+v, %v (posted %d)", rep, err, f.posted)
	}
	rep, err = m.Rebalance(ctx, p, opts)
	done()
	if err != nil || !rep.Requested || f.posted != 1 || rep.Moved == 0 {
		t.Fatalf("rebalance: %+v, %v (posted %d)", rep, err, f.posted)
	}
	if !LeadersBalanced(rep.After) || LeadersBalanced(rep.Before) {
		t.Errorf("before %+v, after %+v: want unbalanced, then balanced", rep.Before, rep.After)
	}
	if !strings.Contains(rep.Command, "rabbitmq-queues rebalance quorum") {
		t.Errorf("command = %q", rep.Command)
	}

	// Now balanced: nothing asked.
	f.posted = 0
	srv := httptest.NewServer(f)
	m2, _ := NewManagement(srv.URL, "/")
	rep, err = m2.Rebalance(ctx, p, opts)
	srv.Close()
	if err != nil || rep.Requested || f.posted != 0 || !strings.Contains(rep.Reason, "already balanced") {
		t.Errorf("balanced: %+v, %v (posted %d)", rep, err, f.posted)
	}

	_, m3, done3 := newFake(http.StatusUnauthorized)
	_, err = m3.Rebalance(ctx, p, opts)
	done3()
	if !errors.Is(err, ErrManagement) || !strings.Contains(err.Error(), "administrator tag") || !strings.Contains(err.Error(), "rabbitmq-queues rebalance") {
		t.Errorf("401: %v, want ErrManagement naming the administrator tag and the command", err)
	}
}

// TestPlanLeaderLocator: the delay-queue policy of a quorum topology places new leaders with
// queue-leader-locator balanced; a classic topology's policy has no such key (a classic queue
// on 3.x would then not take the policy at all: the integration tests read the policy the
// broker applies).
func TestPlanLeaderLocator(t *testing.T) {
	for _, qt := range []delayspec.QueueType{delayspec.Quorum, delayspec.Classic} {
		p := mustPlan(t, delayspec.Spec{Prefix: "ll", Targets: delayspec.Targets{{Name: "orders"}}, QueueType: qt, Plugin: delayspec.PluginOff})
		def := p.Policies[0].Definition
		if p.Policies[0].Name != p.Names.DelayQueuesPolicy() {
			t.Fatalf("first policy is %s", p.Policies[0].Name)
		}
		v, ok := def["queue-leader-locator"]
		if qt == delayspec.Quorum && v != LeaderLocatorBalanced {
			t.Errorf("quorum: queue-leader-locator = %v, want %s", v, LeaderLocatorBalanced)
		}
		if qt == delayspec.Classic && ok {
			t.Errorf("classic: the policy has queue-leader-locator %v", v)
		}
	}
}
