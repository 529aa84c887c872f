package admin

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"math/big"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/delaykit/rabbitdelay/internal/delayspec"
)

// KindPolicy is the kind of a policy in a [Report].
const KindPolicy Kind = "policy"

// managedPolicy is a policy as GET /api/policies/<vhost> (or /api/operator-policies/<vhost>)
// lists it.
type managedPolicy struct {
	Name       string         `json:"name"`
	Pattern    string         `json:"pattern"`
	ApplyTo    string         `json:"apply-to"`
	Priority   json.Number    `json:"priority"`
	Definition map[string]any `json:"definition"`
}

// policies returns the vhost's policies (operator: its operator policies) by name.
func (m *Management) policies(ctx context.Context, operator bool) (map[string]managedPolicy, error) {
	kind := "policies"
	if operator {
		kind = "operator-policies"
	}
	var raw []managedPolicy
	if err := m.get(ctx, "api/"+kind+"/"+url.PathEscape(m.vhost), &raw); err != nil {
		return nil, err
	}
	out := make(map[string]managedPolicy, len(raw))
	for _, p := range raw {
		out[p.Name] = p
	}
	return out, nil
}

// samePolicy reports whether the broker's policy has the plan policy's pattern, apply-to,
// priority and definition (values compared by their printed form: JSON numbers).
func samePolicy(have managedPolicy, want Policy) bool {
	if have.Pattern != want.Pattern || have.ApplyTo != want.ApplyTo || have.Priority.String() != strconv.Itoa(want.Priority) ||
		len(have.Definition) != len(want.Definition) {
		return false
	}
	for k, v := range want.Definition {
		if fmt.Sprint(have.Definition[k]) != fmt.Sprint(v) {
			return false
		}
	}
	return true
}

// policyAdvice is what to do when the management API refuses to write a policy.
func policyAdvice(err error) string {
	switch httpStatus(err) {
	case http.StatusUnauthorized, http.StatusForbidden:
		return ": setting policies needs a user with the policymaker (or administrator) tag and configure permission on the vhost " +
			"(rabbitmqctl set_user_tags <user> policymaker), or set them yourself with the rabbitmqctl commands of [Plan.PolicyCommands]"
	}
	return ""
}

// SetPolicies creates or updates p's policies ([Plan.Policies]) in the client's vhost and
// reports each as StateCreated, StateUnchanged or StateUpdated (with dryRun: StateMissing or
// StateUpdated, nothing written). A policy of the same name with another pattern, priority or
// definition is overwritten: the names are the topology's own ([Names.DelayQueuesPolicy],
// [Names.TargetsPolicy]). Errors wrap ErrManagement; a refusal (401/403) says which user tag
// is needed.
func (m *Management) SetPolicies(ctx context.Context, p *Plan, dryRun bool) ([]Result, error) {
	have, err := m.policies(ctx, false)
	if err != nil {
		return nil, err
	}
	var out []Result
	for _, pol := range p.Policies {
		r := Result{Kind: KindPolicy, Name: pol.Name, State: StateCreated}
		old, exists := have[pol.Name]
		switch {
		case exists && samePolicy(old, pol):
			r.State = StateUnchanged
		case exists:
			r.State = StateUpdated
			r.Detail = fmt.Sprintf("was pattern %.60q priority %s definition %v", old.Pattern, old.Priority, FormatArgs(old.Definition))
		case dryRun:
			r.State = StateMissing
		}
		if !dryRun && r.State != StateUnchanged {
			body := map[string]any{"pattern": pol.Pattern, "apply-to": pol.ApplyTo, "priority": pol.Priority, "definition": pol.Definition}
			if err := m.do(ctx, http.MethodPut, "api/policies/"+url.PathEscape(m.vhost)+"/"+url.PathEscape(pol.Name), body, nil); err != nil {
				r.State, r.Detail = StateNotDeclared, err.Error()
				out = append(out, r)
				return out, fmt.Errorf("topology: set policy %q: %w%s", pol.Name, err, policyAdvice(err))
			}
		}
		out = append(out, r)
	}
	return out, nil
}

// DeletePolicies deletes p's policies and reports each as StateDeleted or StateAbsent (with
// dryRun nothing is deleted; what exists is reported as StateDeleted). Errors wrap
// ErrManagement.
func (m *Management) DeletePolicies(ctx context.Context, p *Plan, dryRun bool) ([]Result, error) {
	have, err := m.policies(ctx, false)
	if err != nil {
		return nil, err
	}
	var out []Result
	for _, pol := range p.Policies {
		r := Result{Kind: KindPolicy, Name: pol.Name, State: StateAbsent}
		if _, ok := have[pol.Name]; ok {
			r.State = StateDeleted
			if !dryRun {
				err := m.do(ctx, http.MethodDelete, "api/policies/"+url.PathEscape(m.vhost)+"/"+url.PathEscape(pol.Name), nil, nil)
				if err != nil && httpStatus(err) != http.StatusNotFound {
					r.State, r.Detail = StateNotDeleted, err.Error()
					out = append(out, r)
					return out, fmt.Errorf("topology: delete policy %q: %w%s", pol.Name, err, policyAdvice(err))
				}
			}
		}
		out = append(out, r)
	}
	return out, nil
}

// PolicyCommands returns the rabbitmqctl commands that set p's policies in vhost, for
// operators who apply without the management API (AMQP cannot set policies).
func (p *Plan) PolicyCommands(vhost string) []string {
	if vhost == "" {
		vhost = "/"
	}
	var out []string
	for _, pol := range p.Policies {
		def, _ := json.Marshal(pol.Definition)
		out = append(out, fmt.Sprintf("rabbitmqctl set_policy -p %s --apply-to %s --priority %d %s %s %s",
			shellQuote(vhost), pol.ApplyTo, pol.Priority, shellQuote(pol.Name), shellQuote(pol.Pattern), shellQuote(string(def))))
	}
	return out
}

func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// Breakage names the guarantee a policy key breaks (see [PolicyProblem]).
type Breakage string

