package admin

import (
	"testing"
	"time"

	"github.com/delaykit/rabbitdelay/internal/delayspec"
	"github.com/delaykit/rabbitdelay/ttlbuckets"
)

// TestPlanRowsUnique: Apply's runner finds a report row by kind and name, so no two objects of
// a plan (exchanges, queues, bindings) may share both.
func TestPlanRowsUnique(t *testing.T) {
	rq := delayspec.ReadyQueues{{Queue: "orders.timeouts", Exchange: "orders", BindingKey: "#"}, {Queue: "b.t", Exchange: "billing", BindingKey: ""}}
	specs := map[string]delayspec.Spec{
		"default": {Targets: delayspec.Targets{{Name: "orders"}}},
		"plugin on": {Targets: delayspec.Targets{{Name: "orders", Type: "topic"}, {Name: "billing"}}, Plugin: delayspec.PluginOn, ReadyQueues: rq,
			Buckets: delayspec.Delays{30 * time.Second, time.Hour}},
		"classic, radix 2": {Targets: delayspec.Targets{{Name: "orders", Type: "direct"}}, QueueType: delayspec.Classic, Plugin: delayspec.PluginOff,
			Ladder: ttlbuckets.Ladder{Radix: 2, Max: time.Hour}, Buckets: delayspec.Delays{time.Second}},
	}
	for name, spec := range specs {
		p := mustPlan(t, spec)
		seen := map[string]bool{}
		for _, o := range objectsOf(p, nil) {
			if seen[o.key()] {
				t.Errorf("%s: two objects %s", name, o.key())
			}
			seen[o.key()] = true
		}
		for _, b := range p.Bindings {
			if k := rowKey(KindBinding, b.String()); seen[k] {
				t.Errorf("%s: two bindings %s", name, k)
			} else {
				seen[k] = true
			}
		}
		if len(seen) != len(p.Exchanges)+len(p.Queues)+len(p.Bindings) {
			t.Errorf("%s: %d rows for %d objects", name, len(seen), len(p.Exchanges)+len(p.Queues)+len(p.Bindings))
		}
	}
}
