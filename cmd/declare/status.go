package declare

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"

	"github.com/delaykit/rabbitdelay/internal/admin"
	"github.com/delaykit/rabbitdelay/internal/delayspec"
	"github.com/delaykit/rabbitdelay/internal/text"
	"github.com/delaykit/rabbitdelay/plugin"
)

type statusView struct {
	p      *admin.Plan
	rep    *admin.StatusReport
	err    error // the problems, nil when none
	plugin string
	vhost  string
	queues bool // --queues: one line per queue
}

// pluginText is the plugin line of status; on RabbitMQ 4.3 or later, which cannot load the
// plugin, it says the ladder carries every delay.
func pluginText(mode delayspec.PluginMode, avail bool, probeErr error, version string) string {
	noPlugin := plugin.ErrUnsupported(version)
	switch {
	case mode == delayspec.PluginOff:
		return "off (--plugin off)"
	case probeErr != nil:
		return "unknown (" + probeErr.Error() + ")"
	case avail:
		return "available"
	case noPlugin != nil && mode == delayspec.PluginOn:
		return fmt.Sprintf("NOT AVAILABLE, but --plugin on: %v; use --plugin auto or off: the ladder and buckets carry every delay", noPlugin)
	case noPlugin != nil:
		return fmt.Sprintf("unavailable: %v; the ladder and buckets carry every delay", noPlugin)
	case mode == delayspec.PluginOn:
		return "NOT AVAILABLE, but --plugin on"
	}
	return "not available (the ladder and buckets work without it)"
}

func printStatus(w io.Writer, v statusView) {
	p, rep := v.p, v.rep
	fmt.Fprintf(w, "# %s\n", specLine(p))
	fmt.Fprintf(w, "# RabbitMQ %s, vhost %s; plugin: %s\n", cmp.Or(rep.Version, "unknown version"), v.vhost, v.plugin)
	printProblems(w, v)

	if rep.NotDeclared {
		fmt.Fprintf(w, "\nnothing to show: the topology is not declared (none of its own exchanges and queues exist); %s missing "+
			"(status --json lists them)\n", plural(len(rep.Missing), "object"))
		fmt.Fprintln(w, "\nstatus: NOT OK (exit 1): the topology is not declared: run `rabbitdelay apply` with the same settings")
		return
	}

	unknown := false // a count without a figure yet
	count := func(n int64) string {
		if n < 0 {
			unknown = true
			return "?"
		}
		return strconv.FormatInt(n, 10)
	}
	printParking(w, p, rep)
	if v.queues {
		printQueueTable(w, rep, count)
	} else {
		printLevels(w, rep, count)
	}
	switch {
	case unknown && rep.StatsDisabled:
		fmt.Fprintln(w, "?: the management API collects no queue statistics (rabbitmq_management_agent.disable_metrics_collector is "+
			"true): these counts are never known")
	case unknown:
		fmt.Fprintln(w, statusUnknownNote)
	}
	printTargets(w, p, rep)
	printReady(w, rep, count)
	printObjects(w, rep)
	printCluster(w, rep, v.vhost)
	printUnplanned(w, p.Names, rep.Unplanned, "not in this specification", true)
	printRecord(w, p, rep)
	if v.err == nil {
		fmt.Fprintln(w, "\nstatus: OK, no problem found")
	} else {
		fmt.Fprintln(w, "\nstatus: NOT OK (exit 1): the problems are at the top; the reasons, one a line, are on standard error")
	}
}

func printParking(w io.Writer, p *admin.Plan, rep *admin.StatusReport) {
	park := rep.Parking()
	parked := strconv.Itoa(park.Ready) + " ready"
	switch {
	case !park.Exists:
		parked = "MISSING"
	case rep.Management && park.Messages >= 0:
		parked = fmt.Sprintf("%s (%d ready)", plural(int(park.Messages), "message"), park.Ready)
	}
	fmt.Fprintf(w, "\nparking queue %s: %s\n", park.Name, parked)
	if park.Ready > 0 || park.Messages > 0 {
		fmt.Fprintln(w, "  it is not empty: each message there reached no handler, or failed its handler for good. It holds due messages "+
			"whose target is not bound to the dispatch exchange or routed them to no queue (header rabbitdelay-target names it), "+
			"messages a quorum ready queue gave up on (x-death reason delivery_limit, or rejected without requeue), and messages the "+
			"consumer package parked (header rabbitdelay-park-reason; rabbitdelay-queue names the queue; consumer.Replay sends them "+
			"back). Read them with acknowledgements. Status reports no problem for that alone.")
	}
	if rep.PluginMessagesDelayed >= 0 {
		fmt.Fprintf(w, "plugin exchange %s: holds %s (the plugin's messages_delayed; they live in no queue)\n",
			p.Names.PluginExchange(), plural(int(rep.PluginMessagesDelayed), "delayed message"))
	}
}

