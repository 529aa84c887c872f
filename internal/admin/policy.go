package admin

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"math/big"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/delaykit/rabbitdelay/internal/delayspec"
)

// managedObject is a queue or exchange as the management API lists it, with its policies.
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
	// Effective is in a disable_stats queue row from RabbitMQ 4.3 on
	// (format_policy_fields); it tells that OperatorPolicy is current.
	Effective json.RawMessage `json:"effective_policy_definition"`
}

// rawName reads a policy name field: a string, or null / "" / [] for none.
func rawName(r json.RawMessage) string {
	var s string
	if json.Unmarshal(r, &s) == nil {
		return s
	}
	return ""
}

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
// (rabbit_policy: numeric keys take the lower value), noting which keys the operator policy
// sets. Needed before 4.3, whose management API gives only the policies' names.
func effective(user, op map[string]any) (def map[string]any, fromOp map[string]bool) {
	def, fromOp = map[string]any{}, map[string]bool{}
	maps.Copy(def, user)
	for k, v := range op {
		if u, ok := def[k]; ok {
			a, okA := numeric(u)
			b, okB := numeric(v)
			// delivery-limit -1 is "none" (4.x): any limit is stricter.
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

// delayOverflow is the overflow in effect on a delay queue under policy definition def: a
// policy's overflow wins over a quorum queue's x-overflow, and quorum queues take
// reject-publish-dlx as drop-head (rabbit_quorum_queue:overflow/3); classic delay queues
// default to drop-head.
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

// PolicyProblems reads the policies in effect on p's queues and exchanges through the
// management API and returns every key that breaks a guarantee, and warnings
// ([PolicyProblem.Warning]), sorted by object and key. How a policy and an argument combine is
// RabbitMQ's rule (rabbit_quorum_queue:ra_machine_config, rabbit_policy:get_arg); objects that
// do not exist are skipped. Errors wrap ErrManagement.
func (m *Management) PolicyProblems(ctx context.Context, p *Plan) ([]PolicyProblem, error) {
	v, err := m.policyView(ctx, p)
	if err != nil {
		return nil, err
	}
	return v.problems, nil
}

type overview struct {
	Version      string `json:"rabbitmq_version"`
	DisableStats bool   `json:"disable_stats"`
}

// policyRead is one reading of the vhost's policies, objects and overview, and a plan's
// policy problems in it.
type policyRead struct {
	problems          []PolicyProblem
	overview          overview
	missing           []string // the plan's queues that do not exist
	policies, ops     map[string]managedPolicy
	queues, exchanges []managedObject
}

// policyView reads the vhost's policies, operator policies, overview, queues and exchanges at
// once and finds p's policy problems in them. Policy names come from the object records
// (disable_stats), current when a declare returns, unlike the statistics.
func (m *Management) policyView(ctx context.Context, p *Plan) (*policyRead, error) {
	var v policyRead
	err := parallel(append(m.objectRequests(ctx, &v),
		func() (err error) { v.policies, err = m.policies(ctx, "policies"); return err },
		func() (err error) { v.ops, err = m.policies(ctx, "operator-policies"); return err },
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
	for _, q := range p.Queues {
		if !slices.ContainsFunc(v.queues, func(o managedObject) bool { return o.Name == q.Name }) {
			v.missing = append(v.missing, q.Name)
		}
	}
	v.problems = append(policyProblemsOf(p, v.policies, v.ops, v.queues, v.exchanges, major), unknown...)
	return &v, nil
}

// objectRequests read the vhost's queue records (disable_stats) and exchanges into v.
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

// objects returns every exchange and queue of the vhost, keyed by rowKey.
func (m *Management) objects(ctx context.Context) (map[string]*managedObject, error) {
	var v policyRead
	if err := parallel(m.objectRequests(ctx, &v)...); err != nil {
		return nil, err
	}
	return v.objects(), nil
}

func (v *policyRead) objects() map[string]*managedObject {
	out := make(map[string]*managedObject, len(v.queues)+len(v.exchanges))
	for kind, rows := range map[Kind][]managedObject{KindExchange: v.exchanges, KindQueue: v.queues} {
		for i := range rows {
			out[rowKey(kind, rows[i].Name)] = &rows[i]
		}
	}
	return out
}

// fillOperatorPolicies sets the operator policy of p's queues whose rows lack it (before 4.3):
// from the operator policies' patterns (operatorPolicyOf), or, where Go's regexp cannot run a
// pattern, from the queue statistics when they name the record's policy. It returns a warning
// for each pattern still undecided.
func (m *Management) fillOperatorPolicies(ctx context.Context, p *Plan, queues []managedObject, ops map[string]managedPolicy) ([]PolicyProblem, error) {
	// Patterns first: the statistics lag a policy change, and an expires policy can delete the
	// queue within that lag.
	unsure := map[int][]string{} // queue index -> the operator policies whose pattern Go cannot run
	for i := range queues {
		q := &queues[i]
		if _, ours := p.Queue(q.Name); !ours || q.Effective != nil || len(ops) == 0 {
			continue
		}
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
		for i, unrunnable := range unsure {
			j := slices.IndexFunc(stats, func(s managedObject) bool { return s.Name == queues[i].Name })
			if j >= 0 && stats[j].OperatorPolicy != nil && rawName(stats[j].Policy) == rawName(queues[i].Policy) {
				queues[i].OperatorPolicy = stats[j].OperatorPolicy
				continue
			}
			for _, n := range unrunnable {
				bad[n] = true
			}
		}
	}
	var out []PolicyProblem
	for _, name := range slices.Sorted(maps.Keys(bad)) {
		out = append(out, PolicyProblem{Kind: KindPolicy, Object: name, Policy: name, Operator: true, Key: "pattern",
			Value: ops[name].Pattern, Breaks: BreaksUnknown, Warning: true,
			Why: "before RabbitMQ 4.3 the management API names a queue's operator policy only with its statistics, which a queue " +
				"declared a moment ago has not got yet, and this pattern uses a PCRE construct Go's regexp cannot run, so whether " +
				"it applies is not known; run status again after collect_statistics_interval (5 s by default)"})
	}
	return out, nil
}

// operatorPolicyOf returns the operator policy RabbitMQ applies to queue q: the highest
// priority of those whose apply-to takes q and whose pattern matches (ties: the first name).
// Patterns Go cannot compile are skipped and returned.
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
		if best == nil || prio.Cmp(best) > 0 || prio.Cmp(best) == 0 && pol.Name < name {
			name, best = pol.Name, prio
		}
	}
	return name, unrunnable
}

// definitionOf is the policy definition in effect on queue mq (4.3 reports it merged; before,
// [effective] merges it), and which of its keys the operator policy sets.
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

// DispatchBound reports whether p's dispatch exchange has the plan's binding to target, by the
// management API; false for a target the plan does not have. Errors wrap ErrManagement.
func (m *Management) DispatchBound(ctx context.Context, p *Plan, target string) (bool, error) {
	want, ok := p.dispatchBinding(target)
	if !ok {
		return false, nil
	}
	have, err := m.dispatchBindings(ctx, p)
	return have[want.key()], err
}

func (p *Plan) dispatchBinding(target string) (Binding, bool) {
	return find(p.Bindings, func(b Binding) bool {
		return b.Role == RoleDispatch && b.Source == p.Names.Dispatch() && b.Destination == target && b.DestinationType == DestExchange
	})
}

func (m *Management) dispatchBindings(ctx context.Context, p *Plan) (map[string]bool, error) {
	var have []Binding
	path := "api/exchanges/" + url.PathEscape(m.vhost) + "/" + url.PathEscape(p.Names.Dispatch()) + "/bindings/source"
	if err := m.get(ctx, path, &have); err != nil {
		return nil, err
	}
	return bindingKeys(have), nil
}

// KindPolicy is the kind of a policy in a [Report].
const KindPolicy Kind = "policy"

// managedPolicy is a policy as GET /api/policies/<vhost> lists it.
type managedPolicy struct {
	Name       string         `json:"name"`
	Pattern    string         `json:"pattern"`
	ApplyTo    string         `json:"apply-to"`
	Priority   json.Number    `json:"priority"`
	Definition map[string]any `json:"definition"`
}

// policies lists the vhost's policies of kind "policies" or "operator-policies", by name.
func (m *Management) policies(ctx context.Context, kind string) (map[string]managedPolicy, error) {
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

// samePolicy reports whether have matches want (values compared printed: JSON numbers).
func samePolicy(have managedPolicy, want Policy) bool {
	return have.Pattern == want.Pattern && have.ApplyTo == want.ApplyTo && have.Priority.String() == strconv.Itoa(want.Priority) &&
		maps.EqualFunc(have.Definition, want.Definition, func(h, w any) bool { return fmt.Sprint(h) == fmt.Sprint(w) })
}

// writePolicies sets p's policies in the client's vhost and reports each as StateCreated,
// StateUnchanged or StateUpdated (dryRun: StateMissing or StateUpdated, nothing written), or
// with del deletes them and reports each as StateDeleted or StateAbsent (dryRun: nothing
// deleted). Errors wrap ErrManagement; a refusal (401/403) names the user tag needed.
func (m *Management) writePolicies(ctx context.Context, p *Plan, dryRun, del bool) ([]Result, error) {
	have, err := m.policies(ctx, "policies")
	if err != nil {
		return nil, err
	}
	var out []Result
	for _, pol := range p.Policies {
		r := Result{Kind: KindPolicy, Name: pol.Name, State: StateCreated}
		old, exists := have[pol.Name]
		method, verb, failed, body := http.MethodPut, "set", StateNotDeclared, any(nil)
		switch {
		case del:
			method, verb, failed, r.State = http.MethodDelete, "delete", StateNotDeleted, StateAbsent
			if exists {
				r.State = StateDeleted
			}
		case exists && samePolicy(old, pol):
			r.State = StateUnchanged
		case exists:
			r.State = StateUpdated
			r.Detail = fmt.Sprintf("was pattern %.60q priority %s definition %v", old.Pattern, old.Priority, FormatArgs(old.Definition))
		case dryRun:
			r.State = StateMissing
		}
		if !del {
			body = map[string]any{"pattern": pol.Pattern, "apply-to": pol.ApplyTo, "priority": pol.Priority, "definition": pol.Definition}
		}
		if !dryRun && r.State != StateUnchanged && r.State != StateAbsent {
			err := m.do(ctx, method, "api/policies/"+url.PathEscape(m.vhost)+"/"+url.PathEscape(pol.Name), body, nil)
			if err != nil && (!del || httpStatus(err) != http.StatusNotFound) {
				r.State, r.Detail = failed, err.Error()
				advice := ""
				if s := httpStatus(err); s == http.StatusUnauthorized || s == http.StatusForbidden {
					advice = ": setting policies needs a user with the policymaker (or administrator) tag and configure permission on the vhost " +
						"(rabbitmqctl set_user_tags <user> policymaker), or set them yourself with the rabbitmqctl commands of [Plan.PolicyCommands]"
				}
				return append(out, r), fmt.Errorf("topology: %s policy %q: %w%s", verb, pol.Name, err, advice)
			}
		}
		out = append(out, r)
	}
	return out, nil
}

// PolicyCommands returns the rabbitmqctl commands that set p's policies in vhost.
func (p *Plan) PolicyCommands(vhost string) []string {
	vhost = cmp.Or(vhost, "/")
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
	BreaksEarly   Breakage = "early"   // delayed messages arrive before they are due
	BreaksDeletes Breakage = "deletes" // the queue is deleted with its messages
	BreaksDrops   Breakage = "drops"   // messages can be lost
	// BreaksStalls: messages stop moving (stuck in dead-letter state)
	BreaksStalls      Breakage = "stalls"
	BreaksRevocations Breakage = "revocations lost" // revoked messages reach handlers
	BreaksRouting     Breakage = "wrong routing"    // messages go somewhere they should not
	// BreaksUnknown: before 4.3, an operator policy whose pattern Go cannot run and that a new
	// queue's statistics do not name yet.
	BreaksUnknown Breakage = "not checked"
)

// PolicyProblem is one policy key in effect on an object of the topology that breaks (or, with
// Warning, may break) a guarantee. Error names the policy, key, value, object, effect and fix.
type PolicyProblem struct {
	Kind   Kind   `json:"kind"`
	Object string `json:"object"`
	// Policy sets Key; "" for the object's own argument or when no policy applies where one
	// should.
	Policy string `json:"policy"`
	// Operator: Policy is an operator policy, which no policy of the topology can shadow.
	Operator bool     `json:"operator,omitempty"`
	Key      string   `json:"key"`
	Value    any      `json:"value"` // value in effect (numbers as json.Number), nil when missing
	Breaks   Breakage `json:"breaks"`
	// Warning: not a broken guarantee by itself; Status and Apply do not fail on it.
	Warning bool   `json:"warning,omitempty"`
	Why     string `json:"why"`
}

// Error is `operator policy "p" sets message-ttl = 1000 on queue "q": early: ...`.
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
	case pp.Policy == "" || pp.Policy == ours:
		return ""
	default:
		return fmt.Sprintf("policy %q has a priority at or above %d, so it applies instead of %q: lower its priority, "+
			"or make its pattern not match %q (or raise --policy-priority above it and run rabbitdelay apply)", pp.Policy, priority, ours, pp.Object)
	}
}

func policyProblemsOf(p *Plan, pols, ops map[string]managedPolicy, queues, exchanges []managedObject, major int) []PolicyProblem {
	var out []PolicyProblem
	add := func(pp PolicyProblem, ourPolicy string) {
		if fix := pp.fix(ourPolicy, p.Spec.PolicyPriority); fix != "" {
			pp.Why += "; fix: " + fix
		}
		out = append(out, pp)
	}
	exists := make(map[string]bool, len(exchanges)) // the vhost's exchanges
	for _, x := range exchanges {
		exists[x.Name] = true
	}
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
	slices.SortStableFunc(out, func(a, b PolicyProblem) int {
		return cmp.Or(cmp.Compare(a.Object, b.Object), cmp.Compare(a.Key, b.Key))
	})
	return out
}

// inEffect returns the policy definition in effect on queue mq and a function giving the
// problem of key k, named after the policy that sets it.
func inEffect(mq managedObject, pols, ops map[string]managedPolicy) (map[string]any, func(k string) PolicyProblem) {
	def, fromOp := definitionOf(mq, pols, ops)
	return def, func(k string) PolicyProblem {
		pp := PolicyProblem{Kind: KindQueue, Object: mq.Name, Policy: rawName(mq.Policy), Key: k, Value: def[k]}
		if fromOp[k] {
			pp.Policy, pp.Operator = rawName(mq.OperatorPolicy), true
		}
		return pp
	}
}

// delayQueueProblems are the policy problems of delay or parking queue q, without their fix.
func delayQueueProblems(p *Plan, q Queue, mq managedObject, pols, ops map[string]managedPolicy, major int) []PolicyProblem {
	def, problem := inEffect(mq, pols, ops)
	quorum := mq.Type == string(delayspec.Quorum)
	var out []PolicyProblem
	if _, argLimit := mq.Arguments["x-delivery-limit"]; q.Role == RoleParking && quorum && major >= 4 && !argLimit {
		if _, ok := def["delivery-limit"]; !ok {
			// Kept (warning): 4.x's default limit of 20 drops a parked message given back 21 times.
			out = append(out, parkingDefaultLimit(p, q.Name, rawName(mq.Policy)))
		}
	}
	for _, k := range slices.Sorted(maps.Keys(def)) {
		if pp := problem(k); delayKeyProblem(&pp, q, delayOverflow(def, quorum), quorum) {
			out = append(out, pp)
		}
	}
	return out
}

// delayKeyProblem fills in what pp.Key breaks on delay or parking queue q under overflow, and
// reports whether it breaks anything.
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

// stallOrDrop is what a due message nothing routes suffers (classic delay queues drop it).
func stallOrDrop(p *Plan) Breakage {
	if p.Spec.QueueType == delayspec.Classic {
		return BreaksDrops
	}
	return BreaksStalls
}

// exchangeProblem is the policy problem of exchange mx, if any: a target whose unroutable due
// messages are not parked, or a topology exchange with a policy's alternate exchange.
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
// queue must be parked through the targets policy's alternate exchange.
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

// missingAE turns a warning about a target's alternate exchange into an error when that
// exchange does not exist (the message then goes nowhere).
func missingAE(p *Plan, pp *PolicyProblem, ae any, exists map[string]bool) {
	if name := fmt.Sprint(ae); !exists[name] {
		pp.Warning = false
		pp.Why = fmt.Sprintf("the alternate exchange %q in effect on this target exchange does not exist, so a due message "+
			"the target routes to no queue goes nowhere: %s; fix: declare %q, or remove it from the target (the argument or "+
			"the policy) so that %q, which parks such messages, applies", name, stallText(p.Spec.QueueType), name, p.Names.TargetsPolicy())
	}
}

// readyQueueProblems are the policy problems of ready queue q: the topology sets no policy on
// the application's queues, but reports what loses or misroutes due messages (a warning when
// they are parked through the queue's x-dead-letter-exchange, which wins over a policy's).
func readyQueueProblems(p *Plan, q Queue, mq managedObject, pols, ops map[string]managedPolicy, major int, exchanges map[string]bool) []PolicyProblem {
	def, problem := inEffect(mq, pols, ops)
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
		pp := problem(k)
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

type readyQueue struct {
	p         *Plan
	parks     bool   // the queue dead-letters to <prefix>.unroutable (its argument, which wins over a policy's)
	ownDLX    bool   // the policy in effect sets dead-letter-exchange
	dlx       string // that exchange
	exchanges map[string]bool
	overflow  string // the policy's overflow
}

// keyProblem fills in what pp.Key breaks, and reports whether it breaks anything (warnings
// included).
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

// lost says where the due messages the queue takes out (what) go: parked or dead-lettered by
// the policy (warnings), or lost.
func (r readyQueue) lost(pp *PolicyProblem, what string) {
	switch {
	case r.parks:
		pp.Breaks, pp.Warning = BreaksDrops, true
		pp.Why = what + fmt.Sprintf(": this ready queue dead-letters them to %q, so they are parked in %q, not lost", r.p.Names.Unroutable(), r.p.Names.Parking())
	case r.ownDLX && (r.dlx == "" || r.exchanges[r.dlx]):
		pp.Breaks, pp.Warning = BreaksRouting, true
		pp.Why = what + fmt.Sprintf(": they are dead-lettered to the policy's dead-letter-exchange %q", r.dlx)
	case r.ownDLX:
		// RabbitMQ drops what it dead-letters to a missing exchange (rabbit_dead_letter).
		pp.Breaks = BreaksDrops
		pp.Why = what + fmt.Sprintf(": the policy dead-letters them to exchange %q, which does not exist, so they are lost", r.dlx)
	default:
		pp.Breaks = BreaksDrops
		pp.Why = what + ": this ready queue has no dead-letter exchange, so they are lost"
	}
}

// revokedProblems are the policy problems of the revocation stream q: a policy's max-age and
// max-length-bytes win over the stream's arguments (rabbit_stream_queue:policy_precedence/2);
// no other stream key drops a record.
func revokedProblems(p *Plan, q Queue, mq managedObject, pols, ops map[string]managedPolicy) []PolicyProblem {
	def, problem := inEffect(mq, pols, ops)
	retention := p.Spec.RevocationRetention()
	var out []PolicyProblem
	for _, k := range []string{"max-age", "max-length-bytes"} {
		v, ok := def[k]
		if !ok {
			continue
		}
		pp := problem(k)
		pp.Breaks = BreaksRevocations
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

// Failing returns the problems that are not warnings (nil when none).
func Failing(problems []PolicyProblem) []PolicyProblem {
	var out []PolicyProblem
	for _, pp := range problems {
		if !pp.Warning {
			out = append(out, pp)
		}
	}
	return out
}

// parkingDefaultLimit is the warning for a quorum parking queue on 4.x without delivery limit
// (policy userName, or none, applies instead of ours), which then gets 4.x's default of 20.
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