// What a policy key can break.
const (
	// BreaksEarly: delayed messages arrive before they are due (a message-ttl below a delay
	// queue's x-message-ttl: RabbitMQ applies the lower of the two).
	BreaksEarly Breakage = "early"
	// BreaksDeletes: the queue is deleted with its messages (expires: a delay queue never has
	// a consumer, so it always counts as unused).
	BreaksDeletes Breakage = "deletes"
	// BreaksDrops: messages can be lost (a length limit that drops, a TTL on the parking
	// queue, an overflow that downgrades quorum dead-lettering to at-most-once).
	BreaksDrops Breakage = "drops"
	// BreaksStalls: messages stop moving (a full queue refusing dead-lettered messages, which
	// then sit in the upstream queue's dead-letter state; a due message no binding takes and
	// no alternate exchange parks).
	BreaksStalls Breakage = "stalls"
	// BreaksRevocations: revocations are deleted from the revocation stream before the
	// messages they name are due, so revoked messages reach handlers (a max-age below the
	// stream's retention, a max-length-bytes).
	BreaksRevocations Breakage = "revocations lost"
	// BreaksRouting: messages go somewhere they should not (a dead-letter routing key that
	// replaces the message's own, an alternate exchange on one of the topology's exchanges).
	BreaksRouting Breakage = "wrong routing"
	// BreaksUnknown: where an operator policy applies could not be worked out: before
	// RabbitMQ 4.3 the management API names it only with a queue's statistics, which a new
	// queue lacks for up to collect_statistics_interval, and its pattern is beyond Go's regexp.
	BreaksUnknown Breakage = "not checked"
)

// PolicyProblem is one policy key in effect on a queue or exchange of the topology that breaks
// (or, with Warning, may break) one of rabbitdelay's guarantees. It is an error: Error
// describes the policy, the key, the value, the object and what it breaks, and what to do.
type PolicyProblem struct {
	// Kind is KindQueue or KindExchange.
	Kind Kind `json:"kind"`
	// Object is the queue or exchange name.
	Object string `json:"object"`
	// Policy is the name of the policy that sets Key, or "" when the value is the object's
	// own argument, or when no policy applies where one should (the topology's policy is not
	// set).
	Policy string `json:"policy"`
	// Operator is set when Policy is an operator policy (rabbitmqctl set_operator_policy):
	// RabbitMQ merges those with the applying policy, the stricter value winning, so no
	// policy of the topology can shadow them.
	Operator bool `json:"operator,omitempty"`
	// Key is the policy key (message-ttl, expires, max-length, ...) or argument.
	Key string `json:"key"`
	// Value is the value in effect (JSON numbers as json.Number), nil when missing.
	Value any `json:"value"`
	// Breaks is what it breaks.
	Breaks Breakage `json:"breaks"`
	// Warning is set for what does not break a guarantee by itself (a target's own alternate
	// exchange; a delivery limit on the parking queue). Status and Apply do not fail on
	// warnings.
	Warning bool `json:"warning,omitempty"`
	// Why explains the effect.
	Why string `json:"why"`
}

// Error describes the problem: `operator policy "p" sets message-ttl = 1000 on queue "q":
// early: ...; fix: ...`.
func (pp PolicyProblem) Error() string {
	var src string
	switch {
	case pp.Policy == "" && pp.Value == nil:
		src = "no policy sets " + pp.Key
	case pp.Policy == "":
		src = fmt.Sprintf("the argument %s = %v", pp.Key, pp.Value)
	case pp.Operator:
		src = fmt.Sprintf("operator policy %q sets %s = %v", pp.Policy, pp.Key, pp.Value)
	default:
		src = fmt.Sprintf("policy %q sets %s = %v", pp.Policy, pp.Key, pp.Value)
	}
	return fmt.Sprintf("%s on %s %q: %s: %s", src, pp.Kind, pp.Object, pp.Breaks, pp.Why)
}

// fix is the advice common to policy problems, by source.
func (pp PolicyProblem) fix(ours string, priority int) string {
	switch {
	case pp.Operator:
		return fmt.Sprintf("change the operator policy's pattern so it does not match %q, or remove %s from it "+
			"(operator policies are merged with every policy, the stricter value winning: no policy can shadow them)", pp.Object, pp.Key)
	case pp.Policy == "":
		return ""
	case pp.Policy == ours:
		return ""
	default:
		return fmt.Sprintf("policy %q has a priority at or above %d, so it applies instead of %q: lower its priority, "+
			"or make its pattern not match %q (or raise --policy-priority above it and run rabbitdelay apply)", pp.Policy, priority, ours, pp.Object)
	}
}

// managedObject is a queue or exchange with what the management API says about its policies.
type managedObject struct {
	Name           string          `json:"name"`
	Type           string          `json:"type"`
	Arguments      map[string]any  `json:"arguments"`
	Durable        bool            `json:"durable"`
	AutoDelete     bool            `json:"auto_delete"`
	Internal       bool            `json:"internal"`  // exchanges
	Exclusive      bool            `json:"exclusive"` // queues
	Policy         json.RawMessage `json:"policy"`
	OperatorPolicy json.RawMessage `json:"operator_policy"`
	// Effective is effective_policy_definition, which a queue row read with disable_stats
	// carries from RabbitMQ 4.3 on (rabbit_quorum_queue, rabbit_classic_queue and
	// rabbit_stream_queue:format_policy_fields); it tells that OperatorPolicy is current.
	Effective json.RawMessage `json:"effective_policy_definition"`
}

// rawName reads a policy name field, which RabbitMQ gives as a string, or null / "" / [] for
// none.
func rawName(r json.RawMessage) string {
	var s string
	if json.Unmarshal(r, &s) == nil {
		return s
	}
	return ""
}

// numeric returns v as a float64 when it is a number.
func numeric(v any) (float64, bool) {
	switch x := v.(type) {
	case json.Number:
		f, err := x.Float64()
		return f, err == nil
	case float64:
		return x, true
	case int64:
		return float64(x), true
	case int:
		return float64(x), true
	}
	return 0, false
}

