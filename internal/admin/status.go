package admin

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/rs/zerolog"

	"github.com/delaykit/rabbitdelay/internal/delayspec"
	"github.com/delaykit/rabbitdelay/internal/text"
)

// StatusOptions tune [Status]. The zero value uses DefaultWorkers channels and no
// management API.
type StatusOptions struct {
	// Workers is the number of channels to inspect on in parallel; 0 means DefaultWorkers.
	Workers int
	// Management, when set, adds what AMQP cannot see: the type, flags and arguments of the
	// existing exchanges and queues (compared with the plan's), messages held in quorum
	// queues' dead-letter state (messages_dlx), unacknowledged messages, the bindings
	// (planned and unplanned), the topology's policies and the policies in effect.
	Management *Management
	// Logger receives a warning per delay queue with a consumer; the zero value logs nothing.
	Logger zerolog.Logger
	// DeadLetterRecheck is how long Status waits, when the management API shows messages in
	// a queue's dead-letter state, before it reads that queue's statistics again: only
	// queues that still hold some are reported, since every hop of a busy ladder passes
	// through that state for a moment. 0 means 6 s, one more than RabbitMQ's default
	// collect_statistics_interval (5 s), so that the second reading is a new sample.
	DeadLetterRecheck time.Duration
}

// ExchangeStatus is one exchange of the plan and whether it exists.
type ExchangeStatus struct {
	Exchange
	Exists bool `json:"exists"`
}

// QueueStatus is one queue of the plan and what it holds.
type QueueStatus struct {
	Queue
	Exists bool `json:"exists"`
	// Ready is the number of messages ready for delivery (what a passive queue.declare
	// returns). For a delay queue these are the messages waiting for their TTL.
	Ready int `json:"ready"`
	// Consumers is the number of consumers. A delay queue must have none: a consumer takes
	// messages before they are due.
	Consumers int `json:"consumers"`
	// Messages is every message the queue holds (ready, unacknowledged, dead-letter state),
	// from the management API; -1 when unknown.
	Messages int64 `json:"messages"`
	// MessagesDLX is the number of messages a quorum queue holds in its dead-letter state
	// (at-least-once dead-lettering that has not completed, retried forever), from the
	// management API; -1 when unknown.
	MessagesDLX int64 `json:"messages_dlx"`
	// Leader is the node of a quorum queue's leader ("" when none is reachable), Members the
	// nodes with a replica and Online those whose replica runs (management API only; empty
	// for classic queues and without the management API).
	Leader  string   `json:"leader,omitempty"`
	Members []string `json:"members,omitempty"`
	Online  []string `json:"online,omitempty"`
}

// BindingStatus is one binding of the plan and whether it exists.
type BindingStatus struct {
	Binding
	Exists bool `json:"exists"`
}

