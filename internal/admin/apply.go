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

// Kind is the kind of a topology object in a report.
type Kind string

// Kinds of objects.
const (
	KindExchange Kind = "exchange"
	KindQueue    Kind = "queue"
	KindBinding  Kind = "binding"
)

// State is what happened to (or was found of) one object.
type State string

// States.
const (
	StateCreated   State = "created"   // Apply declared it; it did not exist
	StateUnchanged State = "unchanged" // it existed with the plan's arguments
	// StateBound: Apply declared the binding without the management API, which alone tells
	// whether it existed (AMQP has no passive bind).
	StateBound       State = "bound"
	StateUpdated     State = "updated"      // Apply rewrote a policy that differed
	StateMissing     State = "missing"      // it does not exist (DryRun: would be created)
	StateUnknown     State = "unknown"      // a binding, without the management API
	StateConflict    State = "conflict"     // it exists with other arguments ([ConflictError])
	StateNotDeclared State = "not declared" // an earlier step failed
	// StateSkipped: a policy not set or deleted without the management API (AMQP cannot);
	// Detail gives the rabbitmqctl command.
	StateSkipped    State = "skipped"
	StateDeleted    State = "deleted"     // Teardown deleted it (DryRun: would)
	StateAbsent     State = "absent"      // Teardown found nothing to delete
	StateNotDeleted State = "not deleted" // an earlier Teardown step failed
)

// Result is the outcome for one object.
type Result struct {
	Kind   Kind   `json:"kind"`
	Name   string `json:"name"`
	State  State  `json:"state"`
	Detail string `json:"detail,omitempty"` // conflict, the error or the messages a queue holds
}

// Report lists the outcome for every object, in plan order (exchanges, queues, bindings).
type Report struct {
	Results []Result `json:"results"`
	// Unplanned (Teardown with the management API) are objects of the plan's naming rule that
	// the plan does not have, left in place.
	Unplanned []Unplanned `json:"unplanned,omitempty"`
	// PolicyProblems (Apply with the management API) are as [Management.PolicyProblems].
	PolicyProblems []PolicyProblem `json:"policy_problems,omitempty"`
	Elapsed        time.Duration   `json:"elapsed_ns"` // wall-clock time of the whole operation
}

// Count returns how many results have state s.
func (r *Report) Count(s State) int {
	n := 0
	for _, x := range r.Results {
		if x.State == s {
			n++
		}
	}
	return n
}

// ApplyOptions tune [Apply]. The zero value declares with DefaultWorkers channels and no
// management API.
type ApplyOptions struct {
	DryRun  bool // checks everything and reports what would be created, creating nothing
	Workers int  // number of channels to declare on in parallel; 0 means DefaultWorkers
	// Management lets Apply tell created bindings from unchanged ones (else StateBound), set
	// the plan's policies (else StateSkipped) and check the policies in effect.
	Management *Management
	// Logger receives debug lines for every declaration; the zero value logs nothing.
	Logger zerolog.Logger
	// Nodes are connections, one per cluster node, for Spec.Shards > 1: each missing ladder
	// queue is declared through Nodes[Queue.Slot mod len(Nodes)] (client-local leader), or,
	// with Management, through a node leading no other shard of that queue. Existing queues
	// keep their leaders. Apply leaves the connections open.
	Nodes []*amqp.Connection
}

// Preflight checks, with passive declarations only, that no target, ready queue or ready
// queue's exchange of p is an object of another prefix's topology (ErrInvalidSpec), and that
// every exchange in p.Existing exists (else ErrTargetMissing naming them and the fixes, with m
// also the vhost's similar names). Other errors are the broker's.
func Preflight(ctx context.Context, conn *amqp.Connection, p *Plan, m *Management) error {
	if err := foreignObjects(ctx, conn, p); err != nil {
		return err
	}
	missing, err := missingExchanges(ctx, conn, p)
	if err != nil || len(missing) == 0 {
		return err
	}
	return fmt.Errorf("%w: %s (nothing was declared): %s", ErrTargetMissing, quoteList(missing), strings.Join(missingAdvice(ctx, p, m, missing), "; "))
}