// effective merges a queue's policy definition with its operator policy's as RabbitMQ does
// (rabbit_policy: numeric keys take the lower value; operator policies may only set numeric
// keys on 3.x), remembering which policy each key came from: a problem names the policy to
// change, and before 4.3 the management API reports the names, not the merged definition.
func effective(user, op map[string]any) (def map[string]any, fromOp map[string]bool) {
	def, fromOp = map[string]any{}, map[string]bool{}
	for k, v := range user {
		def[k] = v
	}
	for k, v := range op {
		if u, ok := def[k]; ok {
			a, okA := numeric(u)
			b, okB := numeric(v)
			// delivery-limit -1 is "none" (RabbitMQ 4.x): any limit is stricter (an operator
			// policy's 2 over a policy's -1 is in effect).
			noneA := k == "delivery-limit" && okA && a < 0
			if okA && okB && a <= b && !noneA {
				continue // the user policy's value is the stricter one
			}
			if k == "delivery-limit" && okB && b < 0 {
				continue // the operator's none is not stricter than the user's limit
			}
		}
		def[k], fromOp[k] = v, true
	}
	return def, fromOp
}

// delayOverflow is the overflow behaviour in effect on a delay queue whose policies in effect
// are def: on a quorum queue a policy's overflow wins over the queue's x-overflow
// reject-publish, and reject-publish-dlx, which quorum queues do not support, counts as their
// default, drop-head (rabbit_quorum_queue:gather_policy_config and overflow/3, 3.10-4.x); a
// classic delay queue has no x-overflow argument, so a policy's overflow applies, else
// drop-head (rabbit_amqqueue_process).
func delayOverflow(def map[string]any, quorum bool) string {
	v, ok := def["overflow"].(string)
	switch {
	case !ok && quorum:
		return "reject-publish"
	case !ok:
		return "drop-head"
	case quorum && v == "reject-publish-dlx":
		return "drop-head"
	}
	return v
}

// PolicyProblems reads, through the management API, the policies in effect on p's delay
// queues, parking queue, ready queues, revocation stream, exchanges and target exchanges, and
// returns every key that breaks a guarantee (and warnings; see [PolicyProblem.Warning]),
// sorted by object and key: a key that makes delays early, deletes or drops messages, stalls
// dead-lettering, or routes due messages wrong. Each [PolicyProblem] names the key, the value
// and the fix.
//
// How a policy and an argument combine is RabbitMQ's rule (RabbitMQ 3.10 to 4.x:
// rabbit_amqqueue_process, rabbit_quorum_queue:ra_machine_config, rabbit_policy:get_arg), and
// the policy in effect on each object is the one the broker reports. Objects that do not exist
// are skipped ([Status] reports them missing). Errors wrap ErrManagement.
func (m *Management) PolicyProblems(ctx context.Context, p *Plan) ([]PolicyProblem, error) {
	v, err := m.policyView(ctx, p)
	if err != nil {
		return nil, err
	}
	return v.problems, nil
}

// overview is what the management API's overview says of the broker.
type overview struct {
	Version      string `json:"rabbitmq_version"`
	DisableStats bool   `json:"disable_stats"`
}

// policyRead is one reading of the vhost's policies, objects and overview, and the policy
// problems of a plan found in it.
type policyRead struct {
	problems          []PolicyProblem
	overview          overview
	missing           []string // the plan's queues that do not exist
	policies, ops     map[string]managedPolicy
	queues, exchanges []managedObject
}

// policyView reads the vhost's policies, operator policies, overview, queues and exchanges at
// once and finds p's policy problems in them.
func (m *Management) policyView(ctx context.Context, p *Plan) (*policyRead, error) {
	var v policyRead
	// The policy names come from the queue and exchange records (disable_stats), which
	// RabbitMQ updates before a declare or a policy change returns; the statistics name a
	// policy up to collect_statistics_interval late.
	err := parallel(append(m.objectRequests(ctx, &v), // snapshot.go
		func() (err error) { v.policies, err = m.policies(ctx, false); return err },
		func() (err error) { v.ops, err = m.policies(ctx, true); return err },
		func() error { return m.get(ctx, "api/overview", &v.overview) })...)
	if err != nil {
		return nil, err
	}
	major, _, _ := ParseVersion(v.overview.Version)
	p = p.ForBroker(major)
	unknown, err := m.fillOperatorPolicies(ctx, p, v.queues, v.ops)
	if err != nil {
		return nil, err
	}
	exists := make(map[string]bool, len(v.queues))
	for _, q := range v.queues {
		exists[q.Name] = true
	}
	for _, q := range p.Queues {
		if !exists[q.Name] {
			v.missing = append(v.missing, q.Name)
		}
	}
	v.problems = append(policyProblemsOf(p, v.policies, v.ops, v.queues, v.exchanges, major), unknown...)
	return &v, nil
}

// objectRequests are the requests that read the vhost's queues (their records: disable_stats)
// and exchanges, with their properties and policies, into v.
func (m *Management) objectRequests(ctx context.Context, v *policyRead) []func() error {
	vh := url.PathEscape(m.vhost)
	return []func() error{
		func() error {
			return m.get(ctx, "api/queues/"+vh+"?disable_stats=true&columns=name,type,durable,auto_delete,exclusive,arguments,"+
				"policy,operator_policy,effective_policy_definition", &v.queues)
		},
		func() error {
			return m.get(ctx, "api/exchanges/"+vh+"?columns=name,type,durable,auto_delete,internal,arguments,policy", &v.exchanges)
		},
	}
}

// objects returns every exchange and queue of the vhost, keyed as [policyRead.objects] keys them.
func (m *Management) objects(ctx context.Context) (map[string]*vhostObject, error) {
	var v policyRead
	if err := parallel(m.objectRequests(ctx, &v)...); err != nil {
		return nil, err
	}
	return v.objects(), nil
}

// objects keys the exchanges and queues read as "exchange NAME" and "queue NAME"
// (planObject.key's form).
func (v *policyRead) objects() map[string]*vhostObject {
	out := make(map[string]*vhostObject, len(v.queues)+len(v.exchanges))
	for kind, rows := range map[Kind][]managedObject{KindExchange: v.exchanges, KindQueue: v.queues} {
		for _, o := range rows {
			out[rowKey(kind, o.Name)] = &vhostObject{Type: o.Type, Durable: o.Durable, AutoDelete: o.AutoDelete,
				Internal: o.Internal, Exclusive: o.Exclusive, Arguments: o.Arguments}
		}
	}
	return out
}