// StatusReport is what [Status] found.
type StatusReport struct {
	Exchanges []ExchangeStatus `json:"exchanges"`
	Queues    []QueueStatus    `json:"queues"`
	// Bindings is nil without the management API (AMQP cannot list bindings).
	Bindings []BindingStatus `json:"bindings,omitempty"`
	// Missing names every object of the plan that does not exist ("queue x", ...).
	Missing []string `json:"missing,omitempty"`
	// MissingExchanges are the exchanges the plan binds to but does not declare
	// ([Plan.Existing]: targets given without a type, ready queues' exchanges) that do not
	// exist. Apply refuses to run until they do ([Preflight]), so they are not in Missing.
	MissingExchanges []MissingExchange `json:"missing_exchanges,omitempty"`
	// Mismatched are the properties of existing exchanges and queues that differ from the
	// plan's (see [Mismatch]), in plan order (exchanges, then queues), typically an object
	// deleted and declared again with another type, flag or argument. Such an object routes,
	// keeps or dead-letters the messages that reach it otherwise than planned, so Status
	// fails with ErrUnhealthy. Management API only, except for a queue exclusive to another
	// connection, which a passive declare reveals too (405 RESOURCE_LOCKED).
	Mismatched []Mismatch `json:"mismatched,omitempty"`
	// ConsumedDelayQueues names the delay queues that have consumers.
	ConsumedDelayQueues []string `json:"consumed_delay_queues,omitempty"`
	// Management says whether the management API was read.
	Management bool `json:"management"`
	// StatsDisabled: the management API collects no queue statistics (its overview's
	// disable_stats, rabbitmq_management_agent.disable_metrics_collector = true): message
	// counts and messages_dlx are unknown, so Status cannot see messages stuck in dead-letter
	// state and fails with ErrUnhealthy.
	StatsDisabled bool `json:"stats_disabled,omitempty"`
	// Unplanned are the exchanges and queues with the plan's prefix that the plan does not
	// have (management API only): left by an earlier specification. They do not make the
	// status incomplete.
	Unplanned []Unplanned `json:"unplanned,omitempty"`
	// UnplannedBindings are bindings from or to the topology's exchanges (targets excepted)
	// or to its queues (ready queues included) that the plan does not have (management API
	// only): left by an earlier specification (a ready queue's old binding key) or added by
	// hand. They change where messages go, so Status fails with ErrUnhealthy.
	UnplannedBindings []Binding `json:"unplanned_bindings,omitempty"`
	// RetryBindings are the consumers' retry bindings for queues that are not ready queues of
	// the specification ([Plan.ConsumerRetryBinding]; management API only): expected, they do
	// not make Status fail.
	RetryBindings []Binding `json:"retry_bindings,omitempty"`
	// DeadLettering names the queues holding messages in their dead-letter state
	// (messages_dlx > 0, management API only) while every member of the queue and of the
	// queues it dead-letters into is online: at-least-once dead-lettering that has not
	// completed because nothing routes the message (a target with no binding for it and no
	// alternate exchange) or the queue it goes to refuses it. Queues waiting on an
	// unreachable node are in Cluster.Waits instead. Only queues that hold such messages at
	// two readings [StatusOptions.DeadLetterRecheck] apart are listed, with the smaller count:
	// every hop passes through that state for a moment. They make Status fail with
	// ErrUnhealthy.
	DeadLettering []WaitingQueue `json:"dead_lettering,omitempty"`
	// Policies are the topology's own policies and whether each is set as planned
	// (management API only).
	Policies []PolicyStatus `json:"policies,omitempty"`
	// PolicyProblems are the policy keys in effect that break a guarantee, and warnings
	// (management API only; see [Management.PolicyProblems]).
	PolicyProblems []PolicyProblem `json:"policy_problems,omitempty"`
	// Cluster is where the quorum queues live: leaders per node, queues with members offline
	// or without a leader, dead-lettering waiting on an unreachable node (management API
	// only; nil without it). Members offline, a missing leader and such waits make Status
	// fail with ErrUnhealthy; unbalanced leaders do not (run [Management.Rebalance]).
	Cluster *ClusterStatus `json:"cluster,omitempty"`
	// Version is the RabbitMQ version the broker announced on the connection (its "version"
	// server property, e.g. "4.3.6"); "" when it did not say.
	Version string `json:"rabbitmq_version,omitempty"`
	// RecordDiffers: the spec record (delayspec.ReadRecord), which publishers and consumers
	// use, is not this specification: the topology in use was applied with another one.
	RecordDiffers bool `json:"record_differs,omitempty"`
	// RecordOnlyTargets are the targets of the spec record that this specification lacks:
	// publishers send delayed messages to them; a left-out or mistyped name?
	RecordOnlyTargets []string `json:"record_only_targets,omitempty"`
	// NotDeclared: none of the topology's own exchanges and queues exist (target exchanges
	// and ready queues, the application's, may): it was never applied in this vhost, or it was
	// torn down. Missing still lists every object; PolicyProblems is then empty, since a
	// policy's effect on objects that do not exist, or on targets no delay topology feeds,
	// breaks nothing.
	NotDeclared bool `json:"not_declared,omitempty"`
	// RequeueLoops are the ready queues, and the parking queue, whose consumers keep getting
	// the same messages back and that no delivery limit will stop (management API only; see
	// [RequeueLoop]).
	RequeueLoops []RequeueLoop `json:"requeue_loops,omitempty"`
	// PluginMessagesDelayed is how many messages the delayed-message plugin holds for the
	// plan's plugin exchange ([Management.MessagesDelayed]); -1 when unknown (no plugin
	// exchange in the plan, no management API, or a plugin release that does not report it).
	PluginMessagesDelayed int64 `json:"plugin_messages_delayed"`
}

// MissingExchange is an exchange of [Plan.Existing] that does not exist.
type MissingExchange struct {
	Name string `json:"name"`
	// Similar are the vhost's exchanges whose names look like a mistyping of Name (the same
	// name in another case, or one or two letters apart; management API only).
	Similar []string `json:"similar,omitempty"`
}