func missingExchanges(ctx context.Context, conn *amqp.Connection, p *Plan) ([]string, error) {
	if len(p.Existing) == 0 {
		return nil, nil
	}
	jobs := make([]job, len(p.Existing))
	for i, name := range p.Existing {
		jobs[i] = func(ch *amqp.Channel) error {
			return ch.ExchangeDeclarePassive(name, amqp.ExchangeDirect, true, false, false, false, nil)
		}
	}
	errs, err := runJobs(ctx, conn, DefaultWorkers, false, jobs)
	if err != nil {
		return nil, fmt.Errorf("topology: check target exchanges: %w", err)
	}
	ok, err := found(errs, func(i int) string { return fmt.Sprintf("check that exchange %q exists", p.Existing[i]) })
	var missing []string
	for i, name := range p.Existing {
		if err == nil && !ok[i] {
			missing = append(missing, name)
		}
	}
	return missing, err
}

// missingAdvice is what to do about the missing exchanges, by where the specification has
// them (amq.* ones only the broker creates), with similar names among the targets and (with m)
// in the vhost.
func missingAdvice(ctx context.Context, p *Plan, m *Management, missing []string) []string {
	var own, targets, readyOnly []string
	for _, name := range missing {
		switch {
		case delayspec.BrokerReserved(name):
			own = append(own, name)
		case p.Spec.HasTarget(name):
			targets = append(targets, name)
		default:
			readyOnly = append(readyOnly, name)
		}
	}
	var advice []string
	if len(targets) > 0 {
		advice = append(advice, fmt.Sprintf("declare %s first, give the target as name:type (e.g. %s:topic) so apply declares it, "+
			"or, if the name is mistyped, correct it in the targets (AMQPDELAY_TARGETS, --target)", quoteList(targets), targets[0]))
	}
	for _, name := range readyOnly {
		var queues []string
		for _, r := range p.Spec.ReadyQueues {
			if r.Exchange == name {
				queues = append(queues, r.Queue)
			}
		}
		advice = append(advice, fmt.Sprintf("ready queue %s binds to exchange %q, which is not among the targets (%s): if the name "+
			"is mistyped, correct it in the ready queues (AMQPDELAY_READY_QUEUES, --ready-queue); if it is another exchange of "+
			"yours, declare it first", quoteList(queues), name, quoteList(targetNames(p.Spec.Targets))))
	}
	// A failure to list the vhost's exchanges leaves those out: the missing ones are the error.
	var declaring []string
	for _, t := range p.Spec.Targets {
		if t.Type != "" {
			declaring = append(declaring, t.Name)
		}
	}
	var inVHost []string
	if m != nil {
		inVHost, _ = m.exchangeNames(ctx)
	}
	for _, name := range missing {
		if similar := text.Similar(name, declaring); len(similar) > 0 {
			advice = append(advice, fmt.Sprintf("the targets declare %s, similar to %q", quoteList(similar), name))
		}
		if similar := text.Similar(name, inVHost); len(similar) > 0 {
			advice = append(advice, fmt.Sprintf("this vhost has %s, similar to %q", quoteList(similar), name))
		}
	}
	if len(own) > 0 {
		advice = append(advice, fmt.Sprintf("%s: names starting with \"amq.\" are RabbitMQ's own exchanges and cannot be declared; "+
			"enable what creates them on the broker, or use a target of another name", quoteList(own)))
	}
	return advice
}