// fillOperatorPolicies sets the operator policy of p's queues whose rows lack it: before 4.3,
// a queue row read with disable_stats names only the policy. It takes the operator policy
// from the operator policies' patterns (operatorPolicyOf), and from the queue statistics only
// where a pattern is one Go's regexp cannot run and the statistics name the same policy as the
// record.
// It returns a warning for each operator policy whose pattern Go's regexp cannot run.
func (m *Management) fillOperatorPolicies(ctx context.Context, p *Plan, queues []managedObject, ops map[string]managedPolicy) ([]PolicyProblem, error) {
	var need []int
	for i, q := range queues {
		if _, ours := p.Queue(q.Name); ours && q.Effective == nil && len(ops) > 0 {
			need = append(need, i)
		}
	}
	if len(need) == 0 {
		return nil, nil
	}
	// The patterns first: the statistics lag a policy change by up to their interval (an
	// operator policy replaced a moment ago is still named there), and an expires policy can
	// delete the queue within that lag. The statistics, read only then, decide for a pattern
	// Go's regexp cannot run.
	unsure := map[int][]string{} // queue index -> the operator policies whose pattern Go cannot run
	for _, i := range need {
		q := &queues[i]
		name, unrunnable := operatorPolicyOf(ops, *q)
		q.OperatorPolicy, _ = json.Marshal(name)
		if len(unrunnable) > 0 {
			unsure[i] = unrunnable
		}
	}
	bad := map[string]bool{}
	if len(unsure) > 0 {
		var stats []managedObject
		if err := m.get(ctx, "api/queues/"+url.PathEscape(m.vhost)+"?columns=name,policy,operator_policy", &stats); err != nil {
			return nil, err
		}
		reported := make(map[string]managedObject, len(stats))
		for _, s := range stats {
			reported[s.Name] = s
		}
		for i, unrunnable := range unsure {
			if s, ok := reported[queues[i].Name]; ok && s.OperatorPolicy != nil && rawName(s.Policy) == rawName(queues[i].Policy) {
				queues[i].OperatorPolicy = s.OperatorPolicy
				continue
			}
			for _, n := range unrunnable {
				bad[n] = true
			}
		}
	}
	var out []PolicyProblem
	for name := range bad {
		out = append(out, PolicyProblem{Kind: KindPolicy, Object: name, Policy: name, Operator: true, Key: "pattern",
			Value: ops[name].Pattern, Breaks: BreaksUnknown, Warning: true,
			Why: "before RabbitMQ 4.3 the management API names a queue's operator policy only with its statistics, which a queue " +
				"declared a moment ago has not got yet, and this pattern uses a PCRE construct Go's regexp cannot run, so whether " +
				"it applies is not known; run status again after collect_statistics_interval (5 s by default)"})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Object < out[j].Object })
	return out, nil
}

// operatorPolicyOf returns the operator policy RabbitMQ applies to queue q: of those whose
// apply-to takes q and whose pattern Go's regexp finds in q's name, the one with the highest
// priority (a tie goes to the name that sorts first; RabbitMQ documents no order). Patterns Go
// cannot compile are skipped and returned. Kept because before 4.3 an operator policy with
// expires can delete a new delay queue, with its messages, before any statistics name it.
func operatorPolicyOf(ops map[string]managedPolicy, q managedObject) (name string, unrunnable []string) {
	var best *big.Int
	for _, pol := range ops {
		switch pol.ApplyTo {
		case "all", "queues":
		case "classic_queues", "quorum_queues", "streams":
			if strings.TrimSuffix(strings.TrimSuffix(pol.ApplyTo, "s"), "_queue") != q.Type {
				continue
			}
		default:
			continue
		}
		re, err := regexp.Compile(pol.Pattern)
		if err != nil {
			unrunnable = append(unrunnable, pol.Name)
			continue
		}
		prio, ok := new(big.Int).SetString(pol.Priority.String(), 10)
		if !ok || !re.MatchString(q.Name) {
			continue
		}
		if c := prio.Cmp(orZero(best)); best == nil || c > 0 || c == 0 && pol.Name < name {
			name, best = pol.Name, prio
		}
	}
	return name, unrunnable
}

func orZero(n *big.Int) *big.Int {
	if n == nil {
		return new(big.Int)
	}
	return n
}

// policyProblemsOf is PolicyProblems on what the management API returned.
func policyProblemsOf(p *Plan, pols, ops map[string]managedPolicy, queues, exchanges []managedObject, major int) []PolicyProblem {
	var out []PolicyProblem
	add := func(pp PolicyProblem, ourPolicy string) {
		if fix := pp.fix(ourPolicy, p.Spec.PolicyPriority); fix != "" {
			pp.Why += "; fix: " + fix
		}
		out = append(out, pp)
	}
	exists := exchangeNames(exchanges)
	for _, mq := range queues {
		q, ok := p.Queue(mq.Name)
		switch {
		case !ok:
		case q.Role == RoleReady:
			out = append(out, readyQueueProblems(p, q, mq, pols, ops, major, exists)...) // with their own fix
		case q.Role == RoleRevoked:
			for _, pp := range revokedProblems(p, q, mq, pols, ops) {
				add(pp, p.Names.RevokedPolicy())
			}
		case q.IsDelay() || q.Role == RoleParking:
			for _, pp := range delayQueueProblems(p, q, mq, pols, ops, major) {
				add(pp, p.Names.DelayQueuesPolicy())
			}
		}
	}
	for _, mx := range exchanges {
		if pp, ok := exchangeProblem(p, mx, pols, exists); ok {
			out = append(out, pp)
		}
	}
	sort.SliceStable(out, func(i, j int) bool {
		if out[i].Object != out[j].Object {
			return out[i].Object < out[j].Object
		}
		return out[i].Key < out[j].Key
	})
	return out
}

