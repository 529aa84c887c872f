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
	"golang.org/x/sync/errgroup"

	"github.com/delaykit/rabbitdelay/internal/delayspec"
	"github.com/delaykit/rabbitdelay/internal/text"
)

// StatusOptions tune [Status]. The zero value uses DefaultWorkers channels and no
// management API.
type StatusOptions struct {
	Workers int // number of channels to inspect on in parallel; 0 means DefaultWorkers
	// Management adds what AMQP cannot see: types, flags and arguments, messages_dlx,
	// unacknowledged messages, bindings, policies and the policies in effect.
	Management *Management
	// Logger receives a warning per delay queue with a consumer; the zero value logs nothing.
	Logger zerolog.Logger
	// DeadLetterRecheck is how long Status waits before reading again the queues that hold
	// messages in dead-letter state (every hop passes through it for a moment); 0 means 6 s,
	// one more than the default collect_statistics_interval.
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
	// Ready is what a passive queue.declare returns: messages ready for delivery
	Ready     int `json:"ready"`
	Consumers int `json:"consumers"` // number of consumers (a delay queue must have none)
	// Messages and MessagesDLX are as in [ManagedQueue]; -1 when unknown
	Messages    int64 `json:"messages"`
	MessagesDLX int64 `json:"messages_dlx"`
	// Leader, Members and Online are as [ManagedQueue]'s (management API only).
	Leader  string   `json:"leader,omitempty"`
	Members []string `json:"members,omitempty"`
	Online  []string `json:"online,omitempty"`
}

// BindingStatus is one binding of the plan and whether it exists.
type BindingStatus struct {
	Binding
	Exists bool `json:"exists"`
}

// StatusReport is what [Status] found (docs/status-json.md describes each field). Fields
// marked "management" are empty without the management API.
type StatusReport struct {
	Exchanges []ExchangeStatus `json:"exchanges"`
	Queues    []QueueStatus    `json:"queues"`
	Bindings  []BindingStatus  `json:"bindings,omitempty"` // management
	// Missing names every object of the plan that does not exist ("queue x", ...).
	Missing []string `json:"missing,omitempty"`
	// MissingExchanges are the exchanges of [Plan.Existing] that do not exist (not in Missing).
	MissingExchanges []MissingExchange `json:"missing_exchanges,omitempty"`
	// Mismatched are properties of existing objects that differ from the plan's, in plan order
	// (management, except a queue exclusive to another connection: 405 RESOURCE_LOCKED).
	Mismatched []Mismatch `json:"mismatched,omitempty"`
	// ConsumedDelayQueues names the delay queues that have consumers.
	ConsumedDelayQueues []string `json:"consumed_delay_queues,omitempty"`
	Management          bool     `json:"management"` // says whether the management API was read
	// StatsDisabled: the overview says disable_stats, so messages_dlx cannot be seen.
	StatsDisabled bool `json:"stats_disabled,omitempty"`
	// Unplanned are objects of the plan's naming rule that the plan does not have (management).
	Unplanned []Unplanned `json:"unplanned,omitempty"`
	// UnplannedBindings change where messages go (management; see unplannedBindings).
	UnplannedBindings []Binding `json:"unplanned_bindings,omitempty"`
	// RetryBindings are consumers' retry bindings ([Plan.ConsumerRetryBinding]), expected.
	RetryBindings []Binding `json:"retry_bindings,omitempty"`
	// DeadLettering are queues holding messages in dead-letter state at two readings
	// [StatusOptions.DeadLetterRecheck] apart (the smaller count) while every member involved
	// is online (management; waits on an unreachable node are in Cluster.Waits).
	DeadLettering []WaitingQueue `json:"dead_lettering,omitempty"`
	// Policies are the topology's own policies and whether each is set as planned (management).
	Policies []PolicyStatus `json:"policies,omitempty"`
	// PolicyProblems are as [Management.PolicyProblems] (management).
	PolicyProblems []PolicyProblem `json:"policy_problems,omitempty"`
	// Cluster is where the quorum queues live (management); unbalanced leaders do not make
	// Status fail (run [Management.Rebalance]).
	Cluster *ClusterStatus `json:"cluster,omitempty"`
	// Version is the connection's "version" server property ("" when it did not say).
	Version string `json:"rabbitmq_version,omitempty"`
	// RecordDiffers: the spec record publishers use is another specification's.
	RecordDiffers bool `json:"record_differs,omitempty"`
	// RecordOnlyTargets are the spec record's targets this specification lacks.
	RecordOnlyTargets []string `json:"record_only_targets,omitempty"`
	// NotDeclared: none of the topology's own objects exist; PolicyProblems is then empty.
	NotDeclared bool `json:"not_declared,omitempty"`
	// RequeueLoops are ready queues and the parking queue in a [RequeueLoop] (management).
	RequeueLoops []RequeueLoop `json:"requeue_loops,omitempty"`
	// PluginMessagesDelayed is [Management.MessagesDelayed] of the plugin exchange; -1 when
	// unknown.
	PluginMessagesDelayed int64 `json:"plugin_messages_delayed"`
}