// Apply declares the plan on conn idempotently (order and reasons: package documentation):
// [Preflight], then every existing object again with the plan's arguments, stopping before
// creating anything on a conflict (406); then the policies (with opts.Management), the missing
// objects, and last the spec record (so a failed apply leaves the last complete one), then a
// check of the policies in effect. It never deletes an object; conn stays open.
//
// The report lists what was done even when Apply fails. Errors wrap ErrTargetMissing,
// ErrConflict (the first [ConflictError]), ErrAccessRefused, ErrPolicy (the topology is
// declared all the same), ErrManagement or the broker's *amqp091.Error; when ctx ends, Apply
// returns ctx.Err() at once.
func Apply(ctx context.Context, conn *amqp.Connection, p *Plan, opts ApplyOptions) (*Report, error) {
	start := time.Now()
	rep := &Report{}
	defer func() { rep.Elapsed = time.Since(start) }()
	p = p.ForBroker(ServerMajor(conn))
	if err := Preflight(ctx, conn, p, opts.Management); err != nil {
		return rep, err
	}
	r := &runner{ctx: ctx, conn: conn, workers: opts.Workers, log: opts.Logger, op: "declare", rep: rep, rows: map[string]int{}}
	objects := objectsOf(p, opts.Nodes)
	exists, err := survey(r, p, objects)
	if err != nil {
		return rep, err
	}
	bindings := existingBindings(ctx, opts)
	conflicts, conflictOf, err := findConflicts(r, objects, exists, opts)
	if err != nil {
		return rep, err
	}
	r.reportExisting(p, objects, exists, conflictOf, bindings)
	if len(conflicts) > 0 {
		markNotDeclared(rep)
		if len(conflicts) == 1 {
			return rep, conflicts[0]
		}
		// The report lists every conflict; the error keeps the first one in full.
		return rep, fmt.Errorf("%w\n(and %d more objects exist with different arguments: see the report)", conflicts[0], len(conflicts)-1)
	}
	// Policies first, so new queues never run under another policy.
	policyResults, err := applyPolicies(ctx, conn, p, opts)
	if err != nil || opts.DryRun {
		rep.Results = append(rep.Results, policyResults...)
		return rep, err
	}
	if opts.Management != nil && len(opts.Nodes) > 1 && p.Spec.Shards > 1 {
		placeNewShards(ctx, p, opts, objects, exists)
	}
	for _, ph := range r.createPhases(p, objects, bindings != nil) {
		if err := r.run(ph.steps, ph.done, declareFailed); err != nil {
			markNotDeclared(rep)
			return rep, err
		}
	}
	if err := delayspec.WriteRecord(ctx, conn, p.Spec); err != nil {
		return rep, fmt.Errorf("topology: %w", err)
	}
	rep.Results = append(rep.Results, policyResults...)
	if opts.Management != nil {
		if rep.PolicyProblems, err = checkPolicies(r, opts.Management, p, objects); err != nil {
			return rep, err
		}
		if failing := Failing(rep.PolicyProblems); len(failing) > 0 {
			return rep, policyError(failing)
		}
	}
	opts.Logger.Debug().Int("created", rep.Count(StateCreated)).Int("unchanged", rep.Count(StateUnchanged)).
		Dur("elapsed", time.Since(start)).Msg("topology applied")
	return rep, nil
}

// existingBindings returns the keys of the vhost's bindings, or nil without the management API
// or when it cannot list them (bindings are then reported as bound).
func existingBindings(ctx context.Context, opts ApplyOptions) map[string]bool {
	if opts.Management == nil {
		return nil
	}
	all, err := opts.Management.bindings(ctx)
	if err != nil {
		opts.Logger.Warn().Err(err).Msg("cannot list bindings through the management API: bindings are reported as bound, not created/unchanged")
		return nil
	}
	return bindingKeys(all)
}

// reportExisting adds a row per object and binding of p: unchanged, conflict, missing or
// unknown.
func (r *runner) reportExisting(p *Plan, objects []planObject, exists map[string]bool, conflictOf map[string]*ConflictError, bindings map[string]bool) {
	for _, o := range objects {
		row := Result{Kind: o.kind, Name: o.name, State: StateMissing}
		if c := conflictOf[o.key()]; c != nil {
			row.State, row.Detail = StateConflict, conflictDetail(c)
		} else if exists[o.key()] {
			row.State = StateUnchanged
		}
		r.add(row)
	}
	for _, b := range p.Bindings {
		row := Result{Kind: KindBinding, Name: b.String(), State: StateUnknown}
		if bindings != nil {
			row.State = StateMissing
			if bindings[b.key()] {
				row.State = StateUnchanged
			}
		}
		r.add(row)
	}
}

func markNotDeclared(rep *Report) {
	for i := range rep.Results {
		if s := rep.Results[i].State; s == StateMissing || s == StateUnknown {
			rep.Results[i].State = StateNotDeclared
		}
	}
}

// applyPolicies sets p's policies, or without the management API reports each as skipped.
func applyPolicies(ctx context.Context, conn *amqp.Connection, p *Plan, opts ApplyOptions) ([]Result, error) {
	if opts.Management != nil {
		return opts.Management.writePolicies(ctx, p, opts.DryRun, false)
	}
	var out []Result
	cmds := p.PolicyCommands(conn.Config.Vhost) // the vhost the connection opened
	for i, pol := range p.Policies {
		out = append(out, Result{Kind: KindPolicy, Name: pol.Name, State: StateSkipped,
			Detail: "AMQP cannot set policies: pass the management API, or run " + cmds[i]})
	}
	return out, nil
}

