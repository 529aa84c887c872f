//go:build integration

package integration

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"go.uber.org/goleak"

	"github.com/delaykit/rabbitdelay/amqpdelay"
	"github.com/delaykit/rabbitdelay/integration/brokertest"
	"github.com/delaykit/rabbitdelay/internal/admin"
	"github.com/delaykit/rabbitdelay/internal/delayspec"
	"github.com/delaykit/rabbitdelay/internal/route"
	"github.com/delaykit/rabbitdelay/ttlbuckets"
)

// TestPublisherHeadOfLine: A due in 10 s, then B due in 1 s, same target: B arrives first,
// neither before its due time. Per-message TTLs in one queue would hold B behind A.
func TestPublisherHeadOfLine(t *testing.T) {
	t.Parallel()
	f := newDirectFixture(t)
	_, target, _, _, got, p, ctx := f.env, f.target, f.spec, f.q, f.got, f.p, f.ctx

	start := time.Now()
	ra, err := p.Publish(ctx, target, "k", textMsg("A"), 10*time.Second)
	if err != nil {
		t.Fatalf("publish A: %v", err)
	}
	rb, err := p.Publish(ctx, target, "k", textMsg("B"), time.Second)
	if err != nil {
		t.Fatalf("publish B: %v", err)
	}
	if ra.Path != amqpdelay.PathLadder || rb.Path != amqpdelay.PathLadder {
		t.Errorf("paths = %v, %v; want ladder, ladder", ra.Path, rb.Path)
	}
	first := nextDelivery(t, got, 5*time.Second)
	if string(first.d.Body) != "B" {
		t.Fatalf("first delivery = %q, want B (head-of-line blocking?)", first.d.Body)
	}
	checkOnTime(t, first)
	if e := first.at.Sub(start); e < time.Second {
		t.Errorf("B arrived after %v, before its 1 s delay", e)
	}
	second := nextDelivery(t, got, 12*time.Second)
	if string(second.d.Body) != "A" {
		t.Fatalf("second delivery = %q, want A", second.d.Body)
	}
	checkOnTime(t, second)
	if e := second.at.Sub(start); e < 10*time.Second {
		t.Errorf("A arrived after %v, before its 10 s delay", e)
	}
	if second.d.MessageId != ra.MessageID {
		t.Errorf("A's message ID = %q, receipt says %q", second.d.MessageId, ra.MessageID)
	}
	if second.d.DeliveryMode != amqp.Persistent {
		t.Errorf("delivery mode = %d, want persistent", second.d.DeliveryMode)
	}
}

// TestPublisherOrdering: 100 messages with the same delay, published one after the other,
// arrive in publish order.
func TestPublisherOrdering(t *testing.T) {
	t.Parallel()
	f := newDirectFixture(t)
	_, target, _, _, got, p, ctx := f.env, f.target, f.spec, f.q, f.got, f.p, f.ctx
	const n = 100
	for i := range n {
		if _, err := p.Publish(ctx, target, "k", textMsg(strconv.Itoa(i)), 1500*time.Millisecond); err != nil {
			t.Fatalf("publish %d: %v", i, err)
		}
	}
	for i := range n {
		r := nextDelivery(t, got, 10*time.Second)
		checkOnTime(t, r)
		if string(r.d.Body) != strconv.Itoa(i) {
			t.Fatalf("delivery %d has body %q: out of publish order", i, r.d.Body)
		}
	}
}

