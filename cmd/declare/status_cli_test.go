//go:build integration

package declare

import (
	"encoding/json"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/delaykit/rabbitdelay/integration/brokertest"
	"github.com/delaykit/rabbitdelay/internal/admin"
	"github.com/delaykit/rabbitdelay/internal/delayspec"
	"github.com/delaykit/rabbitdelay/internal/route"
	"github.com/delaykit/rabbitdelay/ttlbuckets"
	amqp "github.com/rabbitmq/amqp091-go"
)

// TestStatusTeardownCLI: status counts a waiting message (in a queue of about 35 min, so that
// it still waits when teardown runs on a busy machine) and fails (exit 1) on a consumer of a
// delay queue, naming it; teardown refuses (exit 1) while a delay queue holds it, --force
// deletes, the target survives; status then reports the topology incomplete (exit 1).
func TestStatusTeardownCLI(t *testing.T) {
	t.Parallel()
	env := brokertest.NewEnv(t)
	target := env.Name("orders")
	e := vars(env, "AMQPDELAY_TARGETS", target+":topic", "AMQPDELAY_LADDER_RADIX", "4", "AMQPDELAY_LADDER_MAX", "1h", "AMQPDELAY_QUEUE_TYPE", "classic")
	applyOrFail(t, env, e, target)
	names := delayspec.Names{Prefix: env.Prefix}
	ch := env.Channel(t)
	if err := ch.Publish(names.LadderExchange(10), "", false, false, amqp.Publishing{
		Headers: amqp.Table{route.DigitHeader(10): int64(2), route.TargetHeader: target}, Body: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	if _, err := env.Channel(t).Consume(names.LadderQueue(1, 1), "", false, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	var st result
	for range 50 {
		st = declare(t, e, "status", "--queues")
		checkUnknownNote(t, st.stdout, env.Prefix)
		if strings.Contains(st.stdout, names.LadderQueue(10, 2)+" ") && regexpLine(st.stdout, names.LadderQueue(10, 2), " 1 ") {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if strings.Contains(st.stdout, "DEAD-LETTER STATE") {
		// The revocation stream has no dead-letter state: "-", never "?" (no figure yet).
		for _, l := range strings.Split(st.stdout, "\n") {
			if f := strings.Fields(l); len(f) >= 7 && f[0] == names.Revoked() && f[6] != "-" {
				t.Errorf("the revocation stream's messages_dlx column: %q, want -\n%s", f[6], st.stdout)
			}
		}
	}
	if st.code != 1 || !strings.Contains(st.stderr, "consumers on delay queues ("+names.LadderQueue(1, 1)+")") {
		t.Fatalf("status with a consumer on a delay queue: exit %d, want 1 naming it\n%s\n%s", st.code, st.stdout, st.stderr)
	}
	if !regexpLine(st.stdout, names.LadderQueue(10, 2), " 1 ") {
		t.Errorf("status does not count the waiting message:\n%s", st.stdout)
	}
	if !strings.Contains(st.stdout, "CONSUMERS ON DELAY QUEUES: "+names.LadderQueue(1, 1)) || !strings.Contains(st.stderr, "consumer is attached") {
		t.Errorf("status does not flag the consumer loudly:\n%s\n%s", st.stdout, st.stderr)
	}
	js := declare(t, e, "status", "--json")
	var parsed statusJSON
	if err := json.Unmarshal([]byte(js.stdout), &parsed); err != nil || len(parsed.ConsumedDelayQueues) != 1 || parsed.OK ||
		parsed.Schema != statusSchema || js.code != 1 {
		t.Errorf("status --json: exit %d, %v %+v\n%s", js.code, err, parsed.ConsumedDelayQueues, js.stdout)
	}
	// The output has schema 1's top-level keys and the documented roles (TestStatusJSONShape).
	var raw map[string]any
	if err := json.Unmarshal([]byte(js.stdout), &raw); err != nil {
		t.Fatal(err)
	}
	var top []string
	for _, k := range statusJSONKeys {
		if !strings.Contains(k, ".") {
			top = append(top, k)
		}
	}
	for k := range raw {
		if !slices.Contains(top, k) {
			t.Errorf("status --json has the key %q, not in schema 1", k)
		}
	}
	for _, k := range top {
		if _, ok := raw[k]; !ok {
			t.Errorf("status --json lacks schema 1's key %q", k)
		}
	}
	for _, q := range parsed.Queues {
		if !slices.Contains([]string{"ladder", "bucket", "parking", "ready", "revoked", "spec"}, q.Role) {
			t.Errorf("status --json: queue %s has role %q, not a documented one", q.Name, q.Role)
		}
	}

	td := declare(t, e, "teardown")
	if td.code != 1 || !strings.Contains(td.stderr, names.LadderQueue(10, 2)) || !strings.Contains(td.stderr, "--force") {
		t.Fatalf("teardown with a waiting message: exit %d\n%s", td.code, td.stderr)
	}
	td = declare(t, e, "teardown", "--force")
	if td.code != 0 {
		t.Fatalf("teardown --force: exit %d\n%s", td.code, td.stderr)
	}
	for _, want := range []string{"deleted  queue     " + names.LadderQueue(10, 2), "deleted  exchange  " + names.Dispatch(), "left untouched: " + target} {
		if !strings.Contains(td.stdout, want) {
			t.Errorf("teardown output lacks %q:\n%s", want, td.stdout)
		}
	}
	if strings.Contains(td.stdout, "delayed-message plugin") {
		t.Errorf("teardown of a topology without the plugin exchange prints the plugin note:\n%s", td.stdout)
	}
	if err := env.Channel(t).ExchangeDeclarePassive(target, "topic", true, false, false, false, nil); err != nil {
		t.Errorf("target gone: %v", err)
	}
	// Torn down: status says the topology is not declared and how to declare it, and warns of
	// nothing about objects that do not exist (the target survives, unbound).
	st = declare(t, e, "status")
	if st.code != 1 || !strings.Contains(st.stdout, "NOT DECLARED: none of the topology's own exchanges and queues exist") ||
		!strings.Contains(st.stdout, "`rabbitdelay apply`") || !strings.Contains(st.stderr, "the topology is not declared in vhost") {
		t.Errorf("status after teardown: exit %d, want 1 saying the topology is not declared\n%s\n%s", st.code, st.stdout, st.stderr)
	}
	for _, noise := range []string{"POLICY PROBLEMS", "stalls", "INCOMPLETE", "MISSING"} {
		if strings.Contains(st.stdout+st.stderr, noise) {
			t.Errorf("status after teardown says %q about a topology that does not exist:\n%s\n%s", noise, st.stdout, st.stderr)
		}
	}
	js = declare(t, e, "status", "--json")
	parsed = statusJSON{}
	if err := json.Unmarshal([]byte(js.stdout), &parsed); err != nil || js.code != 1 || !parsed.NotDeclared ||
		len(parsed.PolicyProblems) != 0 || len(parsed.MissingObjects) == 0 {
		t.Errorf("status --json after teardown: exit %d, %v, not_declared %v, %d policy problems, %d missing objects\n%s",
			js.code, err, parsed.NotDeclared, len(parsed.PolicyProblems), len(parsed.MissingObjects), js.stdout)
	}
}

// checkUnknownNote fails t when a status table shows a "?" count in a queue line (one starting
// with prefix) without the note that explains it, or the note without a "?".
func checkUnknownNote(t *testing.T, out, prefix string) {
	t.Helper()
	q := false
	for _, l := range strings.Split(out, "\n") {
		f := strings.Fields(l)
		if len(f) >= 3 && strings.HasPrefix(l, prefix) && slices.Contains(f[2:], "?") {
			q = true
		}
	}
	if note := strings.Contains(out, statusUnknownNote); q != note {
		t.Errorf("status: a \"?\" count: %v, its note: %v\n%s", q, note, out)
	}
}

// TestStatusMismatchCLI: an entry exchange declared again as direct (and bound again) makes
// status exit 1, listing the property after the tables, naming it and the fix on stderr, and
// carrying it in --json's mismatched.
func TestStatusMismatchCLI(t *testing.T) {
	t.Parallel()
	env := brokertest.NewEnv(t)
	if env.Broker.ManagementURL == "" {
		t.Skip("needs the management API")
	}
	target := env.Name("orders")
	e := vars(env, "AMQPDELAY_TARGETS", target+":topic", "AMQPDELAY_LADDER_RADIX", "4", "AMQPDELAY_LADDER_MAX", "1m", "AMQPDELAY_QUEUE_TYPE", "classic")
	applyOrFail(t, env, e, target)
	names := delayspec.Names{Prefix: env.Prefix}
	queue := names.LadderQueue(1, 1)
	entry := names.LadderEntryExchange(queue)
	ch := env.Channel(t)
	if err := ch.ExchangeDelete(entry, false, false); err != nil {
		t.Fatal(err)
	}
	if err := ch.ExchangeDeclare(entry, "direct", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if err := ch.QueueBind(queue, "", entry, false, nil); err != nil {
		t.Fatal(err)
	}
	line := `exchange "` + entry + `" has type = direct, the plan wants fanout`
	st := declare(t, e, "status")
	if st.code != 1 || !strings.Contains(st.stdout, "NOT AS SPECIFIED: 1 property") || !strings.Contains(st.stdout, "  "+line+"\n") ||
		!strings.Contains(st.stderr, line) || !strings.Contains(st.stderr, "rabbitdelay apply") || strings.Contains(st.stdout, "INCOMPLETE") {
		t.Errorf("status with an entry exchange of another type: exit %d, want 1 listing %q\n%s\n%s", st.code, line, st.stdout, st.stderr)
	}
	js := declare(t, e, "status", "--json")
	var parsed statusJSON
	want := []admin.Mismatch{{Kind: "exchange", Name: entry, Property: "type", Existing: "direct", Wanted: "fanout"}}
	if err := json.Unmarshal([]byte(js.stdout), &parsed); err != nil || js.code != 1 || parsed.OK || !slices.Equal(parsed.Mismatched, want) {
		t.Errorf("status --json: exit %d, %v, mismatched %+v, want %+v\n%s", js.code, err, parsed.Mismatched, want, js.stdout)
	}
}

// TestStatusMistypedTarget: with AMQPDELAY_TARGETS mistyped after an apply (a target name
// without a type, so apply would not declare it), status exits 1 naming the exchange that does
// not exist and the vhost's exchange of a similar name, never advises `rabbitdelay teardown` (which,
// run with the specification that did apply, would delete the live topology), and says of the
// applied target's marker to add the target back; --json gives the same; apply refuses with exit
// 2 naming the similar exchange and the mistyped name, and declares nothing.
func TestStatusMistypedTarget(t *testing.T) {
	t.Parallel()
	env := brokertest.NewEnv(t)
	if env.Broker.ManagementURL == "" {
		t.Skip("needs the management API")
	}
	target := env.Name("orders")
	typo := strings.Replace(target, "orders", "ordres", 1)
	if typo == target {
		t.Fatalf("env.Name(%q) = %q: no typo to make", "orders", target)
	}
	ladder := []string{"AMQPDELAY_LADDER_RADIX", "4", "AMQPDELAY_LADDER_MAX", "1m", "AMQPDELAY_QUEUE_TYPE", "classic"}
	applyOrFail(t, env, vars(env, append([]string{"AMQPDELAY_TARGETS", target + ":topic"}, ladder...)...), target)
	e := vars(env, append([]string{"AMQPDELAY_TARGETS", typo}, ladder...)...)

	st := declare(t, e, "status")
	missing := `exchange "` + typo + `" (similar names here: "` + target + `")`
	if st.code != 1 || !strings.Contains(st.stdout, "MISSING EXCHANGES: 1 exchange") || !strings.Contains(st.stdout, "  "+missing+"\n") ||
		!strings.Contains(st.stderr, missing) || !strings.Contains(st.stderr, "mistyped") {
		t.Errorf("status with a mistyped target: exit %d, want 1 listing %q\n%s\n%s", st.code, missing, st.stdout, st.stderr)
	}
	if strings.Contains(st.stdout, "run `rabbitdelay teardown`") || strings.Contains(st.stderr, "run `rabbitdelay teardown`") {
		t.Errorf("status beside a live topology advises a teardown:\n%s\n%s", st.stdout, st.stderr)
	}
	if want := `target "` + target + `" is in the applied specification and not in this one`; !strings.Contains(st.stdout, want) ||
		!strings.Contains(st.stdout, `if "`+target+`" is still a target, add it to the specification`) {
		t.Errorf("status does not say that the applied specification has the target (want %q):\n%s", want, st.stdout)
	}

	js := declare(t, e, "status", "--json")
	var parsed statusJSON
	want := []statusMissingExchangeJSON{{Name: typo, Similar: []string{target}}}
	if err := json.Unmarshal([]byte(js.stdout), &parsed); err != nil || js.code != 1 || parsed.OK ||
		len(parsed.MissingExchanges) != 1 || parsed.MissingExchanges[0].Name != typo || !slices.Equal(parsed.MissingExchanges[0].Similar, want[0].Similar) {
		t.Errorf("status --json: exit %d, %v, missing_exchanges %+v, want %+v\n%s", js.code, err, parsed.MissingExchanges, want, js.stdout)
	}

	before := objects(t, env)
	ap := declare(t, e, "apply")
	if similar := `this vhost has "` + target + `", similar to "` + typo + `"`; ap.code != 2 || !strings.Contains(ap.stderr, similar) ||
		!strings.Contains(ap.stderr, "mistyped") {
		t.Errorf("apply with a mistyped target: exit %d, want 2 naming %q\n%s", ap.code, similar, ap.stderr)
	}
	if after := objects(t, env); !slices.Equal(before, after) {
		t.Errorf("apply with a mistyped target declared something: %d objects before, %d after", len(before), len(after))
	}
}

// TestStatusJSONUnreachable: `status --json` with the broker unreachable printed nothing on
// standard output while exiting 1, though ok is documented as false exactly when status exits
// 1: it prints the object, ok false and the reason (without the URL's password) as its problem.
func TestStatusJSONUnreachable(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close() // nothing listens there now
	r := declare(t, map[string]string{"AMQPDELAY_URL": "amqp://guest:Pw9unreachable@" + addr + "/", "AMQPDELAY_TARGETS": "orders:topic",
		"AMQPDELAY_TIMEOUT": "20s"}, "status", "--json")
	var parsed statusJSON
	if err := json.Unmarshal([]byte(r.stdout), &parsed); err != nil || r.code != 1 || parsed.OK || len(parsed.Problems) != 1 ||
		!strings.Contains(parsed.Problems[0], addr) || parsed.Queues == nil || parsed.Schema != statusSchema {
		t.Errorf("status --json, broker unreachable: exit %d, %v, %+v\n%s", r.code, err, parsed, r.stdout)
	}
	if strings.Contains(r.stdout+r.stderr, "Pw9unreachable") {
		t.Errorf("the password is printed:\n%s\n%s", r.stdout, r.stderr)
	}
}

// TestTeardownReportsAnotherSpecsObjects: the operator changes the specification (radix 4 to
// 8, one bucket fewer); apply would conflict, so they tear down first, with the new
// specification. Status and teardown with it name the old objects it lacks (with the
// management API) and teardown leaves them in place; teardown with the old specification then
// removes them, and nothing with the prefix but the target is left.
func TestTeardownReportsAnotherSpecsObjects(t *testing.T) {
	t.Parallel()
	env := brokertest.NewEnv(t)
	if env.Broker.ManagementURL == "" {
		t.Skip("needs the management API (AMQP_MANAGEMENT_URL)")
	}
	target := env.Name("orders")
	common := []string{"AMQPDELAY_TARGETS", target + ":topic", "AMQPDELAY_LADDER_MAX", "1h", "AMQPDELAY_QUEUE_TYPE", "classic"}
	old := vars(env, append(common, "AMQPDELAY_LADDER_RADIX", "4", "AMQPDELAY_BUCKETS", "5s,10s")...)
	cur := vars(env, append(common, "AMQPDELAY_LADDER_RADIX", "8", "AMQPDELAY_BUCKETS", "5s")...)
	applyOrFail(t, env, old, target)
	oldLadder := ttlbuckets.Ladder{Radix: 4, Max: time.Hour}.WithDefaults()
	newLadder := ttlbuckets.Ladder{Radix: 8, Max: time.Hour}.WithDefaults()
	if oldLadder.Levels() <= newLadder.Levels() {
		t.Fatalf("test setup: the old ladder must have more levels than the new one")
	}
	names := delayspec.Names{Prefix: env.Prefix}
	shared := names.LadderQueue(0, 3) // the same name in both ladders
	oldOnly := names.LadderQueue(oldLadder.Levels()-1, 1)
	oldTop := names.LadderExchange(oldLadder.Levels() - 1) // a level the new ladder lacks
	oldBucket := names.BucketQueue(10_000)

	// Not the topology's: an application's exchange under the prefix, another topology's.
	others := []string{env.Name("orders2"), env.Name("eu.dispatch"), env.Name("eu.ladder.00")}
	for _, x := range others {
		if err := env.Channel(t).ExchangeDeclare(x, "fanout", false, true, false, false, nil); err != nil {
			t.Fatal(err)
		}
	}
	st := declare(t, cur, "status")
	for _, want := range []string{"not in this specification", "exchange " + oldTop, "queue " + oldOnly + " (0 messages)", "queue " + oldBucket} {
		if !strings.Contains(st.stdout, want) {
			t.Fatalf("status with the new spec lacks %q\n%s\n%s", want, st.stdout, st.stderr)
		}
	}
	for _, x := range append(others, target) {
		if strings.Contains(st.stdout, "exchange "+x+"\n") {
			t.Errorf("status lists %s, which is not the topology's, as an earlier specification's:\n%s", x, st.stdout)
		}
	}
	td := declare(t, cur, "teardown")
	if td.code != 0 || !strings.Contains(td.stdout, "left in place") || !strings.Contains(td.stdout, "queue "+oldOnly) {
		t.Fatalf("teardown with the new spec: exit %d\n%s\n%s", td.code, td.stdout, td.stderr)
	}
	left := objects(t, env)
	for _, want := range []string{"exchanges " + oldTop, "queues " + oldOnly, "queues " + oldBucket} {
		if !slices.Contains(left, want) {
			t.Errorf("the new spec's teardown deleted %s, which it does not name; left: %v", want, left)
		}
	}
	if slices.Contains(left, "queues "+shared) {
		t.Errorf("the new spec's teardown kept %s, which it names", shared)
	}
	td = declare(t, old, "teardown")
	if td.code != 0 || strings.Contains(td.stdout, "left in place") {
		t.Fatalf("teardown with the old spec: exit %d, want 0 and nothing left\n%s\n%s", td.code, td.stdout, td.stderr)
	}
	if left := slices.DeleteFunc(objects(t, env), func(o string) bool {
		return o == "exchanges "+target || slices.Contains(others, strings.TrimPrefix(o, "exchanges "))
	}); len(left) != 0 {
		t.Errorf("objects with the prefix after both teardowns (besides the target): %v", left)
	}
}
