//go:build integration

package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/delaykit/rabbitdelay/integration/brokertest"
	"github.com/delaykit/rabbitdelay/internal/admin"
	"github.com/delaykit/rabbitdelay/internal/delayspec"
	"github.com/delaykit/rabbitdelay/internal/route"
	"github.com/delaykit/rabbitdelay/ttlbuckets"
)

// topoNeedManagement skips tests that compare with the broker's own view through the management
// API when the broker has none (AMQP cannot list exchanges, queues or bindings).
func topoNeedManagement(t testing.TB, env *brokertest.Env) *admin.Management {
	t.Helper()
	if env.Broker.ManagementURL == "" {
		t.Skip("needs the management API (AMQP_MANAGEMENT_URL) to list what the broker holds")
	}
	m, err := admin.NewManagement(env.Broker.ManagementURL, env.VHost)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func topoTestCtx(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// topoMgmtJSON GETs path from the management API, keeping numbers exact.
func topoMgmtJSON(t testing.TB, env *brokertest.Env, path string, out any) {
	t.Helper()
	var raw json.RawMessage
	if err := env.Broker.Management("GET", path, nil, &raw); err != nil {
		t.Fatal(err)
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if err := dec.Decode(out); err != nil {
		t.Fatal(err)
	}
}

func topoArgsText(m map[string]any) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var parts []string
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s=%v", k, m[k]))
	}
	return "{" + strings.Join(parts, ",") + "}"
}

// topoBrokerView lists the vhost's exchanges, queues and bindings as the broker reports them,
// without RabbitMQ's own (the default exchange, amq.*, the default exchange's bindings).
func topoBrokerView(t *testing.T, env *brokertest.Env) (ex, qs, bs []string) {
	t.Helper()
	vh := url.PathEscape(env.VHost)
	var exchanges []struct {
		Name, Type string
		Durable    bool
		Arguments  map[string]any
	}
	topoMgmtJSON(t, env, "api/exchanges/"+vh, &exchanges)
	for _, e := range exchanges {
		if e.Name != "" && !strings.HasPrefix(e.Name, "amq.") {
			ex = append(ex, fmt.Sprintf("%s %s durable=%v %s", e.Name, e.Type, e.Durable, topoArgsText(e.Arguments)))
		}
	}
	var queues []struct {
		Name      string
		Durable   bool
		Arguments map[string]any
	}
	topoMgmtJSON(t, env, "api/queues/"+vh+"?columns=name,durable,arguments", &queues)
	for _, q := range queues {
		qs = append(qs, fmt.Sprintf("%s durable=%v %s", q.Name, q.Durable, topoArgsText(q.Arguments)))
	}
	var bindings []struct {
		Source, Destination string
		DestinationType     string `json:"destination_type"`
		RoutingKey          string `json:"routing_key"`
		Arguments           map[string]any
	}
	topoMgmtJSON(t, env, "api/bindings/"+vh, &bindings)
	for _, b := range bindings {
		if b.Source != "" {
			bs = append(bs, fmt.Sprintf("%s -> %s %s key=%q %s", b.Source, b.Destination, b.DestinationType, b.RoutingKey, topoArgsText(b.Arguments)))
		}
	}
	sort.Strings(ex)
	sort.Strings(qs)
	sort.Strings(bs)
	return ex, qs, bs
}

// topoPlanView lists p's objects in brokerView's form, plus extra exchanges that exist apart
// from the plan (targets the test declared).
func topoPlanView(p *admin.Plan, extra ...string) (ex, qs, bs []string) {
	ex = append(ex, extra...)
	for _, e := range p.Exchanges {
		ex = append(ex, fmt.Sprintf("%s %s durable=true %s", e.Name, e.Type, topoArgsText(e.Args)))
	}
	for _, q := range p.Queues {
		qs = append(qs, fmt.Sprintf("%s durable=true %s", q.Name, topoArgsText(q.Args)))
	}
	for _, b := range p.Bindings {
		bs = append(bs, fmt.Sprintf("%s -> %s %s key=%q %s", b.Source, b.Destination, b.DestinationType, b.RoutingKey, topoArgsText(b.Args)))
	}
	sort.Strings(ex)
	sort.Strings(qs)
	sort.Strings(bs)
	return ex, qs, bs
}

func topoDiff(t *testing.T, what string, got, want []string) {
	t.Helper()
	if slices.Equal(got, want) {
		return
	}
	var extra, missing []string
	for _, g := range got {
		if !slices.Contains(want, g) {
			extra = append(extra, g)
		}
	}
	for _, w := range want {
		if !slices.Contains(got, w) {
			missing = append(missing, w)
		}
	}
	t.Errorf("%s differ from the plan (%d on the broker, %d planned)\nnot planned: %v\nmissing: %v", what, len(got), len(want), extra, missing)
}

// TestApplyDeclaresExactlyThePlan applies the default ladder with buckets, a declared target,
// an existing target and a ready queue to an empty vhost, compares the broker's own view
// (management API listing and passive declares) with the plan, and applies again: everything
// must be unchanged.
func TestApplyDeclaresExactlyThePlan(t *testing.T) {
	t.Parallel()
	env := brokertest.NewEnv(t)
	m := topoNeedManagement(t, env)
	ctx := topoTestCtx(t, time.Minute)
	conn := env.Dial(t)
	ch := env.Channel(t)
	if err := ch.ExchangeDeclare("billing", amqp.ExchangeDirect, true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	spec := delayspec.Spec{Prefix: env.Prefix, Targets: delayspec.Targets{{Name: "orders", Type: "topic"}, {Name: "billing"}},
		Buckets:     delayspec.Delays{30 * time.Second, 5 * time.Minute},
		ReadyQueues: delayspec.ReadyQueues{{Queue: "orders.timeouts", Exchange: "orders", BindingKey: "order.timeout.#"}},
		Plugin:      delayspec.PluginOff}
	p, err := admin.NewPlan(spec)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	rep, err := admin.Apply(ctx, conn, p, admin.ApplyOptions{Management: m})
	if err != nil {
		t.Fatalf("apply: %v", err)
	}
	t.Logf("first apply of %d exchanges, %d queues, %d bindings: %v", len(p.Exchanges), len(p.Queues), len(p.Bindings), time.Since(start))
	total := len(p.Exchanges) + len(p.Queues) + len(p.Bindings) + len(p.Policies)
	if n := rep.Count(admin.StateCreated); n != total {
		t.Errorf("first apply: %d created, want %d (all)", n, total)
	}
	if len(rep.PolicyProblems) != 0 {
		t.Errorf("policy problems on a fresh vhost: %v", rep.PolicyProblems)
	}
	var pols []struct {
		Name, Pattern string
		ApplyTo       string `json:"apply-to"`
		Priority      int
		Definition    map[string]any
	}
	topoMgmtJSON(t, env, "api/policies/"+url.PathEscape(env.VHost), &pols)
	if len(pols) != len(p.Policies) {
		t.Errorf("broker policies %+v, want the plan's %+v", pols, p.Policies)
	}
	for _, want := range p.ForBroker(brokerMajor(t, env)).Policies { // 4.x: delivery-limit -1 on the delay queues
		for _, got := range pols {
			if got.Name == want.Name && (got.Pattern != want.Pattern || got.ApplyTo != want.ApplyTo || got.Priority != want.Priority ||
				topoArgsText(got.Definition) != topoArgsText(want.Definition)) {
				t.Errorf("policy %s on the broker: %+v, want %+v", want.Name, got, want)
			}
		}
	}
	gotEx, gotQ, gotB := topoBrokerView(t, env)
	wantEx, wantQ, wantB := topoPlanView(p, "billing direct durable=true {}")
	topoDiff(t, "exchanges", gotEx, wantEx)
	topoDiff(t, "queues", gotQ, wantQ)
	topoDiff(t, "bindings", gotB, wantB)
	// And each object answers a passive declare.
	for _, e := range p.Exchanges {
		if err := ch.ExchangeDeclarePassive(e.Name, e.Type, true, false, false, false, nil); err != nil {
			t.Fatalf("passive declare of exchange %s: %v", e.Name, err)
		}
	}
	for _, q := range p.Queues {
		if _, err := ch.QueueDeclarePassive(q.Name, true, false, false, false, nil); err != nil {
			t.Fatalf("passive declare of queue %s: %v", q.Name, err)
		}
	}

	rep, err = admin.Apply(ctx, conn, p, admin.ApplyOptions{Management: m})
	if err != nil {
		t.Fatalf("second apply: %v", err)
	}
	if n := rep.Count(admin.StateUnchanged); n != total {
		for _, r := range rep.Results {
			if r.State != admin.StateUnchanged {
				t.Logf("%s %s: %s", r.Kind, r.Name, r.State)
			}
		}
		t.Errorf("second apply: %d unchanged, want %d (all)", n, total)
	}
	gotEx2, gotQ2, gotB2 := topoBrokerView(t, env)
	if !slices.Equal(gotEx, gotEx2) || !slices.Equal(gotQ, gotQ2) || !slices.Equal(gotB, gotB2) {
		t.Error("the second apply changed the broker's objects")
	}
}

// TestApplyWithoutManagementReportsBound: without the management API objects are still
// created/unchanged (passive declares) and bindings are "bound".
func TestApplyWithoutManagementReportsBound(t *testing.T) {
	t.Parallel()
	env := brokertest.NewEnv(t)
	ctx := topoTestCtx(t, time.Minute)
	conn := env.Dial(t)
	p, err := admin.NewPlan(delayspec.Spec{Prefix: env.Prefix, Targets: delayspec.Targets{{Name: env.Name("t"), Type: "direct"}},
		Ladder: ttlbuckets.Ladder{Radix: 4, Max: time.Hour}, QueueType: delayspec.Classic, Plugin: delayspec.PluginOff})
	if err != nil {
		t.Fatal(err)
	}
	if env.VHost == "/" {
		t.Cleanup(func() { _, _ = admin.Teardown(context.Background(), conn, p, admin.TeardownOptions{Force: true}) })
	}
	if _, err := admin.Apply(ctx, conn, p, admin.ApplyOptions{}); err != nil {
		t.Fatal(err)
	}
	rep, err := admin.Apply(ctx, conn, p, admin.ApplyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if u, b := rep.Count(admin.StateUnchanged), rep.Count(admin.StateBound); u != len(p.Exchanges)+len(p.Queues) || b != len(p.Bindings) {
		t.Errorf("second apply: %d unchanged, %d bound; want %d and %d", u, b, len(p.Exchanges)+len(p.Queues), len(p.Bindings))
	}
}

// TestApplyConflictKeepsMessages pre-declares one ladder queue with another TTL and a message
// in it: apply must stop with a ConflictError naming the queue, the argument and both values,
// declare nothing, and leave the message where it is.
func TestApplyConflictKeepsMessages(t *testing.T) {
	t.Parallel()
	env := brokertest.NewEnv(t)
	ctx := topoTestCtx(t, time.Minute)
	conn := env.Dial(t)
	ch := env.Channel(t)
	p, err := admin.NewPlan(delayspec.Spec{Prefix: env.Prefix, Targets: delayspec.Targets{{Name: env.Name("orders"), Type: "topic"}}, Plugin: delayspec.PluginOff})
	if err != nil {
		t.Fatal(err)
	}
	victim := p.Names.LadderQueue(0, 1)
	q, _ := p.Queue(victim)
	args := amqp.Table{}
	for k, v := range q.Args {
		args[k] = v
	}
	args["x-message-ttl"] = int64(3_600_000)
	if _, err := ch.QueueDeclare(victim, true, false, false, false, args); err != nil {
		t.Fatal(err)
	}
	if env.VHost == "/" {
		t.Cleanup(func() { _, _ = env.Channel(t).QueueDelete(victim, false, false, false) })
	}
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, "", victim, true, false, amqp.Publishing{Body: []byte("keep me"), DeliveryMode: amqp.Persistent})
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := dc.WaitContext(ctx); !ok || err != nil {
		t.Fatalf("confirm: %v %v", ok, err)
	}

	rep, err := admin.Apply(ctx, conn, p, admin.ApplyOptions{})
	var c *admin.ConflictError
	if !errors.Is(err, admin.ErrConflict) || !errors.As(err, &c) {
		t.Fatalf("apply: err %v, want a ConflictError", err)
	}
	var ae *amqp.Error
	if !errors.As(err, &ae) || ae.Code != amqp.PreconditionFailed {
		t.Errorf("the broker's 406 is not reachable: %v", ae)
	}
	if c.Name != victim || c.Kind != "queue" || c.Argument != "x-message-ttl" || !strings.Contains(c.Existing, "3600000") || !strings.Contains(c.Wanted, "1") {
		t.Errorf("conflict = %+v", c)
	}
	for _, want := range []string{victim, "x-message-ttl", "3600000", "delete_queue"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("message %q lacks %q", err, want)
		}
	}
	if n := rep.Count(admin.StateConflict); n != 1 {
		t.Errorf("%d conflicts in the report, want 1", n)
	}
	if n := rep.Count(admin.StateCreated); n != 0 {
		t.Errorf("%d objects created despite the conflict", n)
	}
	ch2 := env.Channel(t)
	got, err := ch2.QueueDeclarePassive(victim, true, false, false, false, nil)
	if err != nil || got.Messages != 1 {
		t.Errorf("victim queue after apply: %+v, %v; want its 1 message", got, err)
	}
	if err := ch2.ExchangeDeclarePassive(p.Names.Dispatch(), "headers", true, false, false, false, nil); topoCode(err) != amqp.NotFound {
		t.Errorf("dispatch exchange declared despite the conflict (passive declare: %v)", err)
	}
}

func topoCode(err error) int {
	var ae *amqp.Error
	if errors.As(err, &ae) {
		return ae.Code
	}
	return 0
}

// TestApplyMissingTargetDeclaresNothing: a target without a type that does not exist fails
// with ErrTargetMissing before anything is declared.
func TestApplyMissingTargetDeclaresNothing(t *testing.T) {
	t.Parallel()
	env := brokertest.NewEnv(t)
	ctx := topoTestCtx(t, time.Minute)
	conn := env.Dial(t)
	p, err := admin.NewPlan(delayspec.Spec{Prefix: env.Prefix, Targets: delayspec.Targets{{Name: env.Name("absent")}},
		ReadyQueues: delayspec.ReadyQueues{{Queue: env.Name("rq"), Exchange: env.Name("absent2"), BindingKey: "k"}}})
	if err != nil {
		t.Fatal(err)
	}
	_, err = admin.Apply(ctx, conn, p, admin.ApplyOptions{})
	if !errors.Is(err, admin.ErrTargetMissing) || !strings.Contains(err.Error(), env.Name("absent")) || !strings.Contains(err.Error(), env.Name("absent2")) {
		t.Fatalf("apply: %v; want ErrTargetMissing naming both exchanges", err)
	}
	ch := env.Channel(t)
	if err := ch.ExchangeDeclarePassive(p.Names.Unroutable(), "fanout", true, false, false, false, nil); topoCode(err) != amqp.NotFound {
		t.Errorf("something was declared: passive declare of %s: %v", p.Names.Unroutable(), err)
	}
}

// TestExportImportThenApplyUnchanged exports the topology, loads it into a fresh vhost with
// the management API's POST /api/definitions/<vhost> (the same definitions format that
// `rabbitmqctl import_definitions` reads; rabbitmqctl needs the node's Erlang cookie, which a
// test against a shared broker does not have), and applies: everything must be unchanged.
func TestExportImportThenApplyUnchanged(t *testing.T) {
	t.Parallel()
	env := brokertest.NewEnv(t)
	m := topoNeedManagement(t, env)
	ctx := topoTestCtx(t, 10*time.Minute)
	p, err := admin.NewPlan(delayspec.Spec{Prefix: env.Prefix, Targets: delayspec.Targets{{Name: "orders", Type: "topic"}, {Name: "billing", Type: "headers"}},
		Buckets:     delayspec.Delays{time.Second, 90 * 24 * time.Hour},
		ReadyQueues: delayspec.ReadyQueues{{Queue: "orders.t", Exchange: "orders", BindingKey: "#"}},
		Ladder:      ttlbuckets.Ladder{Radix: 4, Max: 24 * time.Hour, Order: ttlbuckets.LongestFirst}, Plugin: delayspec.PluginOff})
	if err != nil {
		t.Fatal(err)
	}
	defs, err := admin.Export(p.ForBroker(brokerMajor(t, env)), env.VHost) // as `rabbitdelay export --rabbitmq-version`
	if err != nil {
		t.Fatal(err)
	}
	importDefinitions(t, env, defs)
	gotEx, gotQ, gotB := topoBrokerView(t, env)
	wantEx, wantQ, wantB := topoPlanView(p)
	topoDiff(t, "imported exchanges", gotEx, wantEx)
	topoDiff(t, "imported queues", gotQ, wantQ)
	topoDiff(t, "imported bindings", gotB, wantB)

	rep, err := admin.Apply(ctx, env.Dial(t), p, admin.ApplyOptions{Management: m})
	if err != nil {
		t.Fatalf("apply after import: %v", err)
	}
	if n, total := rep.Count(admin.StateUnchanged), len(rep.Results); n != total {
		for _, r := range rep.Results {
			if r.State != admin.StateUnchanged {
				t.Logf("%s %s: %s %s", r.Kind, r.Name, r.State, r.Detail)
			}
		}
		t.Errorf("apply after import: %d of %d unchanged", n, total)
	}
}

// TestTeardownRefusesThenForces: teardown refuses while a delay queue holds a message and
// deletes nothing; with Force it deletes the topology; target exchanges survive either way;
// and an empty topology of quorum queues (the default) is deleted without Force.
func TestTeardownRefusesThenForces(t *testing.T) {
	t.Parallel()
	env := brokertest.NewEnv(t)
	ctx := topoTestCtx(t, time.Minute)
	conn := env.Dial(t)
	ch := env.Channel(t)
	existing := env.Name("existing")
	if err := ch.ExchangeDeclare(existing, amqp.ExchangeFanout, true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	declared := env.Name("declared")
	p, err := admin.NewPlan(delayspec.Spec{Prefix: env.Prefix, Targets: delayspec.Targets{{Name: existing}, {Name: declared, Type: "topic"}},
		Ladder: ttlbuckets.Ladder{Radix: 4, Max: 24 * time.Hour}, Buckets: delayspec.Delays{time.Hour}, Plugin: delayspec.PluginOff})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if env.VHost == "/" {
			c := env.Channel(t)
			_ = c.ExchangeDelete(existing, false, false)
			_ = c.ExchangeDelete(declared, false, false)
		}
	})
	if _, err := admin.Apply(ctx, conn, p, admin.ApplyOptions{}); err != nil {
		t.Fatal(err)
	}
	// A message waiting in the bucket queue (1 h).
	if err := ch.PublishWithContext(ctx, p.Names.BucketExchange(), "", false, false, amqp.Publishing{
		Headers: amqp.Table{route.BucketHeader: int64(3_600_000), route.TargetHeader: declared}, Body: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	bucketQ := p.Names.BucketQueue(3_600_000)
	topoWaitReady(t, env, bucketQ, 1)

	_, err = admin.Teardown(ctx, conn, p, admin.TeardownOptions{})
	if !errors.Is(err, admin.ErrNotEmpty) || !strings.Contains(err.Error(), bucketQ) || !strings.Contains(err.Error(), "--force") {
		t.Fatalf("teardown of a non-empty topology: %v; want ErrNotEmpty naming %s", err, bucketQ)
	}
	// Nothing was deleted.
	c := env.Channel(t)
	for _, e := range p.Exchanges {
		if err := c.ExchangeDeclarePassive(e.Name, e.Type, true, false, false, false, nil); err != nil {
			t.Fatalf("exchange %s gone after a refused teardown: %v", e.Name, err)
		}
	}
	for _, q := range p.Queues {
		if _, err := c.QueueDeclarePassive(q.Name, true, false, false, false, nil); err != nil {
			t.Fatalf("queue %s gone after a refused teardown: %v", q.Name, err)
		}
	}

	rep, err := admin.Teardown(ctx, conn, p, admin.TeardownOptions{Force: true})
	if err != nil {
		t.Fatalf("teardown --force: %v", err)
	}
	wantDeleted := len(p.Exchanges) - 1 + len(p.Queues) // every exchange but the declared target
	if n := rep.Count(admin.StateDeleted); n != wantDeleted {
		t.Errorf("%d deleted, want %d", n, wantDeleted)
	}
	if n := rep.Count(admin.StateAbsent); n != 1 { // the plugin exchange, never declared
		t.Errorf("%d absent, want 1 (the plugin exchange)", n)
	}
	for _, r := range rep.Results {
		if r.Name == existing || r.Name == declared {
			t.Errorf("teardown touched target %s", r.Name)
		}
	}
	c = env.Channel(t)
	for _, target := range []string{existing, declared} {
		if err := c.ExchangeDeclarePassive(target, "topic", true, false, false, false, nil); err != nil {
			t.Errorf("target %s gone after teardown: %v", target, err)
		}
	}
	for _, q := range p.Queues {
		c, err := conn.Channel() // a 404 closes the channel: one per look-up
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.QueueDeclarePassive(q.Name, true, false, false, false, nil); topoCode(err) != amqp.NotFound {
			t.Fatalf("queue %s still there after teardown --force (%v)", q.Name, err)
		}
	}
	// Teardown again: everything absent, no error.
	rep, err = admin.Teardown(ctx, conn, p, admin.TeardownOptions{})
	if err != nil || rep.Count(admin.StateDeleted) != 0 {
		t.Errorf("second teardown: %v, %d deleted", err, rep.Count(admin.StateDeleted))
	}
	// An empty topology of quorum queues goes without Force: RabbitMQ refuses queue.delete's
	// if-empty flag on quorum queues (540, closing the connection), so Teardown must not use it.
	// Without the management API it cannot count their unacknowledged and dead-letter-state
	// messages, so it refuses and deletes nothing.
	if _, err := admin.Apply(ctx, conn, p, admin.ApplyOptions{}); err != nil {
		t.Fatal(err)
	}
	rep, err = admin.Teardown(ctx, conn, p, admin.TeardownOptions{})
	if !errors.Is(err, admin.ErrCannotCount) || !strings.Contains(err.Error(), "--management-url") || rep.Count(admin.StateDeleted) != 0 {
		t.Fatalf("teardown of quorum queues without the management API: %v, %d deleted; want ErrCannotCount, nothing deleted", err, rep.Count(admin.StateDeleted))
	}
	m := topoNeedManagement(t, env)
	rep, err = admin.Teardown(ctx, conn, p, admin.TeardownOptions{Management: m})
	if err != nil || rep.Count(admin.StateDeleted) != wantDeleted {
		t.Fatalf("teardown of an empty quorum topology: %v, %d deleted, want %d", err, rep.Count(admin.StateDeleted), wantDeleted)
	}
	if conn.IsClosed() {
		t.Error("teardown closed the connection")
	}
}

func topoWaitReady(t *testing.T, env *brokertest.Env, queue string, n int) {
	t.Helper()
	ch := env.Channel(t)
	deadline := time.Now().Add(10 * time.Second)
	for {
		q, err := ch.QueueDeclarePassive(queue, true, false, false, false, nil)
		if err != nil {
			t.Fatal(err)
		}
		if q.Messages == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("queue %s holds %d messages, want %d", queue, q.Messages, n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestStatusCountsMessagesAndFlagsConsumers: status counts a message waiting in a delay
// queue, flags a consumer attached to another, and reports a missing queue as incomplete.
func TestStatusCountsMessagesAndFlagsConsumers(t *testing.T) {
	t.Parallel()
	env := brokertest.NewEnv(t)
	ctx := topoTestCtx(t, time.Minute)
	conn := env.Dial(t)
	p, err := admin.NewPlan(delayspec.Spec{Prefix: env.Prefix, Targets: delayspec.Targets{{Name: env.Name("t"), Type: "direct"}},
		Ladder: ttlbuckets.Ladder{Radix: 8, Max: time.Hour}, QueueType: delayspec.Classic, Plugin: delayspec.PluginOff})
	if err != nil {
		t.Fatal(err)
	}
	if env.VHost == "/" {
		t.Cleanup(func() {
			_, _ = admin.Teardown(context.Background(), env.Dial(t), p, admin.TeardownOptions{Force: true})
			_ = env.Channel(t).ExchangeDelete(env.Name("t"), false, false)
		})
	}
	if _, err := admin.Apply(ctx, conn, p, admin.ApplyOptions{}); err != nil {
		t.Fatal(err)
	}
	rep, err := admin.Status(ctx, conn, p, admin.StatusOptions{})
	if err != nil || len(rep.Missing) != 0 || len(rep.ConsumedDelayQueues) != 0 {
		t.Fatalf("status of a fresh topology: %v, missing %v, consumed %v", err, rep.Missing, rep.ConsumedDelayQueues)
	}
	// One message into the longest ladder queue (through its level's exchange).
	top := p.Ladder.Levels() - 1
	waiting := p.Names.LadderQueue(top, 1)
	ch := env.Channel(t)
	headers := amqp.Table{route.DigitHeader(top): int64(1), route.TargetHeader: env.Name("t")}
	if err := ch.PublishWithContext(ctx, p.Names.LadderExchange(top), "k", false, false, amqp.Publishing{Headers: headers, Body: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	topoWaitReady(t, env, waiting, 1)
	consumed := p.Names.LadderQueue(0, 3)
	cch := env.Channel(t)
	if _, err := cch.ConsumeWithContext(ctx, consumed, "", false, false, false, false, nil); err != nil {
		t.Fatal(err)
	}

	rep, err = admin.Status(ctx, conn, p, admin.StatusOptions{})
	if !errors.Is(err, admin.ErrUnhealthy) || errors.Is(err, admin.ErrIncomplete) || !strings.Contains(err.Error(), consumed) {
		t.Errorf("status with a consumer on %s: %v; want ErrUnhealthy naming it", consumed, err)
	}
	for _, q := range rep.Queues {
		switch q.Name {
		case waiting:
			if q.Ready != 1 || q.TTL != int64(1<<(3*top)) {
				t.Errorf("%s: ready %d TTL %d; want 1 message, TTL %d", q.Name, q.Ready, q.TTL, 1<<(3*top))
			}
		case consumed:
			if q.Consumers != 1 {
				t.Errorf("%s: %d consumers, want 1", q.Name, q.Consumers)
			}
		case p.Names.SpecStream(): // AMQP counts no message in a stream
			if q.Consumers != 0 {
				t.Errorf("%s: consumers %d, want 0", q.Name, q.Consumers)
			}
		default:
			if q.Ready != 0 || q.Consumers != 0 {
				t.Errorf("%s: ready %d consumers %d, want 0 and 0", q.Name, q.Ready, q.Consumers)
			}
		}
	}
	if !slices.Equal(rep.ConsumedDelayQueues, []string{consumed}) {
		t.Errorf("consumed delay queues %v, want [%s]", rep.ConsumedDelayQueues, consumed)
	}

	if _, err := env.Channel(t).QueueDelete(p.Names.LadderQueue(1, 2), false, false, false); err != nil {
		t.Fatal(err)
	}
	rep, err = admin.Status(ctx, conn, p, admin.StatusOptions{})
	if !errors.Is(err, admin.ErrIncomplete) || !slices.Contains(rep.Missing, "queue "+p.Names.LadderQueue(1, 2)) {
		t.Errorf("status after deleting a queue: %v, missing %v; want ErrIncomplete naming it", err, rep.Missing)
	}
	// Apply repairs it; without the consumer the topology is healthy again.
	if _, err := admin.Apply(ctx, conn, p, admin.ApplyOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := cch.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.Status(ctx, conn, p, admin.StatusOptions{}); err != nil {
		t.Errorf("status after apply repaired the topology: %v", err)
	}
}

// deadLetterFixture declares a topology with a 50 ms quorum bucket, deletes its parking queue
// and publishes one message for an unknown target into the bucket: once due, nothing takes
// it, and the bucket queue holds it in its dead-letter state (retried forever).
type deadLetterFixture struct {
	ctx     context.Context
	conn    *amqp.Connection
	p       *admin.Plan
	m       *admin.Management
	bucketQ string
}

func newDeadLetterFixture(t *testing.T, env *brokertest.Env) deadLetterFixture {
	t.Helper()
	f := deadLetterFixture{m: topoNeedManagement(t, env), ctx: topoTestCtx(t, time.Minute), conn: env.Dial(t)}
	var err error
	f.p, err = admin.NewPlan(delayspec.Spec{Prefix: env.Prefix, Targets: delayspec.Targets{{Name: "t", Type: "direct"}}, Buckets: delayspec.Delays{50 * time.Millisecond},
		Ladder: ttlbuckets.Ladder{Radix: 2, Max: time.Second}, Plugin: delayspec.PluginOff})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := admin.Apply(f.ctx, f.conn, f.p, admin.ApplyOptions{}); err != nil {
		t.Fatal(err)
	}
	ch := env.Channel(t)
	if _, err := ch.QueueDelete(f.p.Names.Parking(), false, false, false); err != nil {
		t.Fatal(err)
	}
	if err := ch.PublishWithContext(f.ctx, f.p.Names.BucketExchange(), "", false, false, amqp.Publishing{
		Headers: amqp.Table{route.BucketHeader: int64(50), route.TargetHeader: "nowhere"}, Body: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	f.bucketQ = f.p.Names.BucketQueue(50)
	return f
}

// TestStatusShowsDeadLetterState: with the parking queue gone, a due message that no target
// takes stays in its quorum bucket queue's dead-letter state (at-least-once dead-lettering
// retries it forever); only the management API sees it (messages_dlx), and status fails with
// ErrUnhealthy naming the queue and the count. The broker publishes queue statistics every
// few seconds, so the test polls.
func TestStatusShowsDeadLetterState(t *testing.T) {
	t.Parallel()
	f := newDeadLetterFixture(t, brokertest.NewEnv(t))
	ctx, conn, p, m, bucketQ := f.ctx, f.conn, f.p, f.m, f.bucketQ
	for {
		rep, err := admin.Status(ctx, conn, p, admin.StatusOptions{Management: m})
		if !errors.Is(err, admin.ErrIncomplete) || !slices.Contains(rep.Missing, "queue "+p.Names.Parking()) {
			t.Fatalf("status without the parking queue: %v, missing %v", err, rep.Missing)
		}
		if !rep.Management || rep.Bindings == nil {
			t.Fatal("management view not used")
		}
		for _, q := range rep.Queues {
			if q.Name == bucketQ && q.MessagesDLX == 1 {
				if q.Ready != 0 {
					t.Errorf("ready %d: a message in dead-letter state is not ready", q.Ready)
				}
				want := fmt.Sprintf("%s (1)", bucketQ)
				if !errors.Is(err, admin.ErrUnhealthy) || !slices.Contains(rep.DeadLettering, admin.WaitingQueue{Name: bucketQ, MessagesDLX: 1}) ||
					!strings.Contains(err.Error(), "messages in dead-letter state (messages_dlx, at two readings) in "+want) {
					t.Errorf("status with a message in dead-letter state: %v, dead-lettering %v; want ErrUnhealthy naming %s", err, rep.DeadLettering, want)
				}
				return
			}
		}
		select {
		case <-ctx.Done():
			t.Fatalf("messages_dlx of %s never reached 1", bucketQ)
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// TestProbePluginWithoutPlugin: on a broker without the plugin the probe answers false and
// leaves nothing behind; the connection it used is its own.
func TestProbePluginWithoutPlugin(t *testing.T) {
	t.Parallel()
	env := brokertest.NewEnv(t)
	ctx := topoTestCtx(t, 30*time.Second)
	other := env.Dial(t)
	dial := func(ctx context.Context) (*amqp.Connection, error) {
		return amqp.DialConfig(env.URL, amqp.Config{Dial: amqp.DefaultDial(10 * time.Second)})
	}
	ok, err := admin.ProbePlugin(ctx, dial, env.Prefix)
	if err != nil {
		t.Fatalf("probe: %v", err)
	}
	if ok && brokertest.InCI() {
		t.Fatal("probe says the plugin is there; CI's broker has none")
	}
	if !ok && other.IsClosed() {
		t.Error("the probe closed another connection")
	}
	if env.Broker.ManagementURL != "" {
		m := topoNeedManagement(t, env)
		viaMgmt, err := admin.ProbePluginManagement(ctx, m)
		if err != nil || viaMgmt != ok {
			t.Errorf("management probe %v (%v), AMQP probe %v", viaMgmt, err, ok)
		}
		ex, _, _ := topoBrokerView(t, env)
		if len(ex) != 0 {
			t.Errorf("probe left exchanges behind: %v", ex)
		}
	}
}

// importDefinitions loads definitions JSON into the broker with `rabbitmqctl import_definitions`
// when the broker is the private node of scripts/broker (BROKER_STATE, set by `make test`), and
// otherwise with the management API's POST /api/definitions/<vhost>, which runs the same importer.
func importDefinitions(t *testing.T, env *brokertest.Env, defs []byte) {
	t.Helper()
	if state := os.Getenv("BROKER_STATE"); privateNode() {
		f, err := os.CreateTemp("", "rabbitdelay-defs-*.json")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.Remove(f.Name()) })
		if _, err := f.Write(defs); err != nil {
			t.Fatal(err)
		}
		f.Close()
		// rabbitmqctl runs as the node's user, which must be able to read the file.
		if err := os.Chmod(f.Name(), 0o644); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command("../scripts/broker", "ctl", "import_definitions", f.Name())
		cmd.Env = append(os.Environ(), "BROKER_STATE="+state)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("rabbitmqctl import_definitions: %v\n%s", err, out)
		}
		t.Logf("imported with rabbitmqctl import_definitions")
		return
	}
	if err := env.Broker.Management("POST", "api/definitions/"+url.PathEscape(env.VHost), json.RawMessage(defs), nil); err != nil {
		t.Fatalf("import definitions through the management API: %v", err)
	}
	t.Logf("imported through the management API (no private node of scripts/broker to run rabbitmqctl on)")
}

// TestApplyRecordOnlyAfterWholeLadder: the spec record, which publishers read, is written only
// when its apply declared every object. Two applies of different ladders racing on one prefix
// cannot both succeed; the record is the spec of the apply that succeeded, and there is none
// when both failed (each found objects the other declared); an apply cut off by its context
// leaves no record.
func TestApplyRecordOnlyAfterWholeLadder(t *testing.T) {
	t.Parallel()
	env := brokertest.NewEnv(t)
	ctx := topoTestCtx(t, 2*time.Minute)
	plan := func(prefix string, radix int) *admin.Plan {
		p, err := admin.NewPlan(delayspec.Spec{Prefix: prefix, Targets: delayspec.Targets{{Name: env.Name("orders"), Type: "topic"}},
			Ladder: ttlbuckets.Ladder{Radix: radix, Max: time.Hour}, QueueType: delayspec.Classic, Plugin: delayspec.PluginOff})
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	record := func(prefix string) (delayspec.Spec, error) { return delayspec.ReadRecord(ctx, env.Dial(t), prefix) }
	if env.VHost == "/" {
		t.Cleanup(func() { _ = env.Channel(t).ExchangeDelete(env.Name("orders"), false, false) })
	}
	for round := range 3 {
		prefix := env.Name(fmt.Sprintf("race%d", round))
		plans := []*admin.Plan{plan(prefix, 16), plan(prefix, 32)}
		errs := make([]error, len(plans))
		var wg sync.WaitGroup
		for i, p := range plans {
			conn := env.Dial(t)
			wg.Go(func() { _, errs[i] = admin.Apply(ctx, conn, p, admin.ApplyOptions{}) })
		}
		wg.Wait()
		if errs[0] == nil && errs[1] == nil {
			t.Fatalf("round %d: applies of radix 16 and radix 32 on one prefix both succeeded", round)
		}
		rec, err := record(prefix)
		if errs[0] != nil && errs[1] != nil {
			// Each apply found objects the other had declared with other arguments: neither
			// declared every object, so neither may have written its record.
			if !errors.Is(err, delayspec.ErrNoRecord) {
				t.Errorf("round %d: both applies failed (%v), and the spec record is %+v (%v), want none", round, errs, rec, err)
			}
		} else {
			if err != nil {
				t.Fatalf("round %d: the spec record after the race: %v (applies returned %v)", round, err, errs)
			}
			for i, p := range plans {
				if (rec.Ladder == p.Ladder) != (errs[i] == nil) {
					t.Errorf("round %d: the record's ladder is radix %d, and the apply of radix %d returned %v", round, rec.Ladder.Radix, p.Ladder.Radix, errs[i])
				}
			}
		}
		if env.VHost == "/" {
			for _, p := range plans {
				_, _ = admin.Teardown(ctx, env.Dial(t), p, admin.TeardownOptions{Force: true})
			}
		}
	}

	cut := plan(env.Name("cut"), 16)
	short, cancel := context.WithTimeout(ctx, 30*time.Millisecond)
	_, err := admin.Apply(short, env.Dial(t), cut, admin.ApplyOptions{})
	cancel()
	if err == nil {
		t.Skip("the apply finished within 30 ms: nothing was cut off")
	}
	time.Sleep(500 * time.Millisecond) // declarations in flight finish in the background
	if rec, rerr := record(cut.Spec.Prefix); !errors.Is(rerr, delayspec.ErrNoRecord) {
		t.Errorf("an apply cut off by its context (%v) left the record %+v (%v)", err, rec, rerr)
	}
	if env.VHost == "/" {
		_, _ = admin.Teardown(ctx, env.Dial(t), cut, admin.TeardownOptions{Force: true})
	}
}

// TestTeardownCountsDeadLetterState: a message a quorum delay queue holds for dead-lettering
// (due, but no queue takes it) is invisible to AMQP; teardown counts it through the
// management API and refuses to delete its queue without Force.
func TestTeardownCountsDeadLetterState(t *testing.T) {
	t.Parallel()
	f := newDeadLetterFixture(t, brokertest.NewEnv(t))
	ctx, conn, p, m, bucketQ := f.ctx, f.conn, f.p, f.m, f.bucketQ
	for {
		qs, err := m.Queues(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if qs[bucketQ].MessagesDLX == 1 {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("messages_dlx of %s never reached 1", bucketQ)
		case <-time.After(500 * time.Millisecond):
		}
	}
	rep, err := admin.Teardown(ctx, conn, p, admin.TeardownOptions{Management: m})
	if !errors.Is(err, admin.ErrNotEmpty) || !strings.Contains(err.Error(), bucketQ) || rep.Count(admin.StateDeleted) != 0 {
		t.Fatalf("teardown with a message in dead-letter state: %v, %d deleted; want ErrNotEmpty naming %s", err, rep.Count(admin.StateDeleted), bucketQ)
	}
	if _, err := admin.Teardown(ctx, conn, p, admin.TeardownOptions{Management: m, Force: true}); err != nil {
		t.Fatalf("teardown --force: %v", err)
	}
}

// TestApplyReadyQueueDeliveryLimitParks: a quorum ready queue declared with
// --ready-delivery-limit 3 redelivers a message its consumer gives back as failed 3 times; the
// 4th failed return dead-letters it to the parking queue, with an x-death entry of reason
// delivery_limit naming the ready queue. Status then counts it in the parking queue. Before
// RabbitMQ 4.3 a basic.nack with requeue counts as failed (3.10 has no limit of its own, 4.0 a
// default of 20). From 4.3 on only basic.reject with requeue counts (rabbitmq-server PR #15387:
// it raises x-delivery-count); a basic.nack with requeue is a plain return that raises
// x-acquired-count only: 2 x the limit of them leave the message in the ready queue, and the
// rejects after them park it.
func TestApplyReadyQueueDeliveryLimitParks(t *testing.T) {
	t.Parallel()
	const limit = 3
	env := brokertest.NewEnv(t)
	m := topoNeedManagement(t, env)
	spec := polSpec(delayspec.Quorum)
	spec.ReadyDeliveryLimit = limit
	p, _, err := polApply(t, env, m, spec)
	if err != nil {
		t.Fatal(err)
	}
	q, _ := p.Queue("orders.ready")
	if q.Args["x-delivery-limit"] != int64(limit) || q.Args["x-dead-letter-exchange"] != p.Names.Unroutable() {
		t.Fatalf("ready queue arguments %v", q.Args)
	}
	ctx := topoTestCtx(t, time.Minute)
	ch := env.Channel(t)
	if err := ch.PublishWithContext(ctx, "orders", "bound", false, false, amqp.Publishing{DeliveryMode: amqp.Persistent, Body: []byte("poison")}); err != nil {
		t.Fatal(err)
	}
	cch := env.Channel(t)
	ds, err := cch.ConsumeWithContext(ctx, "orders.ready", "", false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	parked := polConsume(t, env, p.Names.Parking())
	// plainReturns: from 4.3 on, nacks with requeue that must not count toward the limit.
	plainReturns := 0
	if brokerAtLeast(t, env, 4, 3) {
		plainReturns = 2 * limit
	}
	deliveries, failed := 0, 0
	for {
		select {
		case d := <-ds:
			deliveries++
			if deliveries <= plainReturns {
				if n, ok := d.Headers["x-delivery-count"]; ok {
					t.Errorf("delivery %d after %d plain returns carries x-delivery-count %v: nack with requeue counted", deliveries, deliveries-1, n)
				}
				if n, _ := d.Headers["x-acquired-count"].(int64); deliveries > 1 && n != int64(deliveries-1) {
					t.Errorf("delivery %d: x-acquired-count %v, want %d", deliveries, d.Headers["x-acquired-count"], deliveries-1)
				}
				if err := d.Nack(false, true); err != nil {
					t.Fatal(err)
				}
				continue
			}
			failed++
			if plainReturns > 0 {
				err = d.Reject(true)
			} else {
				err = d.Nack(false, true)
			}
			if err != nil {
				t.Fatal(err)
			}
			if failed > limit+1 {
				t.Fatalf("given back as failed %d times (after %d plain returns) with x-delivery-limit %d: the limit did not apply", failed, plainReturns, limit)
			}
			continue
		case a := <-parked:
			if failed != limit+1 {
				t.Errorf("parked after %d failed returns (and %d plain returns), want %d", failed, plainReturns, limit+1)
			}
			deaths, _ := a.d.Headers["x-death"].([]any)
			var reason, queue any
			if len(deaths) > 0 {
				if d0, ok := deaths[0].(amqp.Table); ok {
					reason, queue = d0["reason"], d0["queue"]
				}
			}
			if reason != "delivery_limit" || queue != "orders.ready" || string(a.d.Body) != "poison" {
				t.Errorf("parked message: body %q, x-death %v; want reason delivery_limit from orders.ready", a.d.Body, a.d.Headers["x-death"])
			}
			t.Logf("RabbitMQ %d: parked after %d failed returns and %d plain returns, x-death %v", polMajor(t, env), failed, plainReturns, deaths)
			return
		case <-ctx.Done():
			t.Fatalf("not parked after %d failed returns and %d plain returns", failed, plainReturns)
		}
	}
}

// TestApplyRecordsTargetsAndDispatchBound: apply records every target in the spec record;
// DispatchBound reads the real binding (false once it is removed by hand, while the record
// stays); teardown deletes the spec stream and the policies.
func TestApplyRecordsTargetsAndDispatchBound(t *testing.T) {
	t.Parallel()
	env := brokertest.NewEnv(t)
	m := topoNeedManagement(t, env)
	ctx := topoTestCtx(t, time.Minute)
	spec := polSpec(delayspec.Quorum)
	long := strings.Repeat("t", 250)
	spec.Targets = append(spec.Targets, delayspec.Target{Name: long, Type: "direct"})
	p, _, err := polApply(t, env, m, spec)
	if err != nil {
		t.Fatal(err)
	}
	ch := env.Channel(t)
	rec, err := delayspec.ReadRecord(ctx, env.Dial(t), p.Spec.Prefix)
	if err != nil {
		t.Fatal(err)
	}
	for _, target := range []string{"orders", long} {
		if !rec.HasTarget(target) {
			t.Fatalf("the spec record lacks target %.20s...: %+v", target, rec.Targets)
		}
		if ok, err := m.DispatchBound(ctx, p, target); !ok || err != nil {
			t.Errorf("DispatchBound(%.20s...) = %v, %v; want true", target, ok, err)
		}
	}
	if ok, err := m.DispatchBound(ctx, p, "not-a-target"); ok || err != nil {
		t.Errorf("DispatchBound(not-a-target) = %v, %v; want false", ok, err)
	}
	if err := ch.ExchangeUnbind("orders", "", p.Names.Dispatch(), false, amqp.Table{"x-match": "all", route.TargetHeader: "orders"}); err != nil {
		t.Fatal(err)
	}
	if ok, err := m.DispatchBound(ctx, p, "orders"); ok || err != nil {
		t.Errorf("DispatchBound(orders) after unbinding = %v, %v; want false", ok, err)
	}
	rep, err := admin.Teardown(ctx, env.Dial(t), p, admin.TeardownOptions{Force: true, Management: m})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rep.Results {
		if (r.Kind == admin.KindPolicy || r.Name == p.Names.SpecStream()) && r.State != admin.StateDeleted {
			t.Errorf("teardown: %s %s %s", r.Kind, r.Name, r.State)
		}
	}
	var pols []struct{ Name string }
	topoMgmtJSON(t, env, "api/policies/"+url.PathEscape(env.VHost), &pols)
	gotEx, _, _ := topoBrokerView(t, env)
	if len(pols) != 0 || slices.ContainsFunc(gotEx, func(e string) bool { return strings.HasPrefix(e, "rd.") }) {
		t.Errorf("after teardown: policies %v, exchanges %v", pols, gotEx)
	}
}