func printObjects(w io.Writer, rep *admin.StatusReport) {
	present := count(rep.Exchanges, func(x admin.ExchangeStatus) bool { return x.Exists })
	fmt.Fprintf(w, "\nexchanges: %d of %d present\n", present, len(rep.Exchanges))
	if rep.Management {
		present = count(rep.Bindings, func(b admin.BindingStatus) bool { return b.Exists })
		fmt.Fprintf(w, "bindings: %d of %d present\n", present, len(rep.Bindings))
	} else {
		fmt.Fprintln(w, "bindings: not checked (AMQP cannot list bindings; pass --management-url); messages_dlx: not shown (needs --management-url)")
		fmt.Fprintln(w, "types, flags and arguments of the exchanges and queues: not compared (AMQP cannot read them; pass --management-url)")
	}
	if len(rep.RetryBindings) > 0 {
		qs := mapList(rep.RetryBindings, func(b admin.Binding) string { return b.Destination })
		fmt.Fprintf(w, "consumers' retry bindings (queues outside the specification, bound to %s by their own name): %s\n",
			rep.RetryBindings[0].Source, strings.Join(qs, ", "))
	}
	if rep.Management {
		for _, ps := range rep.Policies {
			st := "set"
			switch {
			case !ps.Exists:
				st = "MISSING"
			case !ps.Current:
				st = "DIFFERS from the specification"
			}
			fmt.Fprintf(w, "policy %s (%s, priority %d): %s\n", ps.Name, ps.ApplyTo, ps.Priority, st)
		}
	} else {
		fmt.Fprintln(w, "policies: not checked (needs --management-url)")
	}
}

func printRecord(w io.Writer, p *admin.Plan, rep *admin.StatusReport) {
	if !rep.RecordDiffers {
		return
	}
	fmt.Fprintf(w, "\nspec record: the topology in use (stream %s, read by publishers and consumers) was applied with another "+
		"specification than this one: run apply with this one to put it in use, or status with the applied one\n", p.Names.SpecStream())
	for _, t := range rep.RecordOnlyTargets {
		fmt.Fprintf(w, "  target %q is in the applied specification and not in this one: if %q is still a target, add it to the "+
			"specification (AMQPDELAY_TARGETS, --target: a mistyped or left-out name?) and run apply\n", t, t)
	}
}