// String is "exchange NAME", with the similar names when there are any.
func (m MissingExchange) String() string {
	if len(m.Similar) == 0 {
		return fmt.Sprintf("exchange %q", m.Name)
	}
	return fmt.Sprintf("exchange %q (similar names here: %s)", m.Name, quoteList(m.Similar))
}

// PolicyStatus is one policy of the plan and whether the broker has it as planned.
type PolicyStatus struct {
	Policy
	// Exists: a policy of that name exists.
	Exists bool `json:"exists"`
	// Current: it exists with the plan's pattern, apply-to, priority and definition.
	Current bool `json:"current"`
}

// Parking returns the parking queue's status.
func (r *StatusReport) Parking() QueueStatus {
	for _, q := range r.Queues {
		if q.Role == RoleParking {
			return q
		}
	}
	return QueueStatus{}
}

// Status inspects the plan's objects on conn with passive declarations (it declares nothing):
// which exist, the messages waiting and consumers of every queue and, with opts.Management,
// each object's type, flags and arguments, messages in dead-letter state, bindings, policies
// and policy problems. It logs a warning for every delay queue with a consumer.
//
// It returns the report and an error joining, as found: ErrIncomplete (missing objects, or
// missing exchanges the plan binds to), ErrUnhealthy (objects that differ from the plan, delay
// queues with consumers, messages held in dead-letter state or waiting on an unreachable node,
// queues without leader or with members offline, unplanned bindings) and ErrPolicy (policy
// problems, warnings excepted); errors.Is tells them apart. Other errors are the broker's, or
// wrap ErrManagement.
func Status(ctx context.Context, conn *amqp.Connection, p *Plan, opts StatusOptions) (*StatusReport, error) {
	rep := &StatusReport{Version: ServerVersion(conn), PluginMessagesDelayed: -1}
	p = p.ForBroker(ServerMajor(conn))
	l, err := lookUp(ctx, conn, p, opts.Workers)
	if err != nil {
		return rep, fmt.Errorf("topology: status: %w", err)
	}
	v := &statusView{}
	if opts.Management != nil {
		if v, err = opts.Management.statusView(ctx, p); err != nil {
			return rep, err
		}
		rep.fromManagement(p, v)
		if err := v.recheckDeadLettering(ctx, opts.Management, p, cmp.Or(opts.DeadLetterRecheck, defaultDeadLetterRecheck)); err != nil {
			return rep, err
		}
	}
	if err := rep.addExchanges(p, l, v); err != nil {
		return rep, err
	}
	if err := rep.addQueues(p, l, v, opts.Logger); err != nil {
		return rep, err
	}
	if rep.NotDeclared = notDeclared(rep); rep.NotDeclared {
		rep.PolicyProblems = nil
	}
	if err := rep.addMissingExchanges(ctx, conn, p, v); err != nil {
		return rep, err
	}
	rep.addMissingBindingsAndPolicies(p, v)
	if q, ok := p.Queue(p.Names.SpecStream()); ok && !slices.Contains(rep.Missing, "queue "+q.Name) {
		if err := rep.checkRecord(ctx, conn, p); err != nil {
			return rep, fmt.Errorf("topology: status: %w", err)
		}
	}
	return rep, errors.Join(rep.problems(p, conn.Config.Vhost, opts.Management)...)
}

// lookup is what the passive declarations of [Status] found: the error of each (p's exchanges,
// then queues) and the queues' counts.
type lookup struct {
	errs   []error
	queues []amqp.Queue
}

// lookUp declares p's exchanges and queues passively, on up to workers channels.
func lookUp(ctx context.Context, conn *amqp.Connection, p *Plan, workers int) (*lookup, error) {
	l := &lookup{queues: make([]amqp.Queue, len(p.Queues))}
	var jobs []job
	for _, e := range p.Exchanges {
		jobs = append(jobs, func(ch *amqp.Channel) error {
			return ch.ExchangeDeclarePassive(e.Name, e.Type, true, false, false, false, nil)
		})
	}
	for i, q := range p.Queues {
		jobs = append(jobs, func(ch *amqp.Channel) (err error) {
			l.queues[i], err = ch.QueueDeclarePassive(q.Name, true, false, false, false, nil)
			return err
		})
	}
	var err error
	l.errs, err = runJobs(ctx, conn, workers, false, jobs)
	return l, err
}

