package admin

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/big"
	"net/url"
	"regexp"
	"sort"
	"strings"
)

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
// change. Kept: before 4.3 the management API reports the names, not the merged definition.
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

// DispatchBound reports whether the dispatch exchange of p is bound to target with the plan's
// binding ({x-match: all, rabbitdelay-target: target}), reading the broker's bindings through
// the management API. It returns false for a target the plan does not have. Errors wrap
// ErrManagement (a missing dispatch exchange answers 404).
func (m *Management) DispatchBound(ctx context.Context, p *Plan, target string) (bool, error) {
	want, ok := p.dispatchBinding(target)
	if !ok {
		return false, nil
	}
	have, err := m.dispatchBindings(ctx, p)
	return have[want.key()], err
}

// dispatchBinding is the plan's binding of the dispatch exchange to target.
func (p *Plan) dispatchBinding(target string) (Binding, bool) {
	for _, b := range p.Bindings {
		if b.Role == RoleDispatch && b.Source == p.Names.Dispatch() && b.Destination == target && b.DestinationType == DestExchange {
			return b, true
		}
	}
	return Binding{}, false
}

// dispatchBindings returns the keys (see bindingKey) of the dispatch exchange's bindings.
func (m *Management) dispatchBindings(ctx context.Context, p *Plan) (map[string]bool, error) {
	var have []Binding
	path := "api/exchanges/" + url.PathEscape(m.vhost) + "/" + url.PathEscape(p.Names.Dispatch()) + "/bindings/source"
	if err := m.get(ctx, path, &have); err != nil {
		return nil, err
	}
	return bindingKeys(have), nil
}