// definitionOf is the policy definition in effect on queue mq, and which of its keys the
// operator policy sets. RabbitMQ 4.3 reports the merged definition
// (effective_policy_definition); before, it is merged here as the broker does ([effective]).
func definitionOf(mq managedObject, pols, ops map[string]managedPolicy) (def map[string]any, fromOp map[string]bool) {
	user, op := pols[rawName(mq.Policy)].Definition, ops[rawName(mq.OperatorPolicy)].Definition
	dec := json.NewDecoder(bytes.NewReader(mq.Effective))
	dec.UseNumber()
	if len(mq.Effective) == 0 || dec.Decode(&def) != nil || def == nil {
		return effective(user, op)
	}
	fromOp = map[string]bool{}
	for k, v := range def {
		o, inOp := op[k]
		u, inUser := user[k]
		fromOp[k] = inOp && fmt.Sprint(o) == fmt.Sprint(v) && (!inUser || fmt.Sprint(u) != fmt.Sprint(v))
	}
	return def, fromOp
}

// delayQueueProblems are the policy problems of delay or parking queue q (see
// [Management.PolicyProblems]), without their fix.
func delayQueueProblems(p *Plan, q Queue, mq managedObject, pols, ops map[string]managedPolicy, major int) []PolicyProblem {
	userName, opName := rawName(mq.Policy), rawName(mq.OperatorPolicy)
	def, fromOp := definitionOf(mq, pols, ops)
	quorum := mq.Type == string(delayspec.Quorum)
	var out []PolicyProblem
	if _, argLimit := mq.Arguments["x-delivery-limit"]; q.Role == RoleParking && quorum && major >= 4 && !argLimit {
		if _, ok := def["delivery-limit"]; !ok {
			// Kept (warning): 4.x's default limit of 20 drops a parked message given back 21 times.
			out = append(out, parkingDefaultLimit(p, q.Name, userName))
		}
	}
	for _, k := range slices.Sorted(maps.Keys(def)) {
		pp := PolicyProblem{Kind: KindQueue, Object: q.Name, Policy: userName, Key: k, Value: def[k]}
		if fromOp[k] {
			pp.Policy, pp.Operator = opName, true
		}
		if delayKeyProblem(&pp, q, delayOverflow(def, quorum), quorum) {
			out = append(out, pp)
		}
	}
	return out
}

// delayKeyProblem fills in what policy key pp.Key, of value pp.Value, breaks on delay or parking
// queue q, where overflow is in effect, and reports whether it breaks anything.
func delayKeyProblem(pp *PolicyProblem, q Queue, overflow string, quorum bool) bool {
	k, v := pp.Key, pp.Value
	n, isNum := numeric(v)
	switch {
	// Kept: the broker takes the lower TTL silently, so delayed messages arrive early.
	case q.IsDelay() && k == "message-ttl" && isNum && n < float64(q.TTL):
		pp.Breaks = BreaksEarly
		pp.Why = fmt.Sprintf("RabbitMQ applies the lower of the policy's message-ttl and the queue's x-message-ttl (%d ms), "+
			"so messages leave this delay queue after %v ms: delayed messages arrive up to %v ms early", q.TTL, v, float64(q.TTL)-n)
	// Kept: the broker deletes the queue with the messages it holds.
	case k == "expires":
		pp.Breaks = BreaksDeletes
		pp.Why = fmt.Sprintf("RabbitMQ deletes the queue, with every message it holds, once it has been unused for %v ms "+
			"(no consumer, no basic.get, no redeclaration: a delay or parking queue is always unused)", v)
	// Kept: at the limit, messages leave before their TTL (early) or are refused (stall or drop).
	case q.IsDelay() && (k == "max-length" || k == "max-length-bytes"):
		switch {
		case overflow != "reject-publish":
			pp.Breaks = BreaksEarly
			pp.Why = fmt.Sprintf("with overflow %s in effect, once the queue holds %v (messages or bytes) it dead-letters the "+
				"message it drops (the oldest; with reject-publish-dlx on a classic queue, the one arriving) into its "+
				"dead-letter exchange (reason maxlen): the message moves on before its TTL and arrives early", overflow, v)
		case quorum:
			pp.Breaks = BreaksStalls
			pp.Why = fmt.Sprintf("once the queue holds %v (messages or bytes) it refuses more (reject-publish): delayed publishes are "+
				"nacked, and messages dead-lettered into it stay in the dead-letter state of the queue before it (messages_dlx), "+
				"holding up the messages behind them", v)
		default:
			pp.Breaks = BreaksDrops
			pp.Why = fmt.Sprintf("once the queue holds %v (messages or bytes) it refuses more (overflow reject-publish): "+
				"delayed publishes are nacked, and messages dead-lettered into it are dropped", v)
		}
	// Kept: dead-lettering falls back to at-most-once, so a message in flight is lost when a node fails.
	case q.IsDelay() && quorum && k == "overflow" && fmt.Sprint(v) != "reject-publish":
		pp.Breaks = BreaksDrops
		pp.Why = fmt.Sprintf("for quorum queues a policy's overflow wins over x-overflow; with %v, at-least-once "+
			"dead-lettering falls back to at-most-once: a message being dead-lettered when a broker node fails is lost", v)
	// Kept: due messages reach their target with another routing key.
	case q.IsDelay() && k == "dead-letter-routing-key":
		pp.Breaks = BreaksRouting
		pp.Why = fmt.Sprintf("delay queues dead-letter with the message's own routing key (they have no "+
			"x-dead-letter-routing-key); this policy replaces it with %q, so due messages reach their target with the wrong "+
			"routing key", fmt.Sprint(v))
	// Kept: parked messages expire or are dropped.
	case q.Role == RoleParking && (k == "message-ttl" || k == "max-length" || k == "max-length-bytes"):
		pp.Breaks = BreaksDrops
		pp.Why = fmt.Sprintf("parked messages are kept for an operator to look at; with %s %v they expire or are dropped "+
			"(or refused, and then stall in a delay queue's dead-letter state)", k, v)
	// Kept (warning): a parked message given back more often than the limit is dropped.
	case q.Role == RoleParking && k == "delivery-limit" && fmt.Sprint(v) != "-1":
		pp.Breaks, pp.Warning = BreaksDrops, true
		pp.Why = fmt.Sprintf("a parked message returned (nack or reject with requeue) more than %v times is dropped: "+
			"read parked messages with acknowledgements and ack them", v)
	default:
		return false
	}
	return true
}

// stallOrDrop is what a due message nothing routes suffers: quorum delay queues stall on it,
// classic ones drop it.
func stallOrDrop(p *Plan) Breakage {
	if p.Spec.QueueType == delayspec.Classic {
		return BreaksDrops
	}
	return BreaksStalls
}