// placeNewShards declares each new ladder queue through the node placeShards picks.
func placeNewShards(ctx context.Context, p *Plan, opts ApplyOptions, objects []planObject, exists map[string]bool) {
	place, err := placeShards(ctx, opts.Management, p, opts.Nodes, exists)
	if err != nil {
		opts.Logger.Warn().Err(err).Msg("cannot read the leaders or connections through the management API: new shards of the ladder are placed by slot")
	}
	if place == nil {
		opts.Logger.Debug().Msg("the nodes of ApplyOptions.Nodes are not all found in the management API's connection list: shards placed by slot")
	}
	for i, o := range objects {
		if idx, ok := place[o.name]; ok && o.kind == KindQueue {
			q, _ := p.Queue(o.name)
			objects[i].do = declareQueueOn(q, opts.Nodes[idx])
		}
	}
}

type phase struct {
	steps []step
	done  State
}

// createPhases declare what is missing: exchanges, queues, then bindings tier by tier (bound
// rather than created unless knownBindings).
func (r *runner) createPhases(p *Plan, objects []planObject, knownBindings bool) []phase {
	var exchanges, queues []step
	for _, o := range objects {
		switch {
		case r.row(o.step).State != StateMissing:
		case o.kind == KindExchange:
			exchanges = append(exchanges, o.step)
		default:
			queues = append(queues, o.step)
		}
	}
	phases := []phase{{steps: exchanges, done: StateCreated}, {steps: queues, done: StateCreated}}
	bound := StateCreated
	if !knownBindings {
		bound = StateBound
	}
	for i, b := range p.Bindings {
		if i == 0 || b.Tier != p.Bindings[i-1].Tier {
			phases = append(phases, phase{done: bound})
		}
		s := step{KindBinding, b.String(), func(ch *amqp.Channel) error {
			if b.DestinationType == DestExchange {
				return ch.ExchangeBind(b.Destination, b.RoutingKey, b.Source, false, b.Args)
			}
			return ch.QueueBind(b.Destination, b.RoutingKey, b.Source, false, b.Args)
		}}
		switch row := r.row(s); row.State {
		case StateUnknown:
			row.State = StateMissing // declared below, reported as bound
			fallthrough
		case StateMissing:
			last := &phases[len(phases)-1]
			last.steps = append(last.steps, s)
		}
	}
	return phases
}

// findConflicts declares the existing objects again with the plan's arguments (different ones
// answer 406) and returns every conflict in plan order, completed from the management API,
// and keyed by planObject.key; or the first other error.
func findConflicts(r *runner, objects []planObject, exists map[string]bool, opts ApplyOptions) ([]error, map[string]*ConflictError, error) {
	var current map[string]*managedObject // from the management API, read once when needed
	read := func(what string) {
		if current == nil {
			var err error
			if current, err = opts.Management.objects(r.ctx); err != nil {
				r.log.Warn().Err(err).Msg("cannot read " + what + " through the management API")
				current = map[string]*managedObject{}
			}
		}
	}
	var existing []planObject
	var redeclare []step
	for _, o := range objects {
		if exists[o.key()] {
			existing, redeclare = append(existing, o), append(redeclare, o.step)
		}
	}
	errs, err := r.look(redeclare)
	if err != nil {
		return nil, nil, fmt.Errorf("topology: check existing objects: %w", err)
	}
	var conflicts []error
	conflictOf := map[string]*ConflictError{}
	for i, err := range errs {
		if err == nil {
			continue
		}
		o := existing[i]
		var c *ConflictError
		if !errors.As(wrapBroker(err, ""), &c) {
			return nil, nil, wrapBroker(err, fmt.Sprintf("declare %s %q", o.kind, o.name))
		}
		if c.Existing == unknownValue && opts.Management != nil {
			read("the existing arguments")
		}
		c.fill(o.args, o.typ, current[o.key()].props(o.kind))
		conflicts = append(conflicts, c)
		conflictOf[o.key()] = c
	}
	// A redeclare of the plugin exchange does not compare x-delayed-type (the plugin checks
	// alternate-exchange only): another value would route every plugin publish nowhere.
	for _, o := range existing {
		if !o.plugin || conflictOf[o.key()] != nil || opts.Management == nil {
			continue
		}
		read("the plugin exchange's arguments")
		got, ok := current[o.key()]
		if !ok {
			continue
		}
		have, want := "none", fmt.Sprint(o.args["x-delayed-type"])
		if v, ok := got.Arguments["x-delayed-type"]; ok {
			have = fmt.Sprint(v)
		}
		if have != want {
			c := &ConflictError{Kind: string(KindExchange), Name: o.name, Argument: "x-delayed-type", Existing: have, Wanted: want}
			conflicts = append(conflicts, c)
			conflictOf[o.key()] = c
		}
	}
	return conflicts, conflictOf, nil
}