// fromManagement fills in what only the management API tells.
func (rep *StatusReport) fromManagement(p *Plan, v *statusView) {
	rep.Management = true
	rep.StatsDisabled = v.policy.overview.DisableStats
	names := make([]string, len(v.policy.exchanges))
	for i, x := range v.policy.exchanges {
		names[i] = x.Name
	}
	rep.Unplanned = unplannedOf(p, names, v.queues)
	rep.UnplannedBindings, rep.RetryBindings = unplannedBindings(p, v.bindings)
	for _, pol := range p.Policies {
		old, ok := v.policy.policies[pol.Name]
		rep.Policies = append(rep.Policies, PolicyStatus{Policy: pol, Exists: ok, Current: ok && samePolicy(old, pol)})
	}
	rep.PolicyProblems = v.policy.problems
	rep.Cluster = v.cluster
	rep.PluginMessagesDelayed = v.delayed
}

// found reads the passive declaration of the i-th object: whether it exists (a queue
// exclusive to another connection does), a missing one added to rep.Missing.
func (rep *StatusReport) found(l *lookup, i int, kind Kind, name string) (exists, locked bool, err error) {
	switch e := l.errs[i]; {
	case e == nil:
		return true, false, nil
	case kind == KindQueue && code(e) == amqp.ResourceLocked:
		return true, true, nil // 405 RESOURCE_LOCKED: the queue exists, exclusive to another connection
	case code(e) == amqp.NotFound:
		rep.Missing = append(rep.Missing, string(kind)+" "+name)
		return false, false, nil
	default:
		return false, false, wrapBroker(e, fmt.Sprintf("look up %s %q", kind, name))
	}
}

// addExchanges reports p's exchanges and their mismatches.
func (rep *StatusReport) addExchanges(p *Plan, l *lookup, v *statusView) error {
	for i, e := range p.Exchanges {
		ok, _, err := rep.found(l, i, KindExchange, e.Name)
		if err != nil {
			return err
		}
		if have := v.objects[rowKey(KindExchange, e.Name)]; ok && have != nil {
			rep.Mismatched = append(rep.Mismatched, exchangeMismatches(e, have)...)
		}
		rep.Exchanges = append(rep.Exchanges, ExchangeStatus{Exchange: e, Exists: ok})
	}
	return nil
}

// addQueues reports p's queues with what they hold, their mismatches, consumers on delay
// queues (logged as warnings), dead-lettering that does not complete and requeue loops.
func (rep *StatusReport) addQueues(p *Plan, l *lookup, v *statusView, log zerolog.Logger) error {
	loopSeen := map[string]bool{} // ready queues checked for a requeue loop
	waiting := map[string]bool{}  // queues whose dead-lettering waits on an unreachable node
	if rep.Cluster != nil {
		for _, w := range rep.Cluster.Waits {
			for _, q := range w.Queues {
				waiting[q.Name] = true
			}
		}
	}
	for i, q := range p.Queues {
		ok, locked, err := rep.found(l, len(p.Exchanges)+i, KindQueue, q.Name)
		if err != nil {
			return err
		}
		s := QueueStatus{Queue: q, Exists: ok, Messages: -1, MessagesDLX: -1}
		if ok {
			s.Ready, s.Consumers = l.queues[i].Messages, l.queues[i].Consumers
		}
		if have := v.objects[rowKey(KindQueue, q.Name)]; ok && have != nil {
			rep.Mismatched = append(rep.Mismatched, queueMismatches(q, have)...)
		} else if locked {
			rep.Mismatched = append(rep.Mismatched, Mismatch{Kind: KindQueue, Name: q.Name, Property: "exclusive", Existing: "true", Wanted: "false"})
		}
		m, managed := v.queues[q.Name]
		if managed {
			s.Messages, s.MessagesDLX = m.Messages, m.MessagesDLX
			s.Leader, s.Members, s.Online = m.Leader, m.Members, m.Online
			if n := v.stillDeadLettering(q.Name, m.MessagesDLX); n > 0 && !waiting[q.Name] {
				rep.DeadLettering = append(rep.DeadLettering, WaitingQueue{Name: q.Name, MessagesDLX: n})
			}
		}
		if ok && q.IsDelay() && s.Consumers > 0 {
			rep.ConsumedDelayQueues = append(rep.ConsumedDelayQueues, q.Name)
			log.Warn().Str("queue", q.Name).Int("consumers", s.Consumers).
				Msg("a consumer is attached to a delay queue: it takes delayed messages before they are due; stop it")
		}
		rep.Queues = append(rep.Queues, s)
		if managed && ok && (q.Role == RoleReady || q.Role == RoleParking) && !loopSeen[q.Name] {
			loopSeen[q.Name] = true // a ready queue with several bindings is in the plan once per binding
			if loop, is := RequeueLoopOf(q, m, rep.Version); is {
				rep.RequeueLoops = append(rep.RequeueLoops, loop)
			}
		}
	}
	return nil
}

