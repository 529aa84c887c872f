package admin

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/rs/zerolog"

	"github.com/delaykit/rabbitdelay/internal/delayspec"
	"github.com/delaykit/rabbitdelay/internal/text"
)

// Kind is the kind of a topology object in a report.
type Kind string

// Kinds.
const (
	KindExchange Kind = "exchange"
	KindQueue    Kind = "queue"
	KindBinding  Kind = "binding"
)

// State is what happened to (or was found of) one object.
type State string

// States.
const (
	// StateCreated: Apply declared the object and it did not exist before.
	StateCreated State = "created"
	// StateUnchanged: the object existed with the plan's arguments; nothing changed.
	StateUnchanged State = "unchanged"
	// StateBound: Apply declared the binding; without the management API it cannot tell
	// whether it existed (AMQP has no passive bind). Declaring a binding twice is harmless.
	StateBound State = "bound"
	// StateUpdated: Apply rewrote a policy of the topology that had another pattern,
	// priority or definition.
	StateUpdated State = "updated"
	// StateMissing: the object does not exist (Apply with DryRun: it would be created).
	StateMissing State = "missing"
	// StateUnknown: a binding whose existence cannot be checked without the management API.
	StateUnknown State = "unknown"
	// StateConflict: the object exists with other arguments (see [ConflictError]).
	StateConflict State = "conflict"
	// StateNotDeclared: not declared because an earlier step failed.
	StateNotDeclared State = "not declared"
	// StateSkipped: a policy not set (Apply) or not deleted (Teardown) because there is no
	// management API client: AMQP cannot set policies. Detail gives the rabbitmqctl command.
	StateSkipped State = "skipped"
	// StateDeleted: Teardown deleted the object; with DryRun, it would do so.
	StateDeleted State = "deleted"
	// StateAbsent: Teardown found nothing to delete.
	StateAbsent State = "absent"
	// StateNotDeleted: Teardown did not delete the object because an earlier step failed.
	StateNotDeleted State = "not deleted"
)

// Result is the outcome for one object.
type Result struct {
	Kind  Kind   `json:"kind"`
	Name  string `json:"name"`
	State State  `json:"state"`
	// Detail is extra information: the conflict, the error, the messages a queue holds.
	Detail string `json:"detail,omitempty"`
}

// Report lists the outcome for every object, in plan order (exchanges, queues, bindings).
type Report struct {
	Results []Result `json:"results"`
	// Unplanned (Teardown with the management API only) are the exchanges and queues with
	// the plan's prefix that the plan does not have, left in place: Teardown deletes only
	// what its plan names.
	Unplanned []Unplanned `json:"unplanned,omitempty"`
	// PolicyProblems (Apply with the management API only) are the policy keys in effect on
	// the topology's objects once it is applied (see [Management.PolicyProblems]).
	PolicyProblems []PolicyProblem `json:"policy_problems,omitempty"`
	// Elapsed is the wall-clock time of the whole operation.
	Elapsed time.Duration `json:"elapsed_ns"`
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
	// DryRun checks everything Apply checks (exchanges the plan needs, conflicts with existing
	// objects) and reports what would be created, without creating anything.
	DryRun bool
	// Workers is the number of channels to declare on in parallel; 0 means DefaultWorkers.
	Workers int
	// Management, when set, lets Apply tell created bindings from unchanged ones (AMQP cannot;
	// without it bindings are reported as StateBound), set the plan's policies
	// ([Plan.Policies]; without it they are reported as StateSkipped, with the rabbitmqctl
	// command to run) and check the policies in effect ([Management.PolicyProblems]).
	Management *Management
	// Logger receives debug lines for every declaration; the zero value logs nothing.
	Logger zerolog.Logger
	// Nodes are connections to the cluster's nodes, one per node, for a topology with shards
	// of the ladder (Spec.Shards > 1): Apply declares each missing ladder queue through
	// Nodes[Queue.Slot mod len(Nodes)], so that its leader is on that node (client-local) and
	// the shards of one queue lead from different nodes; with Management as well, through a node
	// that leads no other shard of the same queue (matched by local port in the management
	// API's connection list). Without them every new queue leads from the node of Apply's own
	// connection. Existing queues keep their leaders. Apply leaves the connections open.
	Nodes []*amqp.Connection
}

// Preflight checks, with passive declarations only, that no target, ready queue or ready
// queue's exchange of p is an object of another prefix's topology in the vhost (an error
// wrapping ErrInvalidSpec that names it), and that every exchange in p.Existing exists. It
// returns an error wrapping ErrTargetMissing that names every missing exchange and the fixes,
// or the broker's error. With m (nil for none), the error also names the vhost's
// exchanges whose names look like a mistyping of a missing one.
func Preflight(ctx context.Context, conn *amqp.Connection, p *Plan, m *Management) error {
	if err := foreignObjects(ctx, conn, p); err != nil { // foreign.go
		return err
	}
	missing, err := missingExchanges(ctx, conn, p)
	if err != nil || len(missing) == 0 {
		return err
	}
	return fmt.Errorf("%w: %s (nothing was declared): %s", ErrTargetMissing, quoteList(missing), strings.Join(missingAdvice(ctx, p, m, missing), "; "))
}

