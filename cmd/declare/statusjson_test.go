package declare

import (
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// statusJSONKeys is schema 1 of `rabbitdelay status --json`: every key, as a path (lists and
// objects alike separated by dots). Renaming or removing one breaks scripts that read the JSON:
// that takes a new statusSchema. A new key is added here and to docs/status-json.md.
var statusJSONKeys = []string{
	"schema", "ok", "problems", "prefix", "vhost", "plugin", "management",
	"queues", "queues.name", "queues.role", "queues.level", "queues.digit", "queues.ttl_ms", "queues.exists", "queues.ready",
	"queues.consumers", "queues.messages", "queues.messages_dlx", "queues.leader", "queues.members", "queues.online",
	"parking", "parking.name", "parking.role", "parking.level", "parking.digit", "parking.ttl_ms", "parking.exists", "parking.ready",
	"parking.consumers", "parking.messages", "parking.messages_dlx", "parking.leader", "parking.members", "parking.online",
	"missing_objects", "missing_exchanges", "missing_exchanges.name", "missing_exchanges.similar",
	"mismatched", "mismatched.kind", "mismatched.name", "mismatched.property", "mismatched.existing",
	"mismatched.wanted", "exchanges_present", "exchanges_total", "bindings_present", "bindings_total", "consumed_delay_queues",
	"dead_lettering", "dead_lettering.queue", "dead_lettering.messages_dlx",
	"unplanned_bindings", "retry_bindings",
	"unplanned", "unplanned.kind", "unplanned.name", "unplanned.messages",
	"policies", "policies.name", "policies.apply_to", "policies.priority", "policies.exists", "policies.current",
	"policy_problems", "policy_problems.severity", "policy_problems.breaks", "policy_problems.kind", "policy_problems.object",
	"policy_problems.policy", "policy_problems.operator", "policy_problems.key", "policy_problems.value", "policy_problems.message",
	"cluster", "cluster.balanced",
	"cluster.nodes", "cluster.nodes.name", "cluster.nodes.running", "cluster.nodes.leaders", "cluster.nodes.delay_queue_leaders",
	"cluster.nodes.members",
	"cluster.degraded_queues",
	"cluster.dead_letter_waits", "cluster.dead_letter_waits.node", "cluster.dead_letter_waits.messages",
	"cluster.dead_letter_waits.queues", "cluster.dead_letter_waits.queues.queue", "cluster.dead_letter_waits.queues.messages_dlx",
	"cluster.shared_leaders", "cluster.shared_leaders.level", "cluster.shared_leaders.digit", "cluster.shared_leaders.node",
	"cluster.shared_leaders.queues",
	"rabbitmq_version", "not_declared", "plugin_messages_delayed",
	"requeue_loops", "requeue_loops.queue", "requeue_loops.redeliver_rate", "requeue_loops.deliver_rate", "requeue_loops.messages",
	"requeue_loops.cause", "requeue_loops.advice", "record_differs", "record_only_targets",
}

// jsonKeys returns the key paths of the JSON encoding of t (struct fields by their json tag,
// through pointers, slices and nested structs; an embedded struct's keys are inlined).
func jsonKeys(t reflect.Type, prefix string) []string {
	for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice {
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct {
		return nil
	}
	var out []string
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" || !f.IsExported() {
			continue
		}
		if name == "" && f.Anonymous { // an embedded struct's keys are its container's
			out = append(out, jsonKeys(f.Type, prefix)...)
			continue
		}
		if name == "" {
			name = f.Name
		}
		key := prefix + name
		out = append(out, key)
		out = append(out, jsonKeys(f.Type, key+".")...)
	}
	return out
}

// TestStatusJSONShape holds `rabbitdelay status --json` to its documented shape: the keys are
// exactly schema 1's (statusSchema), and docs/status-json.md names each of them.
func TestStatusJSONShape(t *testing.T) {
	if statusSchema != 1 {
		t.Fatalf("statusSchema = %d: update statusJSONKeys to the new schema", statusSchema)
	}
	got := jsonKeys(reflect.TypeFor[statusJSON](), "")
	want := slices.Clone(statusJSONKeys)
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		for _, k := range got {
			if !slices.Contains(want, k) {
				t.Errorf("key %q is not in schema 1 (a new key: add it to statusJSONKeys and docs/status-json.md)", k)
			}
		}
		for _, k := range want {
			if !slices.Contains(got, k) {
				t.Errorf("schema 1's key %q is gone or renamed: that takes a new statusSchema", k)
			}
		}
	}
	readme, err := os.ReadFile("../../docs/status-json.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(readme), "**`rabbitdelay status --json`**")
	if !ok {
		t.Fatal("docs/status-json.md has no **`rabbitdelay status --json`** paragraph")
	}
	section, _, _ = strings.Cut(section, "\n\n")
	section = strings.Join(strings.Fields(section), " ")
	for _, k := range want {
		leaf := k[strings.LastIndex(k, ".")+1:]
		if !strings.Contains(section, "`"+leaf+"`") && !strings.Contains(section, "`\""+leaf+"\"") {
			t.Errorf("docs/status-json.md's paragraph does not name %q (%s)", leaf, k)
		}
	}
	// The role values docs/status-json.md lists are the roles of a plan's queues.
	for _, role := range []string{"ladder", "bucket", "parking", "ready", "revoked", "spec"} {
		if !strings.Contains(section, "`"+role+"`") {
			t.Errorf("docs/status-json.md's paragraph does not list the role %q", role)
		}
	}
}
