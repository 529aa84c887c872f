package declare

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/delaykit/rabbitdelay/internal/admin"
	"github.com/delaykit/rabbitdelay/internal/amqpconn"
	"github.com/delaykit/rabbitdelay/internal/delayspec"
	"github.com/delaykit/rabbitdelay/internal/route"
	"github.com/delaykit/rabbitdelay/plugin"
)

// table writes header and one row per item, aligned; row gives an item's tab-separated cells.
func table[T any](w io.Writer, header string, items []T, row func(T) string) error {
	t := tabwriter.NewWriter(w, 2, 8, 2, ' ', 0)
	fmt.Fprintln(t, header)
	for _, it := range items {
		fmt.Fprintln(t, row(it))
	}
	return t.Flush()
}

// writeJSON writes v as indented JSON and returns the write's error, else err (the command's
// result, which the JSON describes).
func writeJSON(w io.Writer, v any, err error) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return cmp.Or(enc.Encode(v), err)
}

func printList[T any](w io.Writer, indent string, xs []T) {
	for _, x := range xs {
		fmt.Fprintf(w, indent+"%s\n", x)
	}
}

func msText(ms int64) string { return (time.Duration(ms) * time.Millisecond).String() }

func ttlText(ms int64) string {
	if ms == 0 {
		return "-"
	}
	return fmt.Sprintf("%dms (%s)", ms, msText(ms))
}

func specLine(p *admin.Plan) string {
	l := p.Ladder
	shards := ""
	if p.Spec.Shards > 1 {
		shards = fmt.Sprintf(" x %d shards", p.Spec.Shards)
	}
	lastHop := count(p.Queues, func(q admin.Queue) bool { return q.LastHop && q.Shard == 0 })
	firstHop := count(p.Queues, func(q admin.Queue) bool { return q.FirstHop && q.Shard == 0 })
	hopQueues := plural(lastHop, "last-hop queue")
	if firstHop > 0 {
		hopQueues += ", " + plural(firstHop, "first-hop queue")
	}
	return fmt.Sprintf("prefix %s; ladder unit %s, radix %d, max %s, %s (%s, %s and %s%s); %s; queue type %s; plugin %s",
		p.Spec.Prefix, l.Unit, l.Radix, l.Max, l.Order, plural(l.Levels(), "level"), plural(len(route.Queues(l)), "queue"),
		hopQueues, shards,
		plural(len(p.Spec.Buckets), "bucket"), p.Spec.QueueType, p.Spec.Plugin)
}

var planCommand = command{name: "plan", summary: "print every object the topology declares (no connection needed)",
	help:  "Prints every exchange, queue and binding with its arguments, in declaration order.",
	extra: func(s *settings) []option { return []option{outputOption(s)} }, run: cmdPlan}

func cmdPlan(_ context.Context, e *invocation) error {
	p, err := e.plan()
	if err != nil {
		return err
	}
	if e.s.output == "json" {
		return writeJSON(e.stdout, p, nil)
	}
	w := e.stdout
	fmt.Fprintf(w, "# %s\n", specLine(p))
	if p.Spec.Plugin == delayspec.PluginAuto {
		fmt.Fprintf(w, "# plugin auto: %s and its binding are declared only when the broker has the delayed-message plugin\n", p.Names.PluginExchange())
	}
	fmt.Fprintf(w, "\nEXCHANGES (%d)\n", len(p.Exchanges))
	table(w, "NAME\tTYPE\tROLE\tARGUMENTS", p.Exchanges, func(x admin.Exchange) string {
		return fmt.Sprintf("%s\t%s\t%s\t%s", x.Name, x.Type, x.Role, admin.FormatArgs(x.Args))
	})
	fmt.Fprintf(w, "\nQUEUES (%d, all durable)\n", len(p.Queues))
	table(w, "NAME\tROLE\tTTL\tDEAD-LETTER EXCHANGE\tARGUMENTS", p.Queues, func(q admin.Queue) string {
		return fmt.Sprintf("%s\t%s\t%s\t%s\t%s", q.Name, q.Role, ttlText(q.TTL), cmp.Or(q.DeadLetterExchange, "-"), admin.FormatArgs(q.Args))
	})
	fmt.Fprintf(w, "\nBINDINGS (%d, in declaration order)\n", len(p.Bindings))
	table(w, "SOURCE\tDESTINATION\tTYPE\tKEY\tARGUMENTS", p.Bindings, func(b admin.Binding) string {
		return fmt.Sprintf("%s\t%s\t%s\t%s\t%s", b.Source, b.Destination, b.DestinationType, b.RoutingKey, admin.FormatArgs(b.Args))
	})
	fmt.Fprintf(w, "\nPOLICIES (%d, set through the management API)\n", len(p.Policies))
	table(w, "NAME\tAPPLY-TO\tPRIORITY\tDEFINITION\tPATTERN", p.Policies, func(pol admin.Policy) string {
		pattern := pol.Pattern
		if len(pattern) > 80 {
			pattern = pattern[:77] + "..."
		}
		return fmt.Sprintf("%s\t%s\t%d\t%s\t%s", pol.Name, pol.ApplyTo, pol.Priority, admin.FormatArgs(pol.Definition), pattern)
	})
	if len(p.Existing) > 0 {
		fmt.Fprintf(w, "\nMUST ALREADY EXIST (not declared): %s\n", strings.Join(p.Existing, ", "))
	}
	return nil
}