// TestPublisherRouting: a topic target with two queues bound by different patterns: each gets
// exactly its messages, with the original routing key, after the delay.
func TestPublisherRouting(t *testing.T) {
	t.Parallel()
	env := brokertest.NewEnv(t)
	target := env.Name("events")
	spec := testSpec(env, delayspec.Target{Name: target, Type: "topic"})
	spec.Buckets = delayspec.Delays{time.Second}
	declareTopology(t, env, spec)
	eu, us := env.Name("eu"), env.Name("us")
	declareReadyQueue(t, env, eu, target, "eu.*")
	declareReadyQueue(t, env, us, target, "us.#")
	gotEU, gotUS := consumeQueue(t, env, eu), consumeQueue(t, env, us)
	p := newPublisher(t, env, spec)
	ctx := pubCtx(t)
	sent := map[string][]string{eu: {"eu.paris", "eu.berlin"}, us: {"us.ny.brooklyn", "us.sf"}}
	delays := []time.Duration{time.Second, 1200 * time.Millisecond} // bucket, ladder
	for _, keys := range sent {
		for i, k := range keys {
			r, err := p.Publish(ctx, target, k, textMsg(k), delays[i])
			if err != nil {
				t.Fatalf("publish %s: %v", k, err)
			}
			if want := []amqpdelay.Path{amqpdelay.PathBucket, amqpdelay.PathLadder}[i]; r.Path != want {
				t.Errorf("path for %v = %v, want %v", delays[i], r.Path, want)
			}
		}
	}
	for q, c := range map[string]<-chan arrival{eu: gotEU, us: gotUS} {
		var keys []string
		for range sent[q] {
			r := nextDelivery(t, c, 5*time.Second)
			checkOnTime(t, r)
			if string(r.d.Body) != r.d.RoutingKey {
				t.Errorf("queue %s: body %q arrived with routing key %q", q, r.d.Body, r.d.RoutingKey)
			}
			// Delivery.Exchange is the exchange the broker last published the message to (a
			// dead-letter exchange of the delay topology); the target is in the header.
			if r.d.Headers[route.TargetHeader] != target {
				t.Errorf("queue %s: target header %v, want %q", q, r.d.Headers[route.TargetHeader], target)
			}
			keys = append(keys, r.d.RoutingKey)
		}
		slices.Sort(keys)
		want := slices.Sorted(slices.Values(sent[q]))
		if !slices.Equal(keys, want) {
			t.Errorf("queue %s got keys %v, want %v", q, keys, want)
		}
	}
	noDelivery(t, gotEU, 500*time.Millisecond)
	noDelivery(t, gotUS, 10*time.Millisecond)
}