// declareFailed records a phase's first failed declaration in its row and returns Apply's error.
func declareFailed(row *Result, err error) error {
	werr := wrapBroker(err, fmt.Sprintf("declare %s %q", row.Kind, row.Name))
	var c *ConflictError
	if errors.As(werr, &c) {
		row.State, row.Detail = StateConflict, conflictDetail(c)
	} else {
		row.Detail = werr.Error()
	}
	return werr
}

func conflictDetail(c *ConflictError) string {
	return fmt.Sprintf("%s = %s, wanted %s", c.Argument, c.Existing, c.Wanted)
}

func quoteList(names []string) string {
	q := make([]string, len(names))
	for i, n := range names {
		q[i] = fmt.Sprintf("%q", n)
	}
	return strings.Join(q, ", ")
}

func targetNames(ts []delayspec.Target) []string {
	out := make([]string, 0, len(ts))
	for _, t := range ts {
		out = append(out, t.Name)
	}
	return out
}

// checkPolicies returns p's policy problems once its objects are declared. A queue deleted
// right after (an expires policy) is declared again and read at once, twice at most, so the
// policy is named while the queue exists. Errors wrap ErrManagement, or ErrPolicy when a queue
// is deleted every time.
func checkPolicies(r *runner, m *Management, p *Plan, objects []planObject) ([]PolicyProblem, error) {
	for attempt := 1; ; attempt++ {
		v, err := m.policyView(r.ctx, p)
		if err != nil {
			return nil, err
		}
		probs, missing := v.problems, v.missing
		if len(missing) == 0 {
			return probs, nil
		}
		if attempt == 3 {
			return probs, fmt.Errorf("%w: queue %q is deleted right after declare apply declares it (%d times): an expires "+
				"policy in effect on it, or another client; see the policies of the vhost", ErrPolicy, missing[0], attempt)
		}
		var steps []step
		for _, o := range objects {
			if o.kind == KindQueue && slices.Contains(missing, o.name) {
				steps = append(steps, o.step)
			}
		}
		if len(steps) == 0 { // not Apply's queues
			return probs, nil
		}
		if err := r.runUnrecorded(steps, "declare"); err != nil {
			return nil, err
		}
	}
}

// foreignObjects returns an error wrapping ErrInvalidSpec when a target, ready queue or its
// exchange is an object of another prefix's topology whose parking queue exists: binding it
// would send this topology's messages into the other's.
func foreignObjects(ctx context.Context, conn *amqp.Connection, p *Plan) error {
	type candidate struct{ what, name, prefix string }
	var cands []candidate
	own := p.Names.Prefix
	for _, t := range p.Spec.Targets {
		for _, prefix := range delayspec.ForeignPrefixes(t.Name, own, false, false) {
			cands = append(cands, candidate{"target exchange", t.Name, prefix})
		}
	}
	for _, r := range p.Spec.ReadyQueues {
		for _, prefix := range delayspec.ForeignPrefixes(r.Exchange, own, false, false) {
			cands = append(cands, candidate{"ready queue's exchange", r.Exchange, prefix})
		}
		for _, prefix := range delayspec.ForeignPrefixes(r.Queue, own, true, true) {
			cands = append(cands, candidate{"ready queue", r.Queue, prefix})
		}
	}
	if len(cands) == 0 {
		return nil
	}
	jobs := make([]job, len(cands))
	for i, c := range cands {
		parking := delayspec.Names{Prefix: c.prefix}.Parking()
		jobs[i] = func(ch *amqp.Channel) error {
			_, err := ch.QueueDeclarePassive(parking, true, false, false, false, nil)
			return err
		}
	}
	errs, err := runJobs(ctx, conn, DefaultWorkers, false, jobs)
	if err != nil {
		return fmt.Errorf("topology: check for other prefixes' topologies: %w", err)
	}
	exists, err := found(errs, func(i int) string { return fmt.Sprintf("check whether prefix %q has a topology", cands[i].prefix) })
	var foreign []error
	for i, c := range cands {
		if err == nil && exists[i] {
			foreign = append(foreign, fmt.Errorf("%w: %s %q is an object of the delay topology of prefix %q in this vhost (its "+
				"parking queue %q exists): binding it into this topology would send this topology's messages into that one's; "+
				"choose another name", delayspec.ErrInvalidSpec, c.what, c.name, c.prefix, delayspec.Names{Prefix: c.prefix}.Parking()))
		}
	}
	return cmp.Or(err, errors.Join(foreign...))
}
