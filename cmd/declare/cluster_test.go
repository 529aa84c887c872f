package declare

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/delaykit/rabbitdelay/internal/admin"
	"github.com/delaykit/rabbitdelay/internal/delayspec"
)

// TestPrintCluster: status prints the leaders per node, flags members offline with the down
// node, and names dead-lettering waiting on an unreachable node with what to do; a single node
// prints nothing.
func TestPrintCluster(t *testing.T) {
	down, up := false, true
	rep := &admin.StatusReport{Cluster: &admin.ClusterStatus{
		Nodes: []admin.NodeLeaders{
			{ClusterNode: admin.ClusterNode{Name: "rabbit@a", Running: &up}, DelayQueues: 70, Leaders: 71, Members: 122},
			{ClusterNode: admin.ClusterNode{Name: "rabbit@b", Running: &up}, DelayQueues: 50, Leaders: 51, Members: 122},
			{ClusterNode: admin.ClusterNode{Name: "rabbit@c", Running: &down}, Members: 122},
		},
		Degraded: []admin.DegradedQueue{{Queue: "p.ladder.00.01", Leader: "", Members: []string{"rabbit@a", "rabbit@b", "rabbit@c"}, Offline: []string{"rabbit@c"}}},
		Waits: []admin.DeadLetterWait{{Node: "rabbit@c", Running: &down, Messages: 4,
			Queues: []admin.WaitingQueue{{Name: "p.bucket.5000ms", MessagesDLX: 4}}}},
	}}
	var out bytes.Buffer
	printCluster(&out, rep, "/")
	for _, want := range []string{"CLUSTER: 3 nodes", "rabbit@a", "70", "DOWN", "UNBALANCED", "rabbitdelay rebalance",
		"MEMBERS OFFLINE: 1 of the topology's quorum queues", "1 of them NO LEADER", "rabbit@c (node down): offline member of 1 queues",
		"DEAD-LETTERING WAITING ON AN UNREACHABLE NODE: rabbit@c (DOWN): 4 messages in dead-letter state in p.bucket.5000ms (4)",
		"Bring the node back", "rabbitmq-queues delete_member -p / <queue> rabbit@c", "rabbitmqctl forget_cluster_node rabbit@c"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("status does not say %q:\n%s", want, out.String())
		}
	}
	if strings.Contains(out.String(), "nothing routes") {
		t.Errorf("a wait on a node is blamed on routing:\n%s", out.String())
	}
	out.Reset()
	rep.Cluster.Nodes = rep.Cluster.Nodes[:1]
	printCluster(&out, rep, "/")
	if out.Len() != 0 {
		t.Errorf("a single node prints a cluster section:\n%s", out.String())
	}
	q := admin.QueueStatus{Leader: "", Members: []string{"a", "b", "c"}, Online: []string{"a", "b"}}
	if got := leaderText(q); got != "NONE (2/3)  <-- members offline" {
		t.Errorf("leaderText = %q", got)
	}
	if got := leaderText(admin.QueueStatus{}); got != "-" {
		t.Errorf("leaderText of a classic queue = %q", got)
	}
}

// TestRebalanceNeedsManagement: without --management-url, rebalance is a usage error that
// prints the rabbitmq-queues command to run instead.
func TestRebalanceNeedsManagement(t *testing.T) {
	var out, errb bytes.Buffer
	e := &invocation{stdout: &out, stderr: &errb}
	e.s.vars.Targets = delayspec.Targets{{Name: "orders"}}
	err := cmdRebalance(context.Background(), e)
	var ue usageError
	if !errors.As(err, &ue) || !strings.Contains(err.Error(), "--management-url") || !strings.Contains(err.Error(), "rabbitmq-queues rebalance quorum") {
		t.Fatalf("rebalance without the management API: %v", err)
	}
}