// missingExchanges returns the exchanges of p.Existing that do not exist.
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
	var missing []string
	for i, err := range errs {
		switch {
		case err == nil:
		case code(err) == amqp.NotFound:
			missing = append(missing, p.Existing[i])
		default:
			return nil, wrapBroker(err, fmt.Sprintf("check that exchange %q exists", p.Existing[i]))
		}
	}
	return missing, nil
}

// missingAdvice is what to do about the missing exchanges, by where the specification has
// them, with the similar names among the targets and (with m) in the vhost.
func missingAdvice(ctx context.Context, p *Plan, m *Management, missing []string) []string {
	// amq.*: RabbitMQ refuses to declare them (403), only the broker creates them. The others
	// are named by where the specification has them: a target given without a type, or the
	// exchange of a ready queue that is no target.
	var own, targets, readyOnly []string
	isTarget := map[string]bool{}
	for _, t := range p.Spec.Targets {
		isTarget[t.Name] = true
	}
	for _, name := range missing {
		switch {
		case delayspec.BrokerReserved(name):
			own = append(own, name)
		case isTarget[name]:
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
	// Names like a missing one: among the targets this apply declares, and (with the management
	// API) in the vhost. A failure to list the vhost's leaves those out: the missing exchanges
	// are the error.
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

// Apply declares the plan on conn, idempotently, and reports every object as created or
// unchanged (the package documentation gives the order and why). It runs [Preflight], finds
// what exists, declares every existing object again with the plan's arguments and, if any
// conflicts (406), stops before creating anything. With opts.Management it sets the plan's
// policies ([Management.SetPolicies]) before creating anything, creates what is missing,
// writes the spec record last (delayspec.WriteRecord: publishers read it, so an apply that fails
// half way leaves the record of the last complete apply), then checks the policies in effect
// ([Management.PolicyProblems]).
// Apply never deletes an object nor re-declares one with other arguments; conn stays open.
//
// The report lists what was done even when Apply fails. Errors wrap ErrTargetMissing,
// ErrConflict (the first [ConflictError]), ErrAccessRefused (403: no configure permission),
// ErrPolicy (the topology is declared all the same), ErrManagement or the broker's
// *amqp091.Error; when ctx ends, Apply returns ctx.Err() at once.
func Apply(ctx context.Context, conn *amqp.Connection, p *Plan, opts ApplyOptions) (*Report, error) {
	start := time.Now()
	rep := &Report{}
	defer func() { rep.Elapsed = time.Since(start) }()
	p = p.ForBroker(ServerMajor(conn))
	if err := Preflight(ctx, conn, p, opts.Management); err != nil {
		return rep, err
	}
	r := newRunner(ctx, conn, opts.Workers, opts.Logger, "declare", rep)
	objects := objectsOf(p, opts.Nodes)
	exists, err := survey(r, objects)
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
	// The policies, before any object is created, so new queues never run under another
	// policy; AMQP cannot set them.
	policyResults, err := applyPolicies(ctx, conn, p, opts)
	if err != nil || opts.DryRun {
		rep.Results = append(rep.Results, policyResults...)
		return rep, err
	}
	if opts.Management != nil && len(opts.Nodes) > 1 && p.Spec.Shards > 1 {
		placeNewShards(ctx, p, opts, objects, exists)
	}
	// Create what is missing, phase by phase: exchanges, queues, the bindings tier by tier;
	// then write the spec record, once every object has been declared with this plan's
	// arguments and the policies are set.
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

// existingBindings returns the keys of the vhost's bindings (see bindingKey), or nil without
// the management API or when it cannot list them (bindings are then reported as bound).
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

// reportExisting adds a row per object and binding of p: unchanged, in conflict, or missing
// (a binding is unknown without the management API's bindings).
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

// markNotDeclared marks what is still to be declared as not declared, when Apply stops.
func markNotDeclared(rep *Report) {
	for i := range rep.Results {
		if s := rep.Results[i].State; s == StateMissing || s == StateUnknown {
			rep.Results[i].State = StateNotDeclared
		}
	}
}

// applyPolicies sets p's policies through the management API, or, without it, reports each
// as skipped with the rabbitmqctl command that sets it.
func applyPolicies(ctx context.Context, conn *amqp.Connection, p *Plan, opts ApplyOptions) ([]Result, error) {
	if opts.Management != nil {
		return opts.Management.SetPolicies(ctx, p, opts.DryRun)
	}
	var out []Result
	cmds := p.PolicyCommands(conn.Config.Vhost) // the vhost the connection opened
	for i, pol := range p.Policies {
		out = append(out, Result{Kind: KindPolicy, Name: pol.Name, State: StateSkipped,
			Detail: "AMQP cannot set policies: pass the management API, or run " + cmds[i]})
	}
	return out, nil
}

// placeNewShards makes each new ladder queue of objects lead from a node that leads no other
// shard of the same queue (placeShards), when the management API tells the nodes apart.
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
			objects[i].decl = declareQueueOn(q, opts.Nodes[idx])
		}
	}
}

// phase is a set of declarations Apply runs together, and the state of what it declared.
type phase struct {
	steps []step
	done  State
}

// createPhases are the declarations of what is missing: the exchanges, the queues, then the
// bindings tier by tier. Bindings are reported as bound when knownBindings is false (AMQP
// cannot tell a created binding from an existing one).
func (r *runner) createPhases(p *Plan, objects []planObject, knownBindings bool) []phase {
	var exchanges, queues []step
	for _, o := range objects {
		switch {
		case r.row(o.declare()).State != StateMissing:
		case o.kind == KindExchange:
			exchanges = append(exchanges, o.declare())
		default:
			queues = append(queues, o.declare())
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
		s := step{KindBinding, b.String(), declareBinding(b)}
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

// findConflicts declares the existing objects again with the plan's arguments: equal
// arguments change nothing, different ones make the broker answer 406 PRECONDITION_FAILED. It
// returns every conflict (each a *ConflictError, completed from the management API when
// opts.Management is set) in plan order, and the same keyed by planObject.key, or the first
// other error.
func findConflicts(r *runner, objects []planObject, exists map[string]bool, opts ApplyOptions) ([]error, map[string]*ConflictError, error) {
	ctx, log := r.ctx, r.log
	var existing []planObject
	var redeclare []step
	for _, o := range objects {
		if exists[o.key()] {
			existing, redeclare = append(existing, o), append(redeclare, o.declare())
		}
	}
	errs, err := r.look(redeclare)
	if err != nil {
		return nil, nil, fmt.Errorf("topology: check existing objects: %w", err)
	}
	var conflicts []error
	conflictOf := map[string]*ConflictError{}
	var current map[string]*vhostObject // from the management API, when a message was cut
	for i, err := range errs {
		if err == nil {
			continue
		}
		o := existing[i]
		var c *ConflictError
		if !errors.As(wrapBroker(err, ""), &c) {
			return nil, nil, wrapBroker(err, fmt.Sprintf("declare %s %q", o.kind, o.name))
		}
		if c.Existing == unknownValue && current == nil && opts.Management != nil {
			if current, err = opts.Management.objects(ctx); err != nil {
				log.Warn().Err(err).Msg("cannot read the existing arguments through the management API")
				current = map[string]*vhostObject{}
			}
		}
		c.fill(o.args, o.typ, current[o.key()].props(o.kind))
		conflicts = append(conflicts, c)
		conflictOf[o.key()] = c
	}
	// A redeclare of an x-delayed-message exchange compares none of the plugin's own arguments
	// (the plugin hands the check to the delayed type, which looks at alternate-exchange only;
	// RabbitMQ 3.10 and later): an existing plugin exchange with another x-delayed-type would take every
	// plugin publish and route it nowhere. The management API shows its arguments.
	for _, o := range existing {
		if !o.plugin || conflictOf[o.key()] != nil || opts.Management == nil {
			continue
		}
		if current == nil {
			if current, err = opts.Management.objects(ctx); err != nil {
				log.Warn().Err(err).Msg("cannot read the plugin exchange's arguments through the management API")
				current = map[string]*vhostObject{}
			}
		}
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

// declareFailed records the first failed declaration of a phase in its row and returns the
// error Apply returns.
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

// conflictDetail is the Detail of a conflict's row.
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

// targetNames returns the names of ts.
func targetNames(ts []delayspec.Target) []string {
	out := make([]string, 0, len(ts))
	for _, t := range ts {
		out = append(out, t.Name)
	}
	return out
}

// checkPolicies returns the policy problems of p once its objects are declared. A queue gone
// by then was deleted right after Apply declared it (an expires policy deletes an idle queue
// a second after it applies), so it is declared again and read at once, twice at most: the
// policy that deletes it is named while the queue exists. Errors wrap ErrManagement, or
// ErrPolicy when a queue is deleted every time.
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
		gone := make(map[string]bool, len(missing))
		for _, name := range missing {
			gone[name] = true
		}
		var steps []step
		for _, o := range objects {
			if o.kind == KindQueue && gone[o.name] {
				steps = append(steps, o.declare())
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
