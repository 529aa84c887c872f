package declare

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/delaykit/rabbitdelay/internal/admin"
	"github.com/delaykit/rabbitdelay/internal/text"
)

func clustered(rep *admin.StatusReport) bool { return rep.Cluster != nil && len(rep.Cluster.Nodes) > 1 }

// leaderText is "rabbit@b (2/3)", "NONE (1/3)", or "-" for a queue without members.
func leaderText(q admin.QueueStatus) string {
	if len(q.Members) == 0 {
		return "-"
	}
	s := fmt.Sprintf("%s (%d/%d)", cmp.Or(q.Leader, "NONE"), len(q.Online), len(q.Members))
	if len(q.Online) < len(q.Members) {
		s += "  <-- members offline"
	}
	return s
}

func runningText(r *bool) string {
	switch {
	case r == nil:
		return "?"
	case *r:
		return "running"
	}
	return "DOWN"
}

// printCluster prints the leaders per node, the queues with members offline or no leader, and
// dead-lettering waiting on an unreachable node.
func printCluster(w io.Writer, rep *admin.StatusReport, vhost string) {
	if !clustered(rep) {
		return
	}
	c := rep.Cluster
	fmt.Fprintf(w, "\nCLUSTER: %d nodes; leaders of the topology's quorum queues per node\n", len(c.Nodes))
	table(w, "NODE\tSTATE\tDELAY QUEUES LED\tQUORUM QUEUES LED\tMEMBER OF", c.Nodes, func(n admin.NodeLeaders) string {
		return fmt.Sprintf("%s\t%s\t%d\t%d\t%d", n.Name, runningText(n.Running), n.DelayQueues, n.Leaders, n.Members)
	})
	if c.Balanced {
		fmt.Fprintln(w, "leaders: balanced over the running nodes")
	} else {
		fmt.Fprintln(w, "leaders: UNBALANCED: one node does most of the topology's work (leaders stay where they moved after a node "+
			"failure or restart); run `rabbitdelay rebalance`")
	}
	if c.Shards > 1 {
		if len(c.SharedLeaders) == 0 {
			fmt.Fprintf(w, "shards of the ladder: %d; the shards of each ladder queue lead from different nodes\n", c.Shards)
		} else {
			fmt.Fprintf(w, "shards of the ladder: %d; %d ladder queues have shards SHARING a leader node (that node dead-letters their share of a burst too):\n",
				c.Shards, len(c.SharedLeaders))
			for i, s := range c.SharedLeaders {
				if i == 6 {
					fmt.Fprintf(w, "  ... %d more\n", len(c.SharedLeaders)-6)
					break
				}
				fmt.Fprintf(w, "  %s: %s\n", s.Node, strings.Join(s.Queues, ", "))
			}
		}
	}
	if len(c.Degraded) > 0 {
		noLeader := count(c.Degraded, admin.DegradedQueue.NoLeader)
		fmt.Fprintf(w, "\nMEMBERS OFFLINE: %d of the topology's quorum queues have fewer members online than members", len(c.Degraded))
		if noLeader > 0 {
			fmt.Fprintf(w, ", %d of them NO LEADER (they move nothing until one is elected)", noLeader)
		}
		fmt.Fprintln(w, ":")
		for n, k := range c.Offline() {
			state := "its replicas are not running"
			if slices.ContainsFunc(c.Nodes, func(cn admin.NodeLeaders) bool { return cn.Name == n && cn.Running != nil && !*cn.Running }) {
				state = "node down"
			}
			fmt.Fprintf(w, "  %s (%s): offline member of %d queues\n", n, state, k)
		}
		fmt.Fprintln(w, "  a quorum queue works while a majority of its members is online; the next node lost can stop it. Bring the node back; "+
			"if it is gone for good, remove it properly (`rabbitmq-queues delete_member` per queue, `rabbitmqctl forget_cluster_node`) "+
			"and add a replacement (`rabbitmq-queues grow`). Once it is back, run `rabbitdelay rebalance`.")
	}
	for _, wt := range c.Waits {
		fmt.Fprintf(w, "\nDEAD-LETTERING WAITING ON AN UNREACHABLE NODE: %s (%s): %d messages in dead-letter state in %s\n",
			wt.Node, runningText(wt.Running), wt.Messages, text.Join(wt.Queues, ", "))
		fmt.Fprintf(w, "  they cannot move on while %s, a member of these queues or of the queues they dead-letter into, is unreachable. "+
			"Bring the node back: they then move on by themselves. If it is gone for good, remove it properly: "+
			"`rabbitmq-queues delete_member -p %s <queue> %s` per quorum queue, then `rabbitmqctl forget_cluster_node %s` "+
			"(on RabbitMQ 3.10.8 forget_cluster_node alone did not release messages already in dead-letter state).\n",
			wt.Node, vhost, wt.Node, wt.Node)
	}
}