// addMissingExchanges reports the exchanges of p.Existing that do not exist, with similar
// names in the vhost.
func (rep *StatusReport) addMissingExchanges(ctx context.Context, conn *amqp.Connection, p *Plan, v *statusView) error {
	missing, err := missingExchanges(ctx, conn, p) // apply.go
	for _, name := range missing {
		rep.MissingExchanges = append(rep.MissingExchanges, MissingExchange{Name: name, Similar: text.Similar(name, v.exchangeNames(p))})
	}
	return err
}

// addMissingBindingsAndPolicies reports p's bindings (management API only) and adds the
// missing ones, and the policies missing or set otherwise, to rep.Missing.
func (rep *StatusReport) addMissingBindingsAndPolicies(p *Plan, v *statusView) {
	if v.policy != nil {
		have := bindingKeys(v.bindings)
		for _, b := range p.Bindings {
			ok := have[b.key()]
			if !ok {
				rep.Missing = append(rep.Missing, "binding "+b.String())
			}
			rep.Bindings = append(rep.Bindings, BindingStatus{Binding: b, Exists: ok})
		}
	}
	for _, ps := range rep.Policies {
		switch {
		case !ps.Exists:
			rep.Missing = append(rep.Missing, "policy "+ps.Name)
		case !ps.Current:
			rep.Missing = append(rep.Missing, "policy "+ps.Name+" (exists with another pattern, priority or definition)")
		}
	}
}

// problems are the errors of rep, in the order [Status] documents; vhost is the connection's.
func (rep *StatusReport) problems(p *Plan, vhost string, m *Management) []error {
	var problems []error
	if len(rep.MissingExchanges) > 0 {
		problems = append(problems, missingExchangesError(rep.MissingExchanges))
	}
	if rep.NotDeclared {
		problems = append(problems, fmt.Errorf("%w: the topology is not declared in vhost %q: none of its own %d exchanges and queues exist (%s missing in "+
			"all; target exchanges and ready queues are the application's and may remain): declare it with `rabbitdelay apply` and the "+
			"same settings (AMQPDELAY_* variables or flags)", ErrIncomplete, vhost, ownObjects(p), text.Plural(len(rep.Missing), "object")))
	} else if len(rep.Missing) > 0 {
		apply := "run rabbitdelay apply"
		if len(rep.MissingExchanges) > 0 {
			apply += " once the exchanges it binds to exist"
		}
		problems = append(problems, fmt.Errorf("%w: %s missing (first: %s): %s", ErrIncomplete, text.Plural(len(rep.Missing), "object"), rep.Missing[0], apply))
	}
	if rep.StatsDisabled {
		problems = append(problems, fmt.Errorf("%w: the management API collects no queue statistics (its overview says "+
			"disable_stats: rabbitmq_management_agent.disable_metrics_collector is true), so status cannot count messages or see "+
			"messages stuck in a delay queue's dead-letter state (messages_dlx); set the collector back on to check the topology "+
			"with status or the exporter", ErrUnhealthy))
	}
	if err := mismatchError(rep.Mismatched); err != nil {
		problems = append(problems, err)
	}
	if len(rep.ConsumedDelayQueues) > 0 {
		problems = append(problems, fmt.Errorf("%w: consumers on delay queues (%s): they take delayed messages before they are due; "+
			"stop them and consume from the targets' queues", ErrUnhealthy, strings.Join(rep.ConsumedDelayQueues, ", ")))
	}
	if len(rep.DeadLettering) > 0 {
		problems = append(problems, fmt.Errorf("%w: messages in dead-letter state (messages_dlx, at two readings) in %s: their dead-lettering has not "+
			"completed, and every member of these queues and of the queues they dead-letter into is online, so nothing routes them "+
			"(a target with no binding for their routing key and no alternate exchange: see the policies) or the queue they go to "+
			"refuses them; RabbitMQ retries them forever: look at the targets' bindings and the policy problems",
			ErrUnhealthy, text.Join(rep.DeadLettering, ", ")))
	}
	if rep.Cluster != nil {
		for _, w := range rep.Cluster.Waits {
			problems = append(problems, fmt.Errorf("%w: %s", ErrUnhealthy, deadLetterWaitText(w, m.VHost())))
		}
		if err := degradedError(rep.Cluster); err != nil {
			problems = append(problems, err)
		}
	}
	if len(rep.UnplannedBindings) > 0 {
		problems = append(problems, fmt.Errorf("%w: %s on the topology's exchanges and queues not in the plan (first: %s): "+
			"left by an earlier specification or added by hand, they change where messages go; unbind them "+
			"(rabbitmqctl has no unbind: use the management UI or API), or put them in the specification",
			ErrUnhealthy, text.Plural(len(rep.UnplannedBindings), "binding"), rep.UnplannedBindings[0]))
	}
	for _, l := range rep.RequeueLoops {
		problems = append(problems, fmt.Errorf("%w: requeue loop in %s %s: %s", ErrUnhealthy, l.Kind(), l, l.Advice(p.Names.Parking())))
	}
	if failing := Failing(rep.PolicyProblems); len(failing) > 0 {
		problems = append(problems, policyError(failing))
	}
	return problems
}