func printProblems(w io.Writer, v statusView) {
	rep := v.rep
	if v.err == nil {
		fmt.Fprintln(w, "\nproblems: none")
		return
	}
	fmt.Fprintln(w, "\nPROBLEMS:")
	if rep.NotDeclared {
		fmt.Fprintf(w, "\nNOT DECLARED: none of the topology's own exchanges and queues exist in vhost %s (never applied here, or torn "+
			"down). Declare it with `rabbitdelay apply` and the same settings (AMQPDELAY_* variables or flags); `rabbitdelay plan` shows what "+
			"it declares.\n", v.vhost)
	}
	if len(rep.MissingExchanges) > 0 {
		fmt.Fprintf(w, "\nMISSING EXCHANGES: %s that the topology binds to but does not declare (targets given without a type, "+
			"ready queues' exchanges); declare them, give a target as name:type so apply declares it, or correct a mistyped name "+
			"in the specification; apply declares nothing until they exist:\n", plural(len(rep.MissingExchanges), "exchange"))
		printList(w, "  ", rep.MissingExchanges)
	}
	if len(rep.Missing) > 0 && !rep.NotDeclared {
		fmt.Fprintf(w, "\nINCOMPLETE: %s missing (run `rabbitdelay apply`):\n", plural(len(rep.Missing), "object"))
		shown := rep.Missing
		if len(shown) > 20 && !v.queues {
			shown = shown[:20]
		}
		printList(w, "  ", shown)
		if n := len(rep.Missing) - len(shown); n > 0 {
			fmt.Fprintf(w, "  ... %d more (--queues or --json lists them all)\n", n)
		}
	}
	if len(rep.ConsumedDelayQueues) > 0 {
		fmt.Fprintf(w, "\nCONSUMERS ON DELAY QUEUES: %s\n", strings.Join(rep.ConsumedDelayQueues, ", "))
		fmt.Fprintln(w, "  they take delayed messages BEFORE they are due. Stop them; consume from the target's queues instead.")
	}
	if len(rep.DeadLettering) > 0 {
		fmt.Fprintf(w, "\nDEAD-LETTER STATE: messages whose dead-lettering has not completed (messages_dlx, at two readings 6 s apart): %s\n",
			text.Join(rep.DeadLettering, ", "))
		fmt.Fprintln(w, "  cause: every member of these queues and of the queues they dead-letter into is online, so nothing routes them (a target "+
			"with no binding for their routing key, and no alternate exchange: see the policy problems) or the queue they go to refuses them. "+
			"RabbitMQ retries them forever.")
	}
	for _, l := range rep.RequeueLoops {
		fmt.Fprintf(w, "\nREQUEUE LOOP in %s %s\n  %s\n", l.Kind(), l, l.Advice(v.p.Names.Parking()))
	}
	printMismatched(w, rep.Mismatched)
	if len(rep.UnplannedBindings) > 0 {
		fmt.Fprintf(w, "\nUNPLANNED BINDINGS: %s on this topology's exchanges and queues not in the specification "+
			"(an earlier specification's, e.g. a ready queue's old key, or added by hand); they change where messages go: unbind them "+
			"(management UI or API) or add them to the specification:\n", plural(len(rep.UnplannedBindings), "binding"))
		printList(w, "  ", rep.UnplannedBindings)
	}
	printPolicyProblems(w, rep.PolicyProblems)
	if rep.StatsDisabled {
		fmt.Fprintln(w, "\nNO QUEUE STATISTICS: the management API collects none (rabbitmq_management_agent.disable_metrics_collector is true), "+
			"so status cannot see messages stuck in a delay queue's dead-letter state; set the collector back on")
	}
	// Problems printCluster details later, so that every problem is in the first screen.
	if c := rep.Cluster; c != nil && (len(c.Degraded) > 0 || len(c.Waits) > 0) {
		fmt.Fprintln(w)
		if n := len(c.Degraded); n > 0 {
			fmt.Fprintf(w, "MEMBERS OFFLINE: %s of the topology have fewer members online than members (CLUSTER, below)\n",
				plural(n, "quorum queue"))
		}
		for _, wt := range c.Waits {
			fmt.Fprintf(w, "DEAD-LETTERING WAITING ON AN UNREACHABLE NODE: %s: %s (CLUSTER, below)\n", wt.Node,
				plural(int(wt.Messages), "message"))
		}
	}
}

type level struct {
	name                       string
	rank                       int64 // ladder levels by level, then buckets by TTL
	queues, missing, consumers int
	messages, dlx              int64 // -1: unknown
	minTTL, maxTTL             int64
}

func (l *level) add(q admin.QueueStatus, management bool) {
	l.queues++
	if l.minTTL == 0 || q.TTL < l.minTTL {
		l.minTTL = q.TTL
	}
	l.maxTTL = max(l.maxTTL, q.TTL)
	if !q.Exists {
		l.missing++
		return
	}
	l.consumers += q.Consumers
	if !management {
		l.messages = addCount(l.messages, int64(q.Ready))
		return
	}
	l.messages, l.dlx = addCount(l.messages, q.Messages), addCount(l.dlx, q.MessagesDLX)
}

// addCount adds b to a, where -1 is unknown and makes the sum unknown.
func addCount(a, b int64) int64 {
	if a < 0 || b < 0 {
		return -1
	}
	return a + b
}

