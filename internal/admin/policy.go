package admin

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
)

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

// samePolicy reports whether have matches want (values compared printed: JSON numbers).
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

func policyAdvice(err error) string {
	switch httpStatus(err) {
	case http.StatusUnauthorized, http.StatusForbidden:
		return ": setting policies needs a user with the policymaker (or administrator) tag and configure permission on the vhost " +
			"(rabbitmqctl set_user_tags <user> policymaker), or set them yourself with the rabbitmqctl commands of [Plan.PolicyCommands]"
	}
	return ""
}

// SetPolicies creates or overwrites p's policies in the client's vhost and reports each as
// StateCreated, StateUnchanged or StateUpdated (dryRun: StateMissing or StateUpdated, nothing
// written). Errors wrap ErrManagement; a refusal (401/403) names the user tag needed.
func (m *Management) SetPolicies(ctx context.Context, p *Plan, dryRun bool) ([]Result, error) {
	return m.writePolicies(ctx, p, dryRun, false)
}

// DeletePolicies deletes p's policies and reports each as StateDeleted or StateAbsent (dryRun:
// nothing deleted). Errors wrap ErrManagement.
func (m *Management) DeletePolicies(ctx context.Context, p *Plan, dryRun bool) ([]Result, error) {
	return m.writePolicies(ctx, p, dryRun, true)
}

func (m *Management) writePolicies(ctx context.Context, p *Plan, dryRun, del bool) ([]Result, error) {
	have, err := m.policies(ctx, false)
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
				return append(out, r), fmt.Errorf("topology: %s policy %q: %w%s", verb, pol.Name, err, policyAdvice(err))
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