// exchangeProblem is the policy problem of exchange mx, if any: a target whose unroutable due
// messages are not parked, or an exchange of the topology with a policy's alternate exchange.
// exists is the set of the vhost's exchanges.
func exchangeProblem(p *Plan, mx managedObject, pols map[string]managedPolicy, exists map[string]bool) (PolicyProblem, bool) {
	userName := rawName(mx.Policy)
	if p.Spec.HasTarget(mx.Name) {
		return targetProblem(p, mx, pols, exists)
	}
	if _, hasArg := mx.Arguments["alternate-exchange"]; hasArg || userName == "" {
		return PolicyProblem{}, false
	}
	if _, ok := p.Exchange(mx.Name); !ok {
		return PolicyProblem{}, false
	}
	// Kept: a message no queue takes goes to the alternate exchange instead of back to its publisher.
	ae := pols[userName].Definition["alternate-exchange"]
	return PolicyProblem{Kind: KindExchange, Object: mx.Name, Policy: userName, Key: "alternate-exchange", Value: ae, Breaks: BreaksRouting,
		Why: fmt.Sprintf("a message this exchange of the topology routes to no queue goes to %q instead of being returned to "+
			"its publisher (mandatory) or parked; fix: make the policy's pattern not match %q", fmt.Sprint(ae), mx.Name)}, ae != nil
}

// targetProblem is the problem of target exchange mx, if any: a due message it routes to no
// queue must reach the parking queue through the targets policy's alternate exchange.
func targetProblem(p *Plan, mx managedObject, pols map[string]managedPolicy, exists map[string]bool) (PolicyProblem, bool) {
	userName := rawName(mx.Policy)
	argAE, hasArg := mx.Arguments["alternate-exchange"]
	pp := PolicyProblem{Kind: KindExchange, Object: mx.Name, Key: "alternate-exchange", Breaks: stallOrDrop(p)}
	ours, stall := p.Names.TargetsPolicy(), stallText(p.Spec.QueueType)
	switch ae := pols[userName].Definition["alternate-exchange"]; {
	// Kept (warning): unroutable due messages go to the target's own alternate exchange, not to parking.
	case hasArg:
		pp.Value, pp.Warning = argAE, true
		pp.Why = fmt.Sprintf("this target exchange has its own alternate exchange %q (an argument, which wins over "+
			"policy %q): a due message it routes to no queue goes there, not to the parking queue; make sure %q takes every message",
			fmt.Sprint(argAE), ours, fmt.Sprint(argAE))
		missingAE(p, &pp, argAE, exists)
	// Kept: the alternate exchange is gone, so an unroutable due message goes nowhere.
	case userName == ours:
		due := p.Names.DueUnroutable()
		if exists[due] {
			return pp, false
		}
		pp.Policy, pp.Value = userName, due
		pp.Why = fmt.Sprintf("policy %q gives this target the alternate exchange %q, which does not exist (a teardown "+
			"without the management API leaves the policy): a due message the target routes to no queue goes nowhere: %s; "+
			"fix: run rabbitdelay apply, or delete the policy", userName, due, stall)
	// Kept (warning): unroutable due messages go to that policy's alternate exchange, not to parking.
	case userName != "" && ae != nil:
		pp.Policy, pp.Value, pp.Warning = userName, ae, true
		pp.Why = fmt.Sprintf("policy %q applies to this target instead of %q and sends what it cannot route to %q: "+
			"a due message it routes to no queue goes there, not to the parking queue; make sure %q takes every message",
			userName, ours, fmt.Sprint(ae), fmt.Sprint(ae))
		missingAE(p, &pp, ae, exists)
	// Kept: an unroutable due message is not parked: it stalls (quorum) or is dropped (classic).
	case userName != "":
		pp.Policy = userName
		pp.Why = fmt.Sprintf("policy %q applies to this target instead of %q and sets no alternate-exchange: a due "+
			"message the target routes to no queue is not parked; %s", userName, ours, stall)
		pp.Why += "; fix: " + pp.fix(ours, p.Spec.PolicyPriority)
	// Kept: as above, the targets policy not being in effect.
	default:
		pp.Why = fmt.Sprintf("policy %q is not in effect on this target (not set: run rabbitdelay apply with the management API, "+
			"or the rabbitmqctl set_policy command it prints): a due message the target routes to no queue is not parked; %s", ours, stall)
	}
	return pp, true
}

// missingAE turns a warning about a target's own alternate exchange into an error when that
// exchange does not exist: RabbitMQ then routes the message nowhere, and at-least-once
// dead-lettering retries it forever (classic delay queues drop it).
func missingAE(p *Plan, pp *PolicyProblem, ae any, exists map[string]bool) {
	if name := fmt.Sprint(ae); !exists[name] {
		pp.Warning = false
		pp.Why = fmt.Sprintf("the alternate exchange %q in effect on this target exchange does not exist, so a due message "+
			"the target routes to no queue goes nowhere: %s; fix: declare %q, or remove it from the target (the argument or "+
			"the policy) so that %q, which parks such messages, applies", name, stallText(p.Spec.QueueType), name, p.Names.TargetsPolicy())
	}
}