// missingExchangesError is ErrIncomplete naming the exchanges of Plan.Existing that do not
// exist, and the fixes.
func missingExchangesError(missing []MissingExchange) error {
	names := make([]string, len(missing))
	for i, m := range missing {
		names[i] = m.String()
	}
	return fmt.Errorf("%w: %s, which the topology binds to but does not declare: declare it, give a target as name:type "+
		"(AMQPDELAY_TARGETS, --target) so apply declares it, or, if the name is mistyped, correct it in the specification; "+
		"until it exists apply declares nothing", ErrIncomplete, strings.Join(names, ", "))
}

// own reports whether an exchange or queue role is the topology's own (what teardown deletes),
// not the application's: target exchanges and ready queues.
func own(r Role) bool { return r != RoleTarget && r != RoleReady }

// ownObjects counts the plan's own exchanges and queues.
func ownObjects(p *Plan) int {
	n := 0
	for _, e := range p.Exchanges {
		if own(e.Role) {
			n++
		}
	}
	seen := map[string]bool{}
	for _, q := range p.Queues {
		if own(q.Role) && !seen[q.Name] {
			seen[q.Name] = true
			n++
		}
	}
	return n
}

// notDeclared reports whether none of the topology's own exchanges and queues exist.
func notDeclared(rep *StatusReport) bool {
	n := 0
	for _, e := range rep.Exchanges {
		if own(e.Role) {
			if e.Exists {
				return false
			}
			n++
		}
	}
	for _, q := range rep.Queues {
		if own(q.Role) {
			if q.Exists {
				return false
			}
			n++
		}
	}
	return n > 0
}

// checkRecord reads the spec record and compares it with p's specification: no record is a
// missing object (publishers cannot start without one); another specification's is reported in
// RecordDiffers and RecordOnlyTargets.
func (rep *StatusReport) checkRecord(ctx context.Context, conn *amqp.Connection, p *Plan) error {
	rec, err := delayspec.ReadRecord(ctx, conn, p.Spec.Prefix)
	if errors.Is(err, delayspec.ErrNoRecord) {
		rep.Missing = append(rep.Missing, "spec record (stream "+p.Names.SpecStream()+" holds none)")
		return nil
	}
	if errors.Is(err, delayspec.ErrInvalidSpec) { // something else was published to the stream
		rep.Missing = append(rep.Missing, "spec record (the last record of stream "+p.Names.SpecStream()+" is not one this version reads)")
		return nil
	}
	if err != nil {
		return err
	}
	a, errA := delayspec.EncodeRecord(rec)
	b, errB := delayspec.EncodeRecord(p.Spec)
	if err := errors.Join(errA, errB); err != nil {
		return err
	}
	rep.RecordDiffers = string(a) != string(b)
	for _, t := range rec.Targets {
		if !p.Spec.HasTarget(t.Name) {
			rep.RecordOnlyTargets = append(rep.RecordOnlyTargets, t.Name)
		}
	}
	return nil
}