func printLevels(w io.Writer, rep *admin.StatusReport, count func(int64) string) {
	var order []string
	levels := map[string]*level{}
	for _, q := range rep.Queues {
		var key string
		var rank int64
		switch q.Role {
		case admin.RoleLadder:
			key, rank = fmt.Sprintf("ladder level %d", q.Level), int64(q.Level)-1<<40
		case admin.RoleBucket:
			key, rank = "bucket "+msText(q.TTL), q.TTL
		default:
			continue
		}
		l := levels[key]
		if l == nil {
			l = &level{name: key, rank: rank}
			levels[key] = l
			order = append(order, key)
		}
		l.add(q, rep.Management)
	}
	if len(order) == 0 {
		return
	}
	slices.SortStableFunc(order, func(a, b string) int { return cmp.Compare(levels[a].rank, levels[b].rank) })
	fmt.Fprintln(w)
	header := "DELAY QUEUES\tQUEUES\tREADY\tCONSUMERS\tTTL"
	if rep.Management {
		header = "DELAY QUEUES\tQUEUES\tMESSAGES\tDEAD-LETTER STATE\tCONSUMERS\tTTL"
	}
	table(w, header, order, func(k string) string {
		l := levels[k]
		qs := strconv.Itoa(l.queues)
		if l.missing > 0 {
			qs = fmt.Sprintf("%d (%d MISSING)", l.queues, l.missing)
		}
		cons := strconv.Itoa(l.consumers)
		if l.consumers > 0 {
			cons += "  <-- WARNING: consumer on a delay queue"
		}
		cells := []string{l.name, qs, count(l.messages)}
		if rep.Management {
			cells = append(cells, count(l.dlx))
		}
		ttl := msText(l.minTTL)
		if l.minTTL != l.maxTTL {
			ttl += " - " + msText(l.maxTTL)
		}
		return strings.Join(append(cells, cons, ttl), "\t")
	})
	fmt.Fprintln(w, "(--queues: one line per queue)")
}

func printQueueTable(w io.Writer, rep *admin.StatusReport, count func(int64) string) {
	fmt.Fprintln(w)
	leaders := clustered(rep) // a LEADER column: the node and the members online
	header := "QUEUE\tROLE\tTTL\tREADY\tCONSUMERS"
	if leaders || rep.Management {
		header += "\tMESSAGES\tDEAD-LETTER STATE (messages_dlx)"
	}
	if leaders {
		header += "\tLEADER (ONLINE/MEMBERS)"
	}
	table(w, header, rep.Queues, func(q admin.QueueStatus) string {
		ready, cons := strconv.Itoa(q.Ready), strconv.Itoa(q.Consumers)
		if !q.Exists {
			ready, cons = "MISSING", "-"
		} else if q.IsDelay() && q.Consumers > 0 {
			cons += "  <-- WARNING: consumer on a delay queue"
		}
		cells := []string{q.Name, string(q.Role), ttlText(q.TTL), ready, cons}
		if leaders || rep.Management { // only then: count notes each unknown figure it shows
			dlx := "-" // a stream (the revocation stream) has no dead-letter state
			if q.Role != admin.RoleRevoked {
				dlx = count(q.MessagesDLX)
			}
			cells = append(cells, count(q.Messages), dlx)
		}
		if leaders {
			cells = append(cells, leaderText(q))
		}
		return strings.Join(cells, "\t")
	})
}

func printTargets(w io.Writer, p *admin.Plan, rep *admin.StatusReport) {
	if len(p.Spec.Targets) == 0 {
		return
	}
	d := p.Names.Dispatch()
	fmt.Fprintln(w)
	for _, t := range p.Spec.Targets {
		exists := slices.ContainsFunc(rep.Exchanges, func(x admin.ExchangeStatus) bool { return x.Name == t.Name && x.Exists })
		bound := slices.ContainsFunc(rep.Bindings, func(b admin.BindingStatus) bool {
			return b.Source == d && b.DestinationType == admin.DestExchange && b.Exists && b.Destination == t.Name
		})
		st := "exists"
		switch {
		case slices.ContainsFunc(rep.MissingExchanges, func(m admin.MissingExchange) bool { return m.Name == t.Name }) ||
			(t.Type != "" && !exists):
			st = "MISSING"
		case !rep.Management:
			st += "; binding to " + d + " not checked (needs --management-url)"
		case bound:
			st += ", bound to " + d
		default:
			st += ", NOT bound to " + d
		}
		fmt.Fprintf(w, "target %s: %s\n", t.Name, st)
	}
}

func printReady(w io.Writer, rep *admin.StatusReport, count func(int64) string) {
	seen := map[string]bool{}
	for _, q := range rep.Queues {
		if (q.Role != admin.RoleReady && q.Role != admin.RoleRevoked) || seen[q.Name] {
			continue
		}
		seen[q.Name] = true
		what := "ready queue"
		if q.Role == admin.RoleRevoked {
			what = "revocation stream"
		}
		if !q.Exists {
			fmt.Fprintf(w, "%s %s: MISSING\n", what, q.Name)
			continue
		}
		held := strconv.Itoa(q.Ready) + " ready"
		if rep.Management {
			held = count(q.Messages) + " messages"
		}
		line := fmt.Sprintf("%s %s: %s, %s", what, q.Name, held, plural(q.Consumers, "consumer"))
		if slices.ContainsFunc(rep.RequeueLoops, func(l admin.RequeueLoop) bool { return l.Queue == q.Name }) {
			line += "  <-- REQUEUE LOOP (see the problems)"
		}
		fmt.Fprintln(w, line)
	}
}