// readyQueueProblems are the policy problems of ready queue q (see [Management.PolicyProblems]).
// The topology sets no policy on ready queues: they belong to the application that consumes
// them, whose own policies (a length limit, a TTL for messages nobody wants late, a leader
// locator) are its business, and a policy of the topology would shadow them all. What is
// reported is what loses or misroutes due messages. A quorum ready queue that `rabbitdelay apply`
// declared with a delivery limit has x-dead-letter-exchange <prefix>.unroutable (an argument,
// which wins over a policy's), so what it expires, drops at its length limit or returns past
// its limit is parked: a warning. Without it (classic ready queues, or ReadyDeliveryLimit -1)
// the same is lost, unless the policy in effect gives a dead-letter-exchange of its own.
func readyQueueProblems(p *Plan, q Queue, mq managedObject, pols, ops map[string]managedPolicy, major int, exchanges map[string]bool) []PolicyProblem {
	userName, opName := rawName(mq.Policy), rawName(mq.OperatorPolicy)
	def, fromOp := definitionOf(mq, pols, ops)
	dlxValue, ownDLX := def["dead-letter-exchange"]
	r := readyQueue{p: p, parks: q.Args["x-dead-letter-exchange"] == p.Names.Unroutable(), ownDLX: ownDLX, dlx: fmt.Sprint(dlxValue),
		exchanges: exchanges, overflow: fmt.Sprint(def["overflow"])}
	var out []PolicyProblem
	_, argLimit := mq.Arguments["x-delivery-limit"]
	// Kept: 4.x's default limit of 20 drops a due message given back 21 times (no dead-letter exchange).
	if _, policyLimit := def["delivery-limit"]; major >= 4 && mq.Type == "quorum" && !argLimit && !policyLimit && !r.parks && !ownDLX {
		out = append(out, PolicyProblem{Kind: KindQueue, Object: q.Name, Key: "delivery-limit", Value: "none (RabbitMQ 4.x default: 20)",
			Breaks: BreaksDrops, Why: "RabbitMQ 4.x gives a quorum queue without a delivery limit one of 20, and this ready queue (declared " +
				"without x-delivery-limit: AMQPDELAY_READY_DELIVERY_LIMIT=-1) has no dead-letter exchange, so a due message returned " +
				"(nack or reject with requeue, or its consumer gone) more than 20 times is dropped; fix: give it a delivery limit " +
				"(AMQPDELAY_READY_DELIVERY_LIMIT, after deleting the queue: the topology then parks what it takes out), or set a " +
				"policy with delivery-limit -1 (none) on it"})
	}
	for _, k := range slices.Sorted(maps.Keys(def)) {
		pp := PolicyProblem{Kind: KindQueue, Object: q.Name, Policy: userName, Key: k, Value: def[k]}
		if fromOp[k] {
			pp.Policy, pp.Operator = opName, true
		}
		if !r.keyProblem(&pp) {
			continue
		}
		if pp.Operator {
			pp.Why += "; fix: " + pp.fix("", 0)
		} else if !pp.Warning {
			pp.Why += fmt.Sprintf("; fix: remove %s from policy %q or make its pattern not match this ready queue (the topology sets no "+
				"policy on ready queues: they are the application's)", k, pp.Policy)
		}
		out = append(out, pp)
	}
	return out
}

// readyQueue is what decides the effect of a policy key on a ready queue.
type readyQueue struct {
	p         *Plan
	parks     bool   // the queue dead-letters to <prefix>.unroutable (its argument, which wins over a policy's)
	ownDLX    bool   // the policy in effect sets dead-letter-exchange
	dlx       string // that exchange
	exchanges map[string]bool
	overflow  string // the policy's overflow
}

// keyProblem fills in what policy key pp.Key, of value pp.Value, breaks, and reports whether
// it breaks anything (warnings included).
func (r readyQueue) keyProblem(pp *PolicyProblem) bool {
	v := pp.Value
	switch pp.Key {
	// Kept: the broker deletes the ready queue with its due messages.
	case "expires":
		pp.Breaks = BreaksDeletes
		pp.Why = fmt.Sprintf("RabbitMQ deletes this ready queue, with every due message it holds, once it has been unused for %v ms "+
			"(no consumer, no basic.get, no redeclaration), and due messages for it are then routed elsewhere or parked", v)
	// Kept: due messages expire from the ready queue (parked or lost).
	case "message-ttl":
		r.lost(pp, fmt.Sprintf("due messages not consumed within %v ms expire from this ready queue", v))
	// Kept: at the limit due messages are dropped, or refused so that dead-lettering stalls.
	case "max-length", "max-length-bytes":
		if r.overflow == "reject-publish" || r.overflow == "reject-publish-dlx" {
			pp.Breaks = stallOrDrop(r.p)
			pp.Why = fmt.Sprintf("once this ready queue holds %v (messages or bytes), overflow %s refuses due messages "+
				"dead-lettered into it: %s", v, r.overflow, stallText(r.p.Spec.QueueType))
		} else {
			r.lost(pp, fmt.Sprintf("once this ready queue holds %v (messages or bytes), it drops the oldest due messages", v))
		}
	// Kept: a due message given back past the limit is taken out (parked or lost).
	case "delivery-limit":
		if fmt.Sprint(v) == "-1" {
			return false // none (RabbitMQ 4.x)
		}
		r.lost(pp, fmt.Sprintf("a due message returned (nack or reject with requeue, or its consumer gone) more than %v times "+
			"is taken out of this ready queue", v))
	// Kept (warning): parked messages lose their routing key.
	case "dead-letter-routing-key":
		if !r.parks {
			return false // the application's own dead-lettering
		}
		pp.Breaks, pp.Warning = BreaksRouting, true
		pp.Why = fmt.Sprintf("messages this ready queue parks (rejected, or past its delivery limit) lose their routing key for %q", fmt.Sprint(v))
	default:
		return false
	}
	return true
}

// lost says where the due messages the queue takes out (what) go: parked (a warning),
// dead-lettered by the policy (a warning), or lost.
func (r readyQueue) lost(pp *PolicyProblem, what string) {
	switch {
	case r.parks:
		pp.Breaks, pp.Warning = BreaksDrops, true
		pp.Why = what + fmt.Sprintf(": this ready queue dead-letters them to %q, so they are parked in %q, not lost", r.p.Names.Unroutable(), r.p.Names.Parking())
	case r.ownDLX && (r.dlx == "" || r.exchanges[r.dlx]):
		pp.Breaks, pp.Warning = BreaksRouting, true
		pp.Why = what + fmt.Sprintf(": they are dead-lettered to the policy's dead-letter-exchange %q", r.dlx)
	case r.ownDLX:
		// RabbitMQ drops a message dead-lettered to an exchange that does not exist
		// (rabbit_dead_letter: no route), so this loses due messages as surely as none.
		pp.Breaks = BreaksDrops
		pp.Why = what + fmt.Sprintf(": the policy dead-letters them to exchange %q, which does not exist, so they are lost", r.dlx)
	default:
		pp.Breaks = BreaksDrops
		pp.Why = what + ": this ready queue has no dead-letter exchange, so they are lost"
	}
}

