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