// MissingExchange is an exchange of [Plan.Existing] that does not exist.
type MissingExchange struct {
	Name string `json:"name"`
	// Similar are the vhost's exchange names that look like a mistyping of Name (management).
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
	Exists  bool `json:"exists"`  // a policy of that name exists
	Current bool `json:"current"` // with the plan's pattern, apply-to, priority and definition
}

// Parking returns the parking queue's status.
func (r *StatusReport) Parking() QueueStatus {
	q, _ := find(r.Queues, func(q QueueStatus) bool { return q.Role == RoleParking })
	return q
}

// Status inspects the plan's objects on conn with passive declarations (it declares nothing)
// and, with opts.Management, what the management API tells. It logs a warning for every delay
// queue with a consumer.
//
// It returns the report and an error joining, as found: ErrIncomplete (missing objects or
// exchanges), ErrUnhealthy (mismatches, consumed delay queues, messages stuck in dead-letter
// state, degraded quorum queues, unplanned bindings, requeue loops) and ErrPolicy (failing
// policy problems). Other errors are the broker's, or wrap ErrManagement.
func Status(ctx context.Context, conn *amqp.Connection, p *Plan, opts StatusOptions) (*StatusReport, error) {
	rep := &StatusReport{Version: ServerVersion(conn), PluginMessagesDelayed: -1}
	p = p.ForBroker(ServerMajor(conn))
	l, err := lookUp(ctx, conn, p, opts.Workers)
	if err != nil {
		return rep, fmt.Errorf("topology: status: %w", err)
	}
	v := &statusView{}
	if opts.Management != nil {
		if v, err = opts.Management.statusView(ctx, p, true); err != nil {
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
	if all, exist := ownObjects(rep); all > 0 && exist == 0 {
		rep.NotDeclared = true
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

// lookup is what Status's passive declarations found: the error of each (p's exchanges, then
// queues) and the queues' counts.
type lookup struct {
	errs   []error
	queues []amqp.Queue
}

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

func (rep *StatusReport) fromManagement(p *Plan, v *statusView) {
	rep.Management = true
	rep.StatsDisabled = v.policy.overview.DisableStats
	rep.Unplanned = unplannedOf(p, v.names, v.queues)
	rep.UnplannedBindings, rep.RetryBindings = unplannedBindings(p, v.bindings)
	for _, pol := range p.Policies {
		old, ok := v.policy.policies[pol.Name]
		rep.Policies = append(rep.Policies, PolicyStatus{Policy: pol, Exists: ok, Current: ok && samePolicy(old, pol)})
	}
	rep.PolicyProblems = v.policy.problems
	rep.Cluster = v.cluster
	rep.PluginMessagesDelayed = v.delayed
}

// found reads the i-th passive declaration; a missing object is added to rep.Missing.
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

// addQueues reports p's queues with what they hold, mismatches, consumers on delay queues,
// stuck dead-lettering and requeue loops.
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

// addMissingExchanges reports the missing exchanges of p.Existing, with similar names.
func (rep *StatusReport) addMissingExchanges(ctx context.Context, conn *amqp.Connection, p *Plan, v *statusView) error {
	missing, err := missingExchanges(ctx, conn, p)
	for _, name := range missing {
		rep.MissingExchanges = append(rep.MissingExchanges, MissingExchange{Name: name, Similar: text.Similar(name, v.exchangeNames(p))})
	}
	return err
}

// addMissingBindingsAndPolicies reports p's bindings (management API only) and adds missing
// bindings and policies to rep.Missing.
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
	if n, _ := ownObjects(rep); rep.NotDeclared {
		problems = append(problems, fmt.Errorf("%w: the topology is not declared in vhost %q: none of its own %d exchanges and queues exist (%s missing in "+
			"all; target exchanges and ready queues are the application's and may remain): declare it with `rabbitdelay apply` and the "+
			"same settings (AMQPDELAY_* variables or flags)", ErrIncomplete, vhost, n, text.Plural(len(rep.Missing), "object")))
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

// missingExchangesError is ErrIncomplete naming the missing exchanges and the fixes.
func missingExchangesError(missing []MissingExchange) error {
	return fmt.Errorf("%w: %s, which the topology binds to but does not declare: declare it, give a target as name:type "+
		"(AMQPDELAY_TARGETS, --target) so apply declares it, or, if the name is mistyped, correct it in the specification; "+
		"until it exists apply declares nothing", ErrIncomplete, text.Join(missing, ", "))
}

// ownObjects counts the topology's own exchanges and queues in rep (each once) and those that
// exist.
func ownObjects(rep *StatusReport) (all, exist int) {
	seen := map[string]bool{}
	count := func(r Role, key string, exists bool) {
		if r != RoleTarget && r != RoleReady && !seen[key] {
			seen[key] = true
			all++
			if exists {
				exist++
			}
		}
	}
	for _, e := range rep.Exchanges {
		count(e.Role, rowKey(KindExchange, e.Name), e.Exists)
	}
	for _, q := range rep.Queues {
		count(q.Role, rowKey(KindQueue, q.Name), q.Exists)
	}
	return all, exist
}

// checkRecord compares the spec record with p's specification: no record is a missing object
// (publishers cannot start without one).
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

// statusView is one reading of the management API for [Status]; its zero value is "no
// management API".
type statusView struct {
	policy   *policyRead
	objects  map[string]*managedObject
	names    []string // the vhost's exchanges
	queues   map[string]ManagedQueue
	bindings []Binding
	cluster  *ClusterStatus
	delayed  int64            // messages the plugin exchange holds, -1 when unknown
	dlxAgain map[string]int64 // messages_dlx read again (recheckDeadLettering); nil when not
}

// statusView reads, in parallel, policyView, clusterView and (with plugin) the plugin's messages.
func (m *Management) statusView(ctx context.Context, p *Plan, plugin bool) (*statusView, error) {
	v := &statusView{delayed: -1}
	reads := []func() error{
		func() (err error) { v.policy, err = m.policyView(ctx, p); return err },
		func() (err error) { v.queues, v.cluster, v.bindings, err = m.clusterView(ctx, p); return err },
	}
	if plugin && p.HasPlugin() {
		reads = append(reads, func() error {
			n, found, err := m.MessagesDelayed(ctx, p.Names.PluginExchange())
			if found {
				v.delayed = n
			}
			return err
		})
	}
	if err := parallel(reads...); err != nil {
		return nil, err
	}
	v.objects = v.policy.objects()
	for _, x := range v.policy.exchanges {
		v.names = append(v.names, x.Name)
	}
	return v, nil
}

// exchangeNames are the vhost's exchanges outside p's naming rule, sorted.
func (v *statusView) exchangeNames(p *Plan) []string {
	out := slices.DeleteFunc(slices.Clone(v.names), p.Names.Reserved)
	slices.Sort(out)
	return out
}

const defaultDeadLetterRecheck = 6 * time.Second

// recheckDeadLettering waits wait when p's queues hold messages in dead-letter state, and reads
// their messages_dlx again into v.dlxAgain.
func (v *statusView) recheckDeadLettering(ctx context.Context, m *Management, p *Plan, wait time.Duration) error {
	var held []string
	for _, q := range p.Queues {
		if v.queues[q.Name].MessagesDLX > 0 && !slices.Contains(held, q.Name) {
			held = append(held, q.Name)
		}
	}
	if len(held) == 0 {
		return nil
	}
	select {
	case <-ctx.Done():
		return fmt.Errorf("topology: status: waiting to read the dead-letter state of %s again: %w", strings.Join(held, ", "), ctx.Err())
	case <-time.After(wait):
	}
	again, err := m.Queues(ctx)
	if err != nil {
		return err
	}
	v.dlxAgain = make(map[string]int64, len(held))
	for _, name := range held {
		v.dlxAgain[name] = again[name].MessagesDLX // a queue deleted meanwhile: 0
	}
	return nil
}

// stillDeadLettering is the smaller messages_dlx of queue's two readings.
func (v *statusView) stillDeadLettering(queue string, first int64) int64 {
	if first <= 0 {
		return 0
	}
	if v.dlxAgain == nil {
		return first
	}
	return max(min(first, v.dlxAgain[queue]), 0)
}

// Snapshot is what the management API says about a plan's topology at one moment (what
// `rabbitdelay exporter` serves), read without AMQP: unlike [Status], it cannot see missing
// exchanges.
type Snapshot struct {
	Queues         map[string]ManagedQueue // all the vhost's queues by name
	Cluster        *ClusterStatus          // where the plan's quorum queues live
	PolicyProblems []PolicyProblem         // as [Management.PolicyProblems] returns them
	// StatsDisabled: the overview says disable_stats, so message counts are unknown
	StatsDisabled bool
	Version       string // overview's rabbitmq_version ("" when it does not say)
}

// Snapshot reads, in parallel and once, what [Management.Cluster] and
// [Management.PolicyProblems] read, and the overview. Errors wrap ErrManagement.
func (m *Management) Snapshot(ctx context.Context, p *Plan) (*Snapshot, error) {
	v, err := m.statusView(ctx, p, false)
	if err != nil {
		return nil, err
	}
	o := v.policy.overview
	return &Snapshot{Queues: v.queues, Cluster: v.cluster, PolicyProblems: v.policy.problems, StatsDisabled: o.DisableStats, Version: o.Version}, nil
}

// clusterView reads the queues, nodes and bindings in parallel and where p's quorum queues live.
func (m *Management) clusterView(ctx context.Context, p *Plan) (map[string]ManagedQueue, *ClusterStatus, []Binding, error) {
	var queues map[string]ManagedQueue
	var nodes []ClusterNode
	var bindings []Binding
	err := parallel(
		func() (err error) { queues, err = m.Queues(ctx); return err },
		func() (err error) { nodes, err = m.Nodes(ctx); return err },
		func() (err error) { bindings, err = m.bindings(ctx); return err })
	if err != nil {
		return nil, nil, nil, err
	}
	return queues, clusterOf(p, queues, nodes, bindings), bindings, nil
}

func parallel(fs ...func() error) error {
	var g errgroup.Group
	for _, f := range fs {
		g.Go(f)
	}
	return g.Wait()
}