// exchangeNames is the set of the names of exchanges.
func exchangeNames(exchanges []managedObject) map[string]bool {
	set := make(map[string]bool, len(exchanges))
	for _, x := range exchanges {
		set[x.Name] = true
	}
	return set
}

// revokedProblems are the policy problems of the revocation stream q (see
// [Management.PolicyProblems]). For a stream, RabbitMQ takes a policy's max-age and
// max-length-bytes over the stream's own x-max-age and x-max-length-bytes
// (rabbit_stream_queue:policy_precedence/2, 3.10.8 and 4.0.5), merging a policy's
// max-length-bytes with an operator policy's by the lower value (rabbit_policies; operator
// policies cannot set max-age). The other keys a policy on a stream may hold
// (stream-max-segment-size-bytes, queue-leader-locator, initial-cluster-size, 4.x's
// stream-filter-size-bytes) drop no record: retention deletes whole segments, and only once
// every record in one is past the retention.
func revokedProblems(p *Plan, q Queue, mq managedObject, pols, ops map[string]managedPolicy) []PolicyProblem {
	userName, opName := rawName(mq.Policy), rawName(mq.OperatorPolicy)
	def, fromOp := definitionOf(mq, pols, ops)
	retention := p.Spec.RevocationRetention()
	var out []PolicyProblem
	for _, k := range []string{"max-age", "max-length-bytes"} {
		v, ok := def[k]
		if !ok {
			continue
		}
		pp := PolicyProblem{Kind: KindQueue, Object: q.Name, Policy: userName, Key: k, Value: v, Breaks: BreaksRevocations}
		if fromOp[k] {
			pp.Policy, pp.Operator = opName, true
		}
		const lost = "revoked messages due after that reach handlers"
		switch k {
		// Kept: revocations are deleted before their messages are due, which then reach handlers.
		case "max-age":
			if age, ok := delayspec.ParseMaxAge(v); ok && age >= retention {
				continue
			}
			pp.Why = fmt.Sprintf("RabbitMQ applies a policy's max-age to a stream instead of its x-max-age (%s): revocations are deleted "+
				"after %v, before the messages they name are due (the topology's longest delay plus a day), and %s", revokedMaxAge(p.Spec), v, lost)
		// Kept: as max-age, by size.
		case "max-length-bytes":
			pp.Why = fmt.Sprintf("RabbitMQ deletes a stream's oldest records once it holds more than %v bytes (the policy's value wins "+
				"over an x-max-length-bytes argument), whatever their age: revocations (and fences) fill it, and %s", v, lost)
		}
		out = append(out, pp)
	}
	return out
}

func stallText(t delayspec.QueueType) string {
	if t == delayspec.Classic {
		return "classic queues drop it"
	}
	return "quorum queues keep it in their dead-letter state and retry it forever, and once more such messages are stuck " +
		"than the dead-letter worker's prefetch (dead_letter_worker_consumer_prefetch, 32 by default) the whole delay queue stalls"
}

// Failing returns the problems that are not warnings.
func Failing(problems []PolicyProblem) []PolicyProblem {
	var out []PolicyProblem
	for _, pp := range problems {
		if !pp.Warning {
			out = append(out, pp)
		}
	}
	return out
}

// DispatchBound reports whether the dispatch exchange of p is bound to target with the plan's
// binding ({x-match: all, rabbitdelay-target: target}), reading the broker's bindings through
// the management API. It returns
// false for a target the plan does not have. Errors wrap ErrManagement (a missing dispatch
// exchange answers 404).
func (m *Management) DispatchBound(ctx context.Context, p *Plan, target string) (bool, error) {
	var want *Binding
	for _, b := range p.Bindings {
		if b.Role == RoleDispatch && b.Source == p.Names.Dispatch() && b.Destination == target && b.DestinationType == DestExchange {
			want = &b
			break
		}
	}
	if want == nil {
		return false, nil
	}
	var raw []struct {
		Destination     string         `json:"destination"`
		DestinationType string         `json:"destination_type"`
		RoutingKey      string         `json:"routing_key"`
		Arguments       map[string]any `json:"arguments"`
	}
	path := "api/exchanges/" + url.PathEscape(m.vhost) + "/" + url.PathEscape(p.Names.Dispatch()) + "/bindings/source"
	if err := m.get(ctx, path, &raw); err != nil {
		return false, err
	}
	for _, b := range raw {
		if bindingKey(p.Names.Dispatch(), b.Destination, b.DestinationType, b.RoutingKey, b.Arguments) == want.key() {
			return true, nil
		}
	}
	return false, nil
}

// parkingDefaultLimit is the warning for a quorum parking queue on RabbitMQ 4.x that no
// delivery limit is set on: neither the delay-queue policy's delivery-limit -1 ([Plan.ForBroker];
// policy userName applies instead, or none does) nor an argument. RabbitMQ 4.x then gives the
// queue its default limit of 20 (rabbit_quorum_queue; 3.x has none), so a parked message that a
// reader gives back as failed more often is dropped: the same reader loses nothing on 3.x.
func parkingDefaultLimit(p *Plan, parking, userName string) PolicyProblem {
	ours := p.Names.DelayQueuesPolicy()
	pp := PolicyProblem{Kind: KindQueue, Object: parking, Policy: userName, Key: "delivery-limit", Value: "none (RabbitMQ 4.x default: 20)",
		Breaks: BreaksDrops, Warning: true}
	var src string
	switch userName {
	case "":
		pp.Value = nil // Error: "no policy sets delivery-limit"
		src = fmt.Sprintf("policy %q, which sets delivery-limit -1 (none), is not in effect on it (run rabbitdelay apply with the management API)", ours)
	case ours:
		src = fmt.Sprintf("policy %q lacks delivery-limit -1 (none), as rabbitdelay apply sets it for RabbitMQ 3.x (run rabbitdelay apply again)", ours)
	default:
		src = fmt.Sprintf("policy %q applies to it instead of %q, which sets delivery-limit -1 (none)", userName, ours)
	}
	pp.Why = "RabbitMQ 4.x gives a quorum queue without a delivery limit one of 20, and " + src + ": a parked message returned " +
		"as failed (reject with requeue, or its reader gone; before 4.3 also nack with requeue) more than 20 times is " +
		"dropped; read parked messages with acknowledgements and ack them"
	return pp
}