// statusProblem reports whether err is a problem Status found, not a failure to look.
func statusProblem(err error) bool {
	return errors.Is(err, admin.ErrIncomplete) || errors.Is(err, admin.ErrUnhealthy) || errors.Is(err, admin.ErrPolicy)
}

var statusCommand = command{name: "status", summary: "show problems, the parking queue, messages per ladder level and bucket, targets, plugin",
	help: "Inspects the topology without declaring anything and prints, first, every problem with what to do; then the\n" +
		"parking queue's count, one line per ladder level and bucket (--queues: per queue), the targets and the ready\n" +
		"queues. Exit 1 when the topology is not declared, objects are missing or a consumer is attached to a delay\n" +
		"queue. With --management-url also when an object has another type, flag or argument than specified, messages\n" +
		"stay in a queue's dead-letter state (messages_dlx) at two readings 6 s apart, a binding on the topology is not\n" +
		"in the specification, a policy is missing or breaks a guarantee, or a consumer of a ready queue or of the\n" +
		"parking queue requeues a message in a loop that no delivery limit ends.\n" +
		"--json prints everything, one line per queue included.",
	extra: func(s *settings) []option {
		return []option{outputOption(s), jsonOption(s),
			boolOption("queues", "one line per queue (the default: one per ladder level and bucket)", flagOf(&s.queues))}
	}, run: cmdStatus}

func cmdStatus(ctx context.Context, e *invocation) error {
	p, m, conn, err := e.connect(ctx)
	if err != nil {
		e.statusFailedJSON(p, err)
		return err
	}
	defer conn.Close()

	pluginState, avail := "off", false // pluginState is --json's value
	var pluginErr error
	if p.Spec.Plugin != delayspec.PluginOff {
		avail, pluginErr = e.probePlugin(ctx, p, m)
		pluginState = map[bool]string{true: "available", false: "not_available"}[avail]
		if pluginErr != nil {
			pluginState = "unknown"
			e.log.Warn().Err(pluginErr).Msg("cannot tell whether the broker has the delayed-message plugin")
		}
		if (pluginErr != nil || !avail) && p.Spec.Plugin == delayspec.PluginAuto {
			p = p.WithoutPlugin()
		}
	}
	plugin := pluginText(p.Spec.Plugin, avail, pluginErr, admin.ServerVersion(conn))
	rep, err := admin.Status(ctx, conn, p, admin.StatusOptions{Management: m, Logger: e.log})
	if rep == nil || (err != nil && !statusProblem(err)) {
		e.statusFailedJSON(p, err)
		return err
	}
	if serr := e.scheduleStatus(ctx); serr != nil { // broken schedule chains
		err = errors.Join(err, serr)
	}
	if e.s.output == "json" {
		return writeJSON(e.stdout, newStatusJSON(p, rep, err, pluginState, e.vhost()), err)
	}
	printStatus(e.stdout, statusView{p: p, rep: rep, err: err, plugin: plugin, vhost: e.vhost(), queues: e.s.queues})
	return err
}

// statusFailedJSON prints, for --json, the object of a status that could not look (ok false,
// the error as its problem), so a script sees every exit 1; a usage error prints nothing.
func (e *invocation) statusFailedJSON(p *admin.Plan, err error) {
	if e.s.output != "json" || exitCode(err) != exitRuntime {
		return
	}
	if p == nil {
		if p, _ = e.plan(); p == nil {
			return
		}
	}
	_ = writeJSON(e.stdout, newStatusJSON(p, &admin.StatusReport{PluginMessagesDelayed: -1}, err, "unknown", e.vhost()), nil)
}

// statusUnknownNote explains a "?" count: statistics come every collect_statistics_interval
// (https://www.rabbitmq.com/docs/management#statistics-interval).
const statusUnknownNote = "?: the management API has no figure for this queue yet (it collects statistics every " +
	"collect_statistics_interval, 5 s by default): run status again in a few seconds"