// TestPublisherRetryWithXDeath: a delivery re-published with its x-death headers (a retry)
// arrives again after its new delay. The broker's dead-letter cycle detection (RabbitMQ 3.x)
// would drop it silently if the ladder queues' x-death entries went back in.
func TestPublisherRetryWithXDeath(t *testing.T) {
	t.Parallel()
	env := brokertest.NewEnv(t)
	target := env.Name("jobs")
	spec := testSpec(env, delayspec.Target{Name: target, Type: "direct"})
	spec.Buckets = delayspec.Delays{700 * time.Millisecond}
	declareTopology(t, env, spec)
	q := env.Name("ready")
	declareReadyQueue(t, env, q, target, "job")
	got := consumeQueue(t, env, q)
	p := newPublisher(t, env, spec)
	ctx := pubCtx(t)
	msg := textMsg("work")
	msg.Headers = amqp.Table{"attempt": int64(1)}
	if _, err := p.Publish(ctx, target, "job", msg, 500*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	first := nextDelivery(t, got, 5*time.Second)
	checkOnTime(t, first)
	if _, ok := first.d.Headers["x-death"]; !ok {
		t.Fatalf("first delivery has no x-death header (headers %v): the test would prove nothing", first.d.Headers)
	}
	// The retries re-use the delivery as it came, x-death and all: the same ladder queues
	// (the same delay again), a different ladder route, and the bucket.
	for i, d := range []time.Duration{500 * time.Millisecond, 300 * time.Millisecond, 700 * time.Millisecond} {
		prev := first.d
		retry := amqp.Publishing{Headers: prev.Headers, Body: prev.Body, MessageId: prev.MessageId, ContentType: prev.ContentType}
		retry.Headers["attempt"] = int64(i + 2)
		r, err := p.Publish(ctx, target, "job", retry, d)
		if err != nil {
			t.Fatalf("retry %d: %v", i, err)
		}
		again := nextDelivery(t, got, 5*time.Second)
		checkOnTime(t, again)
		if a := again.at.Sub(first.at); a < d {
			t.Errorf("retry %d arrived %v after the previous delivery, before its delay %v", i, a, d)
		}
		if again.d.Headers["attempt"] != int64(i+2) {
			t.Errorf("retry %d: attempt header = %v", i, again.d.Headers["attempt"])
		}
		if again.d.MessageId != prev.MessageId || r.MessageID != prev.MessageId {
			t.Errorf("retry %d: message ID %q (receipt %q), want the caller's %q", i, again.d.MessageId, r.MessageID, prev.MessageId)
		}
		first = again
	}
}

// TestPublisherMissingExchangeOthersUntouched: a direct publish to an exchange that does not
// exist is refused (ErrExchangeNotFound, after a passive declare on a channel of its own)
// instead of being sent, and one the broker refuses (an internal exchange: 403) goes out on the
// channel for exchanges other than targets, so neither closes the channel of the ladder
// publishes in flight (one channel here). An exchange declared later is found; one deleted
// after its check gets the broker's 404 once and is checked again afterwards.
func TestPublisherMissingExchangeOthersUntouched(t *testing.T) {
	t.Parallel()
	f := newDirectFixture(t, amqpdelay.Config{Channels: 1})
	env, target, p, ctx := f.env, f.target, f.p, f.ctx

	// Due in about a minute (the test ladder's maximum is 65.5 s): nothing falls due while the
	// test runs.
	c := startCanary(4, func() error {
		_, err := p.Publish(ctx, target, "k", textMsg("ladder"), time.Minute+time.Duration(rand.IntN(1000))*time.Millisecond)
		return err
	})
	time.Sleep(200 * time.Millisecond)
	for i := range 5 {
		missing := env.Name(fmt.Sprintf("missing-%d", i))
		_, err := p.Publish(ctx, missing, "k", textMsg("direct"), 0)
		var ae *amqp.Error
		if !errors.Is(err, amqpdelay.ErrExchangeNotFound) || !errors.As(err, &ae) || ae.Code != amqp.NotFound || !strings.Contains(err.Error(), missing) {
			t.Errorf("direct publish to missing exchange %s: err = %v, want ErrExchangeNotFound naming it, wrapping 404", missing, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	// An internal exchange exists, so it passes the check, and the broker refuses the publish
	// (403) by closing the channel: the serial one, where it was the only publish in flight.
	internal := env.Name("internal")
	if err := env.Channel(t).ExchangeDeclare(internal, "fanout", false, true, true, false, nil); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		_, err := p.Publish(ctx, internal, "k", textMsg("internal"), 0)
		var ae *amqp.Error
		if !errors.Is(err, amqpdelay.ErrAccessRefused) || !errors.As(err, &ae) || ae.Code != amqp.AccessRefused {
			t.Errorf("direct publish to internal exchange %s: err = %v, want ErrAccessRefused wrapping 403 ACCESS_REFUSED", internal, err)
		}
	}
	time.Sleep(200 * time.Millisecond)
	c.check(t, "direct publishes to missing and internal exchanges")

	// The refusal is not remembered: declared now, the exchange takes the publish.
	late := env.Name("missing-0")
	ch := env.Channel(t)
	if err := ch.ExchangeDeclare(late, "fanout", false, true, false, false, nil); err != nil {
		t.Fatal(err)
	}
	declareReadyQueue(t, env, env.Name("late-ready"), late, "")
	if _, err := p.Publish(ctx, late, "k", textMsg("late"), 0); err != nil {
		t.Fatalf("direct publish to %s once declared: %v", late, err)
	}
	// Deleted after its check: the broker's 404 is the publish's own answer, whether it went on
	// the serial channel or (its channel closed) was sent again alone; then the check again.
	if err := ch.ExchangeDelete(late, false, false); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Publish(ctx, late, "k", textMsg("deleted"), 0); !errors.Is(err, amqpdelay.ErrExchangeNotFound) || errors.Is(err, amqpdelay.ErrConnectionLost) {
		t.Errorf("direct publish to %s after it was deleted: err = %v, want ErrExchangeNotFound (the broker's 404) alone", late, err)
	}
	if _, err := p.Publish(ctx, late, "k", textMsg("deleted"), 0); !errors.Is(err, amqpdelay.ErrExchangeNotFound) {
		t.Errorf("second direct publish to deleted %s: err = %v, want ErrExchangeNotFound", late, err)
	}
	// The same with a 240-byte name, which RabbitMQ's 404 reply text (cut off at 255 bytes)
	// does not hold whole.
	long := env.Name("")
	long += strings.Repeat("x", 240-len(long))
	if err := ch.ExchangeDeclare(long, "fanout", false, true, false, false, nil); err != nil {
		t.Fatal(err)
	}
	declareReadyQueue(t, env, env.Name("long-ready"), long, "")
	if _, err := p.Publish(ctx, long, "k", textMsg("long"), 0); err != nil {
		t.Fatalf("direct publish to a 240-byte exchange name: %v", err)
	}
	if err := ch.ExchangeDelete(long, false, false); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Publish(ctx, long, "k", textMsg("deleted"), 0); !errors.Is(err, amqpdelay.ErrExchangeNotFound) || errors.Is(err, amqpdelay.ErrConnectionLost) {
		t.Errorf("direct publish to the 240-byte name after it was deleted: err = %v, want ErrExchangeNotFound (the broker's 404) alone", err)
	}
	if _, err := p.Publish(ctx, long, "k", textMsg("deleted"), 0); !errors.Is(err, amqpdelay.ErrExchangeNotFound) {
		t.Errorf("second direct publish to the deleted 240-byte name: err = %v, want ErrExchangeNotFound", err)
	}
}

// TestPublisherChannelMax: a connection whose channel_max (here lowered by the client, with
// the URI's channel_max parameter) cannot hold Config.Channels n channels, the one that checks
// exchanges and the serial one is refused with ErrInvalidConfig naming channel_max; one that
// can starts, publishes, and checks exchanges.
func TestPublisherChannelMax(t *testing.T) {
	t.Parallel()
	f := declareDirectFixture(t)
	env, target, spec, ctx := f.env, f.target, f.spec, f.ctx
	u, err := url.Parse(env.URL)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("channel_max", "3")
	u.RawQuery = q.Encode()
	cfg := amqpdelay.Config{Prefix: spec.Prefix, Channels: 2}
	cfg.URL = u.String()
	if p, err := amqpdelay.NewPublisher(ctx, cfg); !errors.Is(err, amqpdelay.ErrInvalidConfig) ||
		!strings.Contains(err.Error(), "channel_max") || !strings.Contains(err.Error(), "at most 1") {
		if p != nil {
			_ = p.Close()
		}
		t.Fatalf("Config.Channels 2 on a connection with channel_max 3: err = %v, want ErrInvalidConfig naming channel_max and Config.Channels at most 1", err)
	}
	p := newPublisherURL(t, u.String(), spec, amqpdelay.Config{Channels: 1})
	if _, err := p.Publish(ctx, target, "k", textMsg("x"), time.Second); err != nil {
		t.Fatalf("Config.Channels 1 on a connection with channel_max 3: %v", err)
	}
	// The channels left check exchanges and carry the publish a 404 answers: a missing
	// exchange is refused, a new one taken, and the publishing channel is never closed by a 404.
	if _, err := p.Publish(ctx, env.Name("missing"), "k", textMsg("x"), 0); !errors.Is(err, amqpdelay.ErrExchangeNotFound) {
		t.Errorf("direct publish to a missing exchange with channel_max 3: err = %v, want ErrExchangeNotFound", err)
	}
	if _, err := p.Publish(ctx, "amq.direct", "nobody", textMsg("x"), 0); !errors.Is(err, amqpdelay.ErrUnroutable) {
		t.Errorf("direct publish to amq.direct with an unbound key: err = %v, want ErrUnroutable", err)
	}
}

// TestPublisherUnroutable: what happens to messages no queue takes is what the README says,
// and nothing vanishes without a trace.
func TestPublisherUnroutable(t *testing.T) {
	t.Parallel()
	env := brokertest.NewEnv(t)
	target, gone := env.Name("orders"), env.Name("gone")
	spec := testSpec(env, delayspec.Target{Name: target, Type: "direct"}, delayspec.Target{Name: gone, Type: "direct"})
	declareTopology(t, env, spec)
	q := env.Name("ready")
	declareReadyQueue(t, env, q, target, "bound")
	declareReadyQueue(t, env, env.Name("gone-ready"), gone, "bound")
	p := newPublisher(t, env, spec)
	ctx := pubCtx(t)
	n := spec.Names()

	// Unknown target: refused, nothing sent.
	if _, err := p.Publish(ctx, env.Name("nope"), "bound", textMsg("x"), time.Second); !errors.Is(err, amqpdelay.ErrUnknownTarget) {
		t.Errorf("unknown target: err = %v, want ErrUnknownTarget", err)
	}
	// Direct publish with no binding for the key: the mandatory publish comes back.
	_, err := p.Publish(ctx, target, "unbound", textMsg("x"), 0)
	if !errors.Is(err, amqpdelay.ErrUnroutable) || !strings.Contains(err.Error(), "NO_ROUTE") {
		t.Errorf("direct, unbound key: err = %v, want ErrUnroutable with NO_ROUTE", err)
	}
	// Direct publish to an exchange that does not exist: refused after a passive declare, the
	// broker's 404 wrapped, and the Publisher goes on.
	_, err = p.Publish(ctx, env.Name("missing"), "k", textMsg("x"), 0)
	var ae *amqp.Error
	if !errors.Is(err, amqpdelay.ErrExchangeNotFound) || !errors.As(err, &ae) || ae.Code != amqp.NotFound ||
		!strings.Contains(err.Error(), env.Name("missing")) {
		t.Errorf("direct to a missing exchange: err = %v, want ErrExchangeNotFound naming it, wrapping 404 NOT_FOUND", err)
	}
	if _, err := p.Publish(ctx, target, "bound", textMsg("after 404"), 0); err != nil {
		t.Errorf("publish after the channel error: %v", err)
	}

	// Due, but the target has no binding for the key: the quorum ladder queue keeps it in its
	// dead-letter state (messages_dlx), visible in the management API and `rabbitdelay status`.
	r, err := p.Publish(ctx, target, "unbound", textMsg("late"), 300*time.Millisecond)
	if err != nil {
		t.Fatalf("delayed, unbound key: %v (the key is only routed when due)", err)
	}
	// 300 ms = 0x12C: the last hop (shortest first) is level 2, digit 1, in its last-hop queue
	// (level 2 of the test ladder's 4 dead-letters into level 3).
	last := n.LadderLastHopQueueShard(2, 1, 0)
	st := waitStats(t, env, 15*time.Second, func(s map[string]map[string]int) bool { return s[last]["messages_dlx"] == 1 })
	if st[last]["messages_dlx"] != 1 {
		t.Errorf("message %s due with no binding for its key: not held in %s's dead-letter state; queue stats: %v", r.MessageID, last, st)
	}

	// Due, but its target is no longer bound to the dispatch exchange: the dispatch exchange's
	// alternate exchange puts it in the parking queue, headers intact.
	unbind := env.Channel(t)
	if err := unbind.ExchangeUnbind(gone, "", n.Dispatch(), false, amqp.Table{"x-match": "all", route.TargetHeader: gone}); err != nil {
		t.Fatal(err)
	}
	parked := consumeQueue(t, env, n.Parking())
	r, err = p.Publish(ctx, gone, "bound", textMsg("parked"), 400*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	a := nextDelivery(t, parked, 5*time.Second)
	checkOnTime(t, a)
	if a.d.MessageId != r.MessageID || a.d.RoutingKey != "bound" || a.d.Headers[route.TargetHeader] != gone {
		t.Errorf("parked message: id %q key %q target %v; want %q, bound, %q", a.d.MessageId, a.d.RoutingKey, a.d.Headers[route.TargetHeader], r.MessageID, gone)
	}
}

// TestPublisherZeroNegativeAndTooLong: zero and negative delays (and PublishAt in the past)
// arrive at once; a delay above the maximum returns ErrDelayTooLong and nothing reaches the
// broker.
func TestPublisherZeroNegativeAndTooLong(t *testing.T) {
	t.Parallel()
	f := newDirectFixture(t)
	env, target, spec, _, got, p, ctx := f.env, f.target, f.spec, f.q, f.got, f.p, f.ctx
	for _, d := range []time.Duration{0, -time.Second, -365 * 24 * time.Hour} {
		r, err := p.Publish(ctx, target, "k", textMsg(d.String()), d)
		if err != nil {
			t.Fatalf("delay %v: %v", d, err)
		}
		if r.Path != amqpdelay.PathDirect || r.Delay != 0 {
			t.Errorf("delay %v: receipt %+v, want direct with delay 0", d, r)
		}
		a := nextDelivery(t, got, 2*time.Second)
		checkOnTime(t, a)
	}
	r, err := p.PublishAt(ctx, target, "k", textMsg("past"), time.Now().Add(-time.Minute))
	if err != nil || r.Path != amqpdelay.PathDirect {
		t.Fatalf("PublishAt in the past: %+v, %v; want direct", r, err)
	}
	checkOnTime(t, nextDelivery(t, got, 2*time.Second))

	// Above the ladder's maximum (65,535 ms), no plugin: refused, stating the maximum.
	max := spec.Ladder.Max
	for _, d := range []time.Duration{max + time.Millisecond, 24 * time.Hour} {
		_, err := p.Publish(ctx, target, "k", textMsg("too long"), d)
		if !errors.Is(err, amqpdelay.ErrDelayTooLong) || !strings.Contains(err.Error(), max.String()) {
			t.Errorf("delay %v: err = %v, want ErrDelayTooLong stating %v", d, err, max)
		}
	}
	_, err = p.PublishAt(ctx, target, "k", textMsg("too late"), time.Now().Add(time.Hour))
	if !errors.Is(err, amqpdelay.ErrDelayTooLong) {
		t.Errorf("PublishAt in an hour: err = %v, want ErrDelayTooLong", err)
	}
	// Beyond what a time.Duration holds (time.Until saturates): the error names the time asked for.
	far := time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC)
	if _, err := p.PublishAt(ctx, target, "k", textMsg("too late"), far); !errors.Is(err, amqpdelay.ErrDelayTooLong) ||
		!strings.Contains(err.Error(), "9999-01-01T00:00:00Z") || !strings.Contains(err.Error(), max.String()) {
		t.Errorf("PublishAt in 9999: err = %v, want ErrDelayTooLong naming the time and the maximum", err)
	}
	if d, err := p.PublishAtDeferred(ctx, target, "k", textMsg("too late"), far); err != nil {
		t.Errorf("PublishAtDeferred in 9999: %v", err)
	} else if _, err := d.Wait(ctx); !errors.Is(err, amqpdelay.ErrDelayTooLong) || !strings.Contains(err.Error(), "9999-01-01T00:00:00Z") {
		t.Errorf("PublishAtDeferred in 9999: err = %v, want ErrDelayTooLong naming the time", err)
	}
	// The maximum itself is accepted (then the message is purged with the vhost).
	if r, err := p.Publish(ctx, target, "k", textMsg("max"), max); err != nil || r.Path != amqpdelay.PathLadder {
		t.Errorf("delay = max: %+v, %v", r, err)
	}
	// Nothing of the refused ones reached the broker: only the maximum's message is queued.
	// Passive declares count at once (management statistics lag by seconds); the message may
	// be between two queues at one instant, so look until it is seen, and never more than one.
	plan, err := admin.NewPlan(spec)
	if err != nil {
		t.Fatal(err)
	}
	ch := env.Channel(t)
	deadline := time.Now().Add(10 * time.Second)
	total := 0
	for total != 1 && time.Now().Before(deadline) {
		total = 0
		for _, q := range plan.Queues {
			if q.Role == admin.RoleSpec { // holds the spec record; a stream's count over AMQP varies
				continue
			}
			st, err := ch.QueueDeclarePassive(q.Name, true, false, false, false, nil)
			if err != nil {
				t.Fatalf("passive declare %s: %v", q.Name, err)
			}
			total += st.Messages
		}
		if total > 1 {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if total != 1 {
		t.Errorf("%d messages queued in the topology's queues, want 1 (the maximum's)", total)
	}
	noDelivery(t, got, 10*time.Millisecond)
}

// TestPublisherBadInput: nil context, the default exchange with a delay, headers AMQP cannot
// encode and a per-message TTL on a delayed message are refused before anything is sent;
// the caller's headers are never modified.
func TestPublisherBadInput(t *testing.T) {
	t.Parallel()
	f := newDirectFixture(t)
	_, target, _, q, got, p, ctx := f.env, f.target, f.spec, f.q, f.got, f.p, f.ctx

	//nolint:staticcheck // a nil context on purpose
	if _, err := p.Publish(nil, target, "k", textMsg("x"), time.Second); !errors.Is(err, amqpdelay.ErrInvalidInput) {
		t.Errorf("nil context: err = %v, want ErrInvalidInput", err)
	}
	if _, err := p.Publish(ctx, "", q, textMsg("x"), time.Second); !errors.Is(err, amqpdelay.ErrUnknownTarget) || !strings.Contains(err.Error(), "default exchange") {
		t.Errorf("default exchange with a delay: err = %v, want ErrUnknownTarget about the default exchange", err)
	}
	bad := textMsg("x")
	bad.Headers = amqp.Table{"nested": map[string]any{"a": 1}, "u": uint(3)}
	for _, d := range []time.Duration{0, time.Second} {
		if _, err := p.Publish(ctx, target, "k", bad, d); !errors.Is(err, amqpdelay.ErrInvalidInput) {
			t.Errorf("unencodable headers, delay %v: err = %v, want ErrInvalidInput", d, err)
		}
	}
	exp := textMsg("x")
	exp.Expiration = "100"
	if _, err := p.Publish(ctx, target, "k", exp, time.Second); !errors.Is(err, amqpdelay.ErrInvalidInput) {
		t.Errorf("expiration on a delayed message: err = %v, want ErrInvalidInput", err)
	}
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := p.Publish(cancelled, target, "k", textMsg("x"), time.Second); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled context: err = %v, want context.Canceled", err)
	}
	noDelivery(t, got, 1500*time.Millisecond)

	// The default exchange without a delay is a plain publish to the queue named by the key.
	h := amqp.Table{"x-death": []any{amqp.Table{"queue": "q"}}, route.DigitHeader(0): int64(3), "keep": "me"}
	msg := textMsg("direct")
	msg.Headers = h
	if _, err := p.Publish(ctx, "", q, msg, 0); err != nil {
		t.Fatalf("default exchange, no delay: %v", err)
	}
	a := nextDelivery(t, got, 2*time.Second)
	checkOnTime(t, a)
	if len(h) != 3 || h["keep"] != "me" || h[route.DigitHeader(0)] != int64(3) {
		t.Errorf("caller's headers modified: %v", h)
	}
	if a.d.Headers["keep"] != "me" {
		t.Errorf("delivered headers %v lack the caller's", a.d.Headers)
	}
}

// TestPublisherConcurrent: many goroutines publish at once through every path, with
// unroutable direct publishes mixed in: each publish gets its own outcome (returns are
// matched to their own publish), every confirmed message arrives exactly once, none early.
func TestPublisherConcurrent(t *testing.T) {
	t.Parallel()
	env := brokertest.NewEnv(t)
	target := env.Name("orders")
	spec := testSpec(env, delayspec.Target{Name: target, Type: "direct"})
	spec.Buckets = delayspec.Delays{time.Second}
	declareTopology(t, env, spec)
	q := env.Name("ready")
	declareReadyQueue(t, env, q, target, "k")
	got := consumeQueue(t, env, q)
	p := newPublisher(t, env, spec, amqpdelay.Config{Channels: 2})
	ctx := pubCtx(t)
	const workers, each = 8, 40
	delays := []time.Duration{0, time.Second, 1200 * time.Millisecond, 1500*time.Millisecond + 1}
	var mu sync.Mutex
	sent := map[string]bool{}
	var wg sync.WaitGroup
	errs := make(chan error, workers*each)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				key := "k"
				if i%5 == 4 {
					key = "unbound"
				}
				msg := textMsg(fmt.Sprintf("%d-%d", w, i))
				if i%7 == 0 {
					msg.MessageId = "same-id" // several in flight with one ID
				}
				r, err := p.Publish(ctx, target, key, msg, delays[i%len(delays)])
				switch {
				case key == "unbound" && delays[i%len(delays)] <= 0:
					if !errors.Is(err, amqpdelay.ErrUnroutable) {
						errs <- fmt.Errorf("%s unbound direct: err = %v, want ErrUnroutable", msg.Body, err)
					}
				case key == "unbound":
					if err != nil { // delayed: the key is only routed when due
						errs <- fmt.Errorf("%s unbound delayed: %v", msg.Body, err)
					}
				case err != nil:
					errs <- fmt.Errorf("%s: %v", msg.Body, err)
				default:
					mu.Lock()
					sent[string(msg.Body)] = true
					mu.Unlock()
					_ = r
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	for len(sent) > 0 {
		a := nextDelivery(t, got, 5*time.Second)
		checkOnTime(t, a)
		if !sent[string(a.d.Body)] {
			t.Fatalf("unexpected or duplicate delivery %q", a.d.Body)
		}
		delete(sent, string(a.d.Body))
	}
	noDelivery(t, got, 300*time.Millisecond)
}

// TestPublisherTopologyMissing: NewPublisher in a vhost without the topology says to run
// `rabbitdelay apply`.
func TestPublisherTopologyMissing(t *testing.T) {
	t.Parallel()
	env := brokertest.NewEnv(t)
	cfg := amqpdelay.Config{Prefix: testSpec(env, delayspec.Target{Name: env.Name("orders")}).Prefix}
	cfg.URL = env.URL
	p, err := amqpdelay.NewPublisher(pubCtx(t), cfg)
	if err == nil {
		p.Close()
		t.Fatal("NewPublisher succeeded without a topology")
	}
	if !errors.Is(err, amqpdelay.ErrTopologyMissing) || !strings.Contains(err.Error(), "rabbitdelay apply") {
		t.Errorf("err = %v, want ErrTopologyMissing saying to run `rabbitdelay apply`", err)
	}
}

// TestPublisherClose: Close is idempotent, later publishes fail with ErrClosed, and the
// Publisher's goroutines (reconnecting, one dispatcher per channel, amqp091's own) end.
// Not parallel: goleak looks at every goroutine of the process.
func TestPublisherClose(t *testing.T) {
	env := brokertest.NewEnv(t)
	target := env.Name("orders")
	spec := testSpec(env, delayspec.Target{Name: target, Type: "direct"})
	declareTopology(t, env, spec)
	declareReadyQueue(t, env, env.Name("ready"), target, "k")
	ctx := pubCtx(t)
	// Every goroutine the Publisher starts (its supervisor, one dispatcher per channel,
	// amqp091's own) must end with Close; goleak retries for a while before it reports.
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	cfg := amqpdelay.Config{Prefix: spec.Prefix, Channels: 3}
	cfg.URL = env.URL
	p, err := amqpdelay.NewPublisher(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range []time.Duration{0, time.Second} {
		if _, err := p.Publish(ctx, target, "k", textMsg("x"), d); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := p.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, err := p.Publish(ctx, target, "k", textMsg("x"), 0); !errors.Is(err, amqpdelay.ErrClosed) {
		t.Errorf("publish after Close: err = %v, want ErrClosed", err)
	}
}

// TestPublisherFollowsTheRecord: a Publisher uses the ladder (unit, radix, order), buckets and
// targets that `rabbitdelay apply` recorded for its prefix, never others, so its messages never
// arrive early or never: for each setting applied otherwise, a Publisher given only the prefix
// plans its messages with the applied ladder, takes the applied bucket, and refuses a target
// the apply did not bind (ErrUnknownTarget, nothing sent).
func TestPublisherFollowsTheRecord(t *testing.T) {
	t.Parallel()
	env := brokertest.NewEnv(t)
	target := env.Name("orders")
	spec := testSpec(env, delayspec.Target{Name: target, Type: "topic"})
	spec.Buckets = delayspec.Delays{5 * time.Second}
	for _, tc := range []struct {
		name   string
		change func(*delayspec.Spec)
	}{
		{"as-is", func(s *delayspec.Spec) {}},
		{"unit", func(s *delayspec.Spec) { s.Ladder.Unit = 10 * time.Millisecond }},
		{"radix", func(s *delayspec.Spec) { s.Ladder.Radix = 32 }},
		{"order", func(s *delayspec.Spec) { s.Ladder.Order = ttlbuckets.LongestFirst }},
		{"bucket", func(s *delayspec.Spec) { s.Buckets = delayspec.Delays{2 * time.Second} }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			other := spec
			other.Prefix = spec.Prefix + "-" + tc.name
			tc.change(&other)
			declareTopology(t, env, other)
			p := newPublisher(t, env, delayspec.Spec{Prefix: other.Prefix})
			ladder, buckets, err := other.WithDefaults().LadderOrBuckets()
			if err != nil {
				t.Fatal(err)
			}
			ctx := pubCtx(t)
			for _, d := range []time.Duration{1234 * time.Millisecond, 2 * time.Second, 5 * time.Second} {
				r, err := p.Publish(ctx, target, "k", textMsg("x"), d)
				if err != nil {
					t.Fatalf("publish %v: %v", d, err)
				}
				if _, ok := buckets.Lookup(d); ok {
					if r.Path != amqpdelay.PathBucket {
						t.Errorf("delay %v, an applied bucket: path %v, want bucket", d, r.Path)
					}
					continue
				}
				plan, err := ladder.Plan(d, ttlbuckets.RoundUp)
				if err != nil {
					t.Fatal(err)
				}
				if r.Path != amqpdelay.PathLadder || r.Hops != len(plan.Hops) || r.Delay != plan.Effective {
					t.Errorf("delay %v: path %v, %d hops, delay %v; want the applied ladder's %d hops, %v", d, r.Path, r.Hops, r.Delay, len(plan.Hops), plan.Effective)
				}
			}
			if _, err := p.Publish(ctx, env.Name("undeclared"), "k", textMsg("x"), time.Second); !errors.Is(err, amqpdelay.ErrUnknownTarget) {
				t.Errorf("publish to a target the apply did not bind: %v, want ErrUnknownTarget", err)
			}
		})
	}
}
