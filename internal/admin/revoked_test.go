package admin

import (
	"regexp"
	"testing"
	"time"

	"github.com/delaykit/rabbitdelay/internal/delayspec"
	"github.com/delaykit/rabbitdelay/ttlbuckets"
)

// TestRevokedStream: the plan has the revocation stream, a stream whose x-max-age covers the
// topology's longest delay plus the margin, outside the delay-queue policy (only the policy
// <prefix>.revoked-retention, repeating its max-age, matches it) and reserved as a name.
func TestRevokedStream(t *testing.T) {
	cases := []struct {
		name string
		spec delayspec.Spec
		want string
	}{
		{"default (ladder and plugin: 2^32-1 ms)", delayspec.Spec{Targets: delayspec.Targets{{Name: "orders"}}}, "1218h"},
		{"short ladder, no plugin", delayspec.Spec{Targets: delayspec.Targets{{Name: "orders"}}, Plugin: delayspec.PluginOff, Ladder: ttlbuckets.Ladder{Max: time.Hour}}, "25h"},
		{"a bucket beyond the ladder", delayspec.Spec{Targets: delayspec.Targets{{Name: "orders"}}, Plugin: delayspec.PluginOff, Ladder: ttlbuckets.Ladder{Max: time.Hour},
			Buckets: delayspec.Delays{72 * time.Hour}}, "96h"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := mustPlan(t, c.spec)
			q, ok := p.Queue(p.Names.Revoked())
			if !ok || q.Role != RoleRevoked {
				t.Fatalf("no revocation stream in the plan: %+v", q)
			}
			if q.Args["x-queue-type"] != "stream" || q.Args["x-max-age"] != c.want {
				t.Errorf("arguments %v, want a stream with x-max-age %s", q.Args, c.want)
			}
			var pol *Policy
			for i := range p.Policies {
				if re := regexp.MustCompile(p.Policies[i].Pattern); re.MatchString(p.Names.Revoked()) {
					if pol != nil {
						t.Fatalf("two policies match the stream: %s and %s", pol.Name, p.Policies[i].Name)
					}
					pol = &p.Policies[i]
				}
			}
			if pol == nil || pol.Name != p.Names.RevokedPolicy() || pol.Definition["max-age"] != c.want || len(pol.Definition) != 1 {
				t.Errorf("policy on the stream: %+v; want %s with max-age %s only", pol, p.Names.RevokedPolicy(), c.want)
			}
			if !p.Names.Reserved(p.Names.Revoked()) {
				t.Errorf("%s is not reserved", p.Names.Revoked())
			}
		})
	}
}