var applyCommand = command{name: "apply", summary: "declare the topology (idempotent)",
	help: "Declares the plan and prints each object it created or found in conflict, and how many were unchanged\n" +
		"(--verbose lists those too); running it again changes nothing. When an object exists with other arguments\n" +
		"it stops (exit 2) naming it; it never deletes or re-creates one. Exchanges the topology binds to must exist\n" +
		"(or be given as name:type). With --management-url it sets the three policies <prefix>.delay-queues,\n" +
		"<prefix>.targets and <prefix>.revoked-retention and exits 1 when a policy in effect breaks a guarantee;\n" +
		"without it, it prints the rabbitmqctl commands to set them.",
	extra: func(s *settings) []option {
		verbose := boolOption("verbose", "also list the objects that are unchanged", flagOf(&s.verbose))
		verbose.short = "v"
		return []option{boolOption("dry-run", "check everything (targets, conflicts) and show what would be created "+
			"(and, with --management-url, removed); change nothing", flagOf(&s.dryRun)), verbose}
	}, run: cmdApply}

func cmdApply(ctx context.Context, e *invocation) error {
	p, m, conn, err := e.connect(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	// Missing targets are bad input: report them before the plugin probe declares anything.
	if err := admin.Preflight(ctx, conn, p, m); err != nil {
		return err
	}
	if p.Spec.Plugin != delayspec.PluginOff {
		avail, err := e.probePlugin(ctx, p, m)
		if err == nil {
			msg := "delayed-message plugin: not available on this broker (the ladder and buckets work without it)"
			if avail {
				msg = "delayed-message plugin: available"
			}
			e.log.Info().Msg(msg)
			p, err = p.ForPlugin(avail)
		}
		// On RabbitMQ 4.3 or later "enable the plugin" cannot be done: say why.
		if why := plugin.ErrUnsupported(admin.ServerVersion(conn)); why != nil && errors.Is(err, admin.ErrPluginUnavailable) {
			return fmt.Errorf("%w: --plugin on, but %v: use --plugin auto or off (the ladder and buckets carry every delay)",
				admin.ErrPluginUnavailable, why)
		} else if err != nil {
			return err
		}
	}
	e.log.Info().Str("spec", specLine(p)).Msg("applying")
	nodes := e.dialNodes(ctx, p)
	defer func() {
		for _, c := range nodes {
			_ = c.Close()
		}
	}()
	rep, err := admin.Apply(ctx, conn, p, admin.ApplyOptions{DryRun: e.s.dryRun, Management: m, Logger: e.log, Nodes: nodes})
	printReport(e.stdout, rep, e.s.dryRun, e.s.verbose, p.Names.LadderPrefix())
	if rep != nil {
		printPolicyProblems(e.stdout, rep.PolicyProblems)
		if m == nil && rep.Count(admin.StateSkipped) > 0 {
			fmt.Fprintf(e.stdout, "\nWARNING: the topology's policies are NOT set: AMQP cannot set policies. Without them a due message that a target "+
				"routes to no queue is not parked (it stalls its delay queue), and other policies can make delays early or delete queues. "+
				"Pass --management-url (a user with the policymaker tag), or run:\n")
			printList(e.stdout, "  ", p.PolicyCommands(e.vhost()))
		}
	}
	if err != nil {
		return err
	}
	verb := "apply"
	if e.s.dryRun {
		verb = "apply --dry-run (nothing declared)"
	}
	fmt.Fprintf(e.stdout, "%s: %d created, %d unchanged", verb, rep.Count(admin.StateCreated), rep.Count(admin.StateUnchanged))
	if n := rep.Count(admin.StateUpdated); n > 0 {
		fmt.Fprintf(e.stdout, ", %s updated", plural(n, "policy"))
	}
	if n := rep.Count(admin.StateBound); n > 0 {
		fmt.Fprintf(e.stdout, ", %s bound (pass --management-url to tell created from unchanged)", plural(n, "binding"))
	}
	if n := rep.Count(admin.StateMissing) + rep.Count(admin.StateUnknown); e.s.dryRun && n > 0 {
		fmt.Fprintf(e.stdout, ", %d to declare", n)
	}
	fmt.Fprintf(e.stdout, " in %s", rep.Elapsed.Round(time.Millisecond))
	// Policies in place and skipped (no management API), for the line a script keeps.
	policies := func(states ...admin.State) int {
		return count(rep.Results, func(r admin.Result) bool { return r.Kind == admin.KindPolicy && slices.Contains(states, r.State) })
	}
	if set, skipped := policies(admin.StateCreated, admin.StateUpdated, admin.StateUnchanged), policies(admin.StateSkipped); skipped > 0 {
		fmt.Fprintf(e.stdout, "; %s NOT set (see the WARNING above)", plural(skipped, "policy"))
	} else if set > 0 && !e.s.dryRun {
		fmt.Fprintf(e.stdout, "; %s in place", plural(set, "policy"))
	}
	fmt.Fprintln(e.stdout)
	return nil
}

// printReport prints a row per object of rep; unless all, the objects left as they were only
// as counts, and the ladder's routine ones (hundreds on a first apply) as counts per state and
// kind.
func printReport(w io.Writer, rep *admin.Report, dryRun, all bool, ladder string) {
	if rep == nil || len(rep.Results) == 0 {
		return
	}
	state := func(r admin.Result) string {
		if dryRun {
			switch r.State {
			case admin.StateMissing:
				return "would create"
			case admin.StateUnknown:
				return "would bind"
			case admin.StateDeleted:
				return "would delete"
			}
		}
		return string(r.State)
	}
	routine := []admin.State{admin.StateCreated, admin.StateBound, admin.StateMissing, admin.StateUnknown}
	type stateKind struct {
		state string
		kind  admin.Kind
	}
	var rows []admin.Result
	var ladderStates []string // in order of appearance
	ladderCounts := map[stateKind]int{}
	for _, r := range rep.Results {
		switch {
		case all:
		case r.State == admin.StateUnchanged || r.State == admin.StateNotDeclared:
			continue
		case ladder != "" && strings.HasPrefix(r.Name, ladder) && slices.Contains(routine, r.State):
			if st := state(r); !slices.Contains(ladderStates, st) {
				ladderStates = append(ladderStates, st)
			}
			ladderCounts[stateKind{state(r), r.Kind}]++
			continue
		}
		rows = append(rows, r)
	}
	var hidden []string
	for _, st := range []admin.State{admin.StateUnchanged, admin.StateNotDeclared} {
		if n := rep.Count(st); n > 0 && !all {
			hidden = append(hidden, plural(n, "object")+" "+string(st))
		}
	}
	if len(hidden) > 0 {
		defer fmt.Fprintf(w, "%s, not listed (--verbose lists them)\n", strings.Join(hidden, ", "))
	}
	for _, st := range ladderStates {
		var parts []string
		for _, k := range []admin.Kind{admin.KindExchange, admin.KindQueue, admin.KindBinding} {
			if n := ladderCounts[stateKind{st, k}]; n > 0 {
				parts = append(parts, plural(n, string(k)))
			}
		}
		defer fmt.Fprintf(w, "%s: %s of the ladder (%s*; --verbose lists them)\n", st, strings.Join(parts, ", "), ladder)
	}
	if len(rows) > 0 {
		table(w, "STATE\tKIND\tNAME\tDETAIL", rows, func(r admin.Result) string {
			return fmt.Sprintf("%s\t%s\t%s\t%s", state(r), r.Kind, r.Name, r.Detail)
		})
	}
}

var teardownCommand = command{name: "teardown", summary: "delete the delay topology (never the target exchanges)",
	help: "Deletes the delay queues, the parking queue and the topology's exchanges, and lists what it deleted.\n" +
		"Refuses (exit 1, nothing deleted) while any of these queues holds messages, unless --force.\n" +
		"Target exchanges are never touched; ready queues only with --ready-queues. Messages the plugin holds are\n" +
		"still delivered if an exchange of its name exists when they fall due.",
	extra: func(s *settings) []option {
		return []option{boolOption("force", "delete queues that hold messages, with their messages", flagOf(&s.force)),
			boolOption("ready-queues", "also delete the ready queues (same emptiness rule)", flagOf(&s.readyQueues)),
			boolOption("dry-run", "show what would be deleted; delete nothing", flagOf(&s.dryRun))}
	}, run: cmdTeardown}

func cmdTeardown(ctx context.Context, e *invocation) error {
	p, m, conn, err := e.connect(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	rep, err := admin.Teardown(ctx, conn, p, admin.TeardownOptions{
		Force: e.s.force, ReadyQueues: e.s.readyQueues, DryRun: e.s.dryRun, Management: m, Logger: e.log})
	printReport(e.stdout, rep, e.s.dryRun, true, "")
	if err != nil {
		return err
	}
	targets := mapList(p.Spec.Targets, func(t delayspec.Target) string { return t.Name })
	verb, deleted := "teardown", "deleted"
	if e.s.dryRun {
		verb, deleted = "teardown --dry-run (nothing deleted)", "to delete"
	}
	fmt.Fprintf(e.stdout, "%s: %d %s, %d absent; target exchanges left untouched: %s\n",
		verb, rep.Count(admin.StateDeleted), deleted, rep.Count(admin.StateAbsent), strings.Join(targets, ", "))
	for _, r := range rep.Results {
		if r.Kind == admin.KindExchange && r.Name == p.Names.PluginExchange() && r.State == admin.StateDeleted {
			fmt.Fprintf(e.stdout, "note: messages already held by the delayed-message plugin are NOT removed by deleting %s: "+
				"the plugin still delivers them when they fall due if an exchange of that name exists by then.\n", r.Name)
		}
	}
	if m == nil {
		fmt.Fprintf(e.stdout, "note: only this specification's objects were looked for; pass --management-url to list other objects named "+
			"like them (%s.ladder.*, %s.bucket.*, ...: an earlier ladder or bucket list) that teardown leaves in place.\n", p.Spec.Prefix, p.Spec.Prefix)
	}
	printUnplanned(e.stdout, p.Names, rep.Unplanned, "left in place", false)
	return nil
}

func printPolicyProblems(w io.Writer, problems []admin.PolicyProblem) {
	if len(problems) == 0 {
		return
	}
	type group struct {
		first   admin.PolicyProblem
		objects []string
	}
	var order []string
	groups := map[string]*group{}
	for _, pp := range problems {
		k := fmt.Sprintf("%s|%v|%s|%v|%s|%v|%s", pp.Policy, pp.Operator, pp.Key, pp.Value, pp.Breaks, pp.Warning, pp.Kind)
		g, ok := groups[k]
		if !ok {
			g = &group{first: pp}
			groups[k] = g
			order = append(order, k)
		}
		g.objects = append(g.objects, pp.Object)
	}
	fmt.Fprintf(w, "\nPOLICY PROBLEMS (%d):\n", len(problems))
	for _, k := range order {
		g := groups[k]
		level := "ERROR"
		if g.first.Warning {
			level = "WARNING"
		}
		fmt.Fprintf(w, "  %s %s\n", level, g.first.Error())
		if n := len(g.objects); n > 1 {
			shown := g.objects
			if n > 6 {
				shown = append(append([]string{}, g.objects[:6]...), fmt.Sprintf("... %d more", n-6))
			}
			fmt.Fprintf(w, "    the same on %d %ss: %s\n", n, g.first.Kind, strings.Join(shown, ", "))
		}
	}
}

func printMismatched(w io.Writer, mm []admin.Mismatch) {
	if len(mm) == 0 {
		return
	}
	fmt.Fprintf(w, "\nNOT AS SPECIFIED: %s of existing exchanges and queues %s from the specification (typically an object deleted and "+
		"declared again with another type, flag or argument); it changes how messages are routed, kept or dead-lettered, and RabbitMQ "+
		"cannot change it in place: delete the object (management UI or API) and run apply, which declares it again as specified",
		plural(len(mm), "property"), map[bool]string{true: "differs", false: "differ"}[len(mm) == 1])
	if slices.ContainsFunc(mm, func(m admin.Mismatch) bool { return m.Kind == admin.KindQueue }) {
		fmt.Fprint(w, " (deleting a queue deletes the messages it holds: move them elsewhere first)")
	}
	fmt.Fprintln(w, ":")
	printList(w, "  ", mm)
}

// printUnplanned lists objects with the topology's prefix that the specification does not
// name, and what to do. live is status's case: tearing down the specification that declared
// them would also delete the objects it shares with the topology in use.
func printUnplanned(w io.Writer, names delayspec.Names, objs []admin.Unplanned, what string, live bool) {
	if len(objs) == 0 {
		return
	}
	verb := map[bool]string{true: "is", false: "are"}[len(objs) == 1]
	fix := "run `rabbitdelay teardown` with the specification that declared them, or delete them by hand once their queues are empty"
	if live {
		fix = "delete them by hand (management UI or API; rabbitmqctl delete_queue for a queue) once their queues are empty, " +
			"not with `rabbitdelay teardown` of the earlier specification, which would also delete the objects this one shares with it"
	}
	fmt.Fprintf(w, "\n%s named like this topology's own %s %s (an earlier specification's, e.g. another ladder or bucket list, "+
		"or a target no longer named): %s:\n", plural(len(objs), "object"), verb, what, fix)
	printList(w, "  ", objs)
}

func (e *invocation) connect(ctx context.Context) (*admin.Plan, *admin.Management, *amqp.Connection, error) {
	p, err := e.plan()
	if err != nil {
		return nil, nil, nil, err
	}
	m, err := e.management()
	if err != nil {
		return nil, nil, nil, err
	}
	conn, err := e.dial(ctx)
	if err != nil {
		return nil, nil, nil, err
	}
	return p.ForBroker(admin.ServerMajor(conn)), m, conn, nil
}

// dialNodes opens one connection per URL of the address list, for apply to place the ladder's
// shards on different nodes; a node that does not answer is left out (logged).
func (e *invocation) dialNodes(ctx context.Context, p *admin.Plan) []*amqp.Connection {
	if p.Spec.Shards <= 1 || e.s.dryRun {
		return nil
	}
	urls := e.s.vars.Conn().URLs()
	if len(urls) < 2 {
		e.log.Warn().Int("shards", p.Spec.Shards).Msg("shards of the ladder with one URL: new ladder queues lead from the node apply is connected to; " +
			"list every node of the cluster in AMQPDELAY_URL (--url) so that apply places the shards of each queue on different nodes")
		return nil
	}
	var nodes []*amqp.Connection
	for _, u := range urls {
		c := e.s.vars.Conn()
		c.URL = u
		conn, err := amqpconn.Dial(ctx, c, "rabbitdelay-declare-place")
		if err != nil {
			e.log.Warn().Err(err).Str("url", amqpconn.Redact(u)).Msg("cannot reach this node: no shard of the ladder is placed on it")
			continue
		}
		nodes = append(nodes, conn)
	}
	return nodes
}