func cmdRebalance(ctx context.Context, e *invocation) error {
	p, m, err := e.managed(func(p *admin.Plan) string {
		return "rebalance needs the management API: pass --management-url (a user with the administrator tag), " +
			"or run on a cluster node: " + p.RebalanceCommand(e.vhost())
	})
	if err != nil {
		return err
	}
	rep, err := m.Rebalance(ctx, p, admin.RebalanceOptions{DryRun: e.s.dryRun})
	if rep == nil {
		return err
	}
	if e.s.output == "json" {
		return writeJSON(e.stdout, rep, err)
	}
	w := e.stdout
	fmt.Fprintf(w, "# %s\n", specLine(p))
	printLeaders(w, "before", rep.Before)
	switch {
	case rep.Requested:
		fmt.Fprintln(w, "\nasked RabbitMQ to rebalance (POST /api/rebalance/queues): it moves the leaders of every replicated queue of "+
			"every vhost, not only this topology's, one Raft leadership transfer per queue (a short pause for that queue, nothing lost)")
		if rep.After != nil {
			printLeaders(w, "after", rep.After)
		}
		fmt.Fprintf(w, "%d of the topology's quorum queues have a new leader\n", rep.Moved)
	default:
		fmt.Fprintf(w, "\nnothing moved: %s\n", rep.Reason)
	}
	fmt.Fprintf(w, "to move only this topology's queues, run on a cluster node:\n  %s\n", rep.Command)
	if p.Spec.Shards > 1 && rep.Requested {
		fmt.Fprintln(w, "NOTE: RabbitMQ's rebalance does not know the shards of the ladder: shards of one queue may now share a leader node; "+
			"`rabbitdelay status` lists them")
	}
	return err
}

func printLeaders(w io.Writer, when string, nodes []admin.NodeLeaders) {
	fmt.Fprintf(w, "\nleaders %s:\n", when)
	table(w, "NODE\tSTATE\tDELAY QUEUES LED\tQUORUM QUEUES LED", nodes, func(n admin.NodeLeaders) string {
		return fmt.Sprintf("%s\t%s\t%d\t%d", n.Name, runningText(n.Running), n.DelayQueues, n.Leaders)
	})
}

var rebalanceCommand = command{name: "rebalance", summary: "spread the leaders of quorum queues over the cluster's running nodes (management API)",
	help: "Reads where the leaders of the topology's quorum queues are (management API) and, when the delay queues'\n" +
		"leaders are unbalanced, asks RabbitMQ to rebalance (POST /api/rebalance/queues, a user with the administrator\n" +
		"tag), then prints the leaders per node before and after. That moves the leaders of every replicated queue of\n" +
		"every vhost; to move only the topology's, run the printed `rabbitmq-queues rebalance quorum` command on a\n" +
		"cluster node instead. Run it once a failed node is back. --dry-run only shows the leaders and the command.",
	extra: func(s *settings) []option {
		return []option{boolOption("dry-run", "show the leaders per node and the command; move nothing", flagOf(&s.dryRun)), outputOption(s)}
	}, run: cmdRebalance}
