//go:build integration

package integration

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/delaykit/rabbitdelay/amqpdelay"
	"github.com/delaykit/rabbitdelay/integration/brokertest"
	"github.com/delaykit/rabbitdelay/topology"
	"github.com/delaykit/rabbitdelay/ttlbuckets"
)

// routeLadder is a ladder whose every level a test can wait for: radix 4, 1 ms, maximum
// 4,095 ms, so 6 levels (4^6 = 4,096), 18 queues.
func routeLadder(order ttlbuckets.Order) ttlbuckets.Ladder {
	return ttlbuckets.Ladder{Unit: time.Millisecond, Radix: 4, Max: 4095 * time.Millisecond, Order: order}
}

// ladderRouteSetup declares, in a vhost of its own, a topology with ladder l and one topic
// target, and a ready queue bound to the target with "#"; it returns the environment, the
// specification, the target's name and the ready queue's deliveries.
func ladderRouteSetup(t *testing.T, l ttlbuckets.Ladder) (*brokertest.Env, topology.Spec, string, <-chan arrival) {
	t.Helper()
	env := brokertest.NewEnv(t)
	target := env.Name("t")
	spec := testSpec(env, topology.Target{Name: target, Type: "topic"})
	spec.Ladder = l
	declareTopology(t, env, spec)
	ready := env.Name("ready")
	declareReadyQueue(t, env, ready, target, "#")
	return env, spec, target, consumeQueue(t, env, ready)
}

// lastLevelDelays returns, for each level L of a radix-4 ladder of 6 levels, the delays whose
// last hop (in order) is at level L that the test sends: one with a single non-zero digit, and,
// unless L is where the order starts, one with an earlier hop too (a digit at the level where
// the order starts).
func lastLevelDelays(order ttlbuckets.Order) map[time.Duration]int {
	const levels = 6
	pow := func(l int) time.Duration { return time.Duration(1<<(2*l)) * time.Millisecond }
	first := 0 // shortest-first starts at the lowest level
	if order == ttlbuckets.LongestFirst {
		first = levels - 1
	}
	out := map[time.Duration]int{}
	for l := range levels {
		out[3*pow(l)] = l
		if l != first {
			out[pow(l)+2*pow(first)] = l
		}
	}
	return out
}

// TestLadderLastLevel: in both hop orders, a message whose last hop is at level L (every L of
// the ladder, with and without an earlier hop) takes that hop in the last-hop queue of L and
// its digit (x-death names it), which dead-letters into the dispatch exchange: it arrives
// exactly once, never early, carrying the last-level header and no digit header of a level
// after L. A message sent with every level's digit header (a Publisher of a topology without
// last-hop queues, or one published before them) still takes the ladder's own queues and passes
// through the remaining levels, and arrives exactly once. Without the last-hop marker the
// Publisher sends every level's digit and no last-level header, through the entry level's
// exchange; without the entry marker it sends the last-level header through that exchange.
// x-death shows each message of the Publisher entering its first queue from the queue's entry
// exchange, or, without either marker, from the entry level's exchange.
func TestLadderLastLevel(t *testing.T) {
	t.Parallel()
	for _, order := range []ttlbuckets.Order{ttlbuckets.ShortestFirst, ttlbuckets.LongestFirst} {
		t.Run(order.String(), func(t *testing.T) {
			t.Parallel()
			env, spec, target, got := ladderRouteSetup(t, routeLadder(order))
			l := spec.Ladder.WithDefaults()
			ctx := pubCtx(t)

			delays := lastLevelDelays(order)
			sent := map[string]int{} // message ID -> last level; -1: every digit (legacy)
			p := newPublisher(t, env, spec)
			for d, last := range delays {
				r, err := p.Publish(ctx, target, "k", textMsg(d.String()), d)
				if err != nil {
					t.Fatalf("publish %v: %v", d, err)
				}
				sent[r.MessageID] = last
			}
			// Messages with every level's digit header, published by hand to the entry exchange.
			ch := env.Channel(t)
			if err := ch.Confirm(false); err != nil {
				t.Fatalf("confirm: %v", err)
			}
			n := topology.Names{Prefix: spec.Prefix}
			for d := range delays {
				plan, err := l.Plan(d, ttlbuckets.Strict)
				if err != nil {
					t.Fatal(err)
				}
				m := textMsg("legacy " + d.String())
				m.MessageId = fmt.Sprintf("legacy-%d", d.Milliseconds())
				m.Headers = amqp.Table{ttlbuckets.TargetHeader: target, ttlbuckets.DueHeader: time.Now().Add(d).UnixMilli()}
				l.EncodeDigits(plan, m.Headers)
				dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, n.LadderExchange(plan.Entry), "k", false, false, m)
				if err != nil {
					t.Fatalf("publish legacy %v: %v", d, err)
				}
				if ok, err := dc.WaitContext(ctx); err != nil || !ok {
					t.Fatalf("legacy %v: confirm %v, %v", d, ok, err)
				}
				sent[m.MessageId] = -1
			}
			checkArrivals(t, l, n, got, sent, 4*time.Second, true)

			// Without the last-hop marker (the entry marker still there) a new Publisher falls
			// back to every level's digit, through the entry level's exchange.
			if err := ch.ExchangeDelete(n.LastHopMarker(l, 1), false, false); err != nil {
				t.Fatalf("delete the last-level marker: %v", err)
			}
			old := newPublisher(t, env, spec)
			sent = map[string]int{}
			for d := range delays {
				r, err := old.Publish(ctx, target, "k", textMsg("old "+d.String()), d)
				if err != nil {
					t.Fatalf("publish %v without the marker: %v", d, err)
				}
				if plan, _ := l.Plan(d, ttlbuckets.Strict); r.Exchange != n.LadderExchange(plan.Entry) {
					t.Errorf("publish %v without the last-hop marker went to %s, want %s", d, r.Exchange, n.LadderExchange(plan.Entry))
				}
				sent[r.MessageID] = -1
			}
			checkArrivals(t, l, n, got, sent, 4*time.Second, false)

			// With the last-hop marker and without the entry exchanges' marker a new Publisher
			// sends the last-level header, and the first hop through the entry level's exchange.
			if err := ch.ExchangeDeclare(n.LastHopMarker(l, 1), amqp.ExchangeFanout, true, false, false, false, nil); err != nil {
				t.Fatalf("declare the last-level marker again: %v", err)
			}
			if err := ch.ExchangeDelete(n.EntryMarker(l, 1), false, false); err != nil {
				t.Fatalf("delete the entry marker: %v", err)
			}
			noEntry := newPublisher(t, env, spec)
			sent = map[string]int{}
			for d, last := range delays {
				r, err := noEntry.Publish(ctx, target, "k", textMsg("level exchange "+d.String()), d)
				if err != nil {
					t.Fatalf("publish %v without the entry marker: %v", d, err)
				}
				sent[r.MessageID] = last
			}
			checkArrivals(t, l, n, got, sent, 4*time.Second, false)
		})
	}
}

// TestLadderRadix64Digits: on a radix-64 ladder (1 ms, two levels: 1-63 ms and 64-4,032 ms;
// the largest radix AMQPDELAY_LADDER_RADIX takes), in both hop orders, every digit value of
// every level routes: a message with one non-zero digit v at level 0 or 1, and one with both
// (v at level 1, another digit at level 0), for v = 1..63, arrives exactly once, never early,
// through the queue or last-hop queue of its last level and digit (last-hop header values up to
// 127: digit + radix).
func TestLadderRadix64Digits(t *testing.T) {
	t.Parallel()
	for _, order := range []ttlbuckets.Order{ttlbuckets.ShortestFirst, ttlbuckets.LongestFirst} {
		t.Run(order.String(), func(t *testing.T) {
			t.Parallel()
			env, spec, target, got := ladderRouteSetup(t, ttlbuckets.Ladder{Unit: time.Millisecond, Radix: 64, Max: 4095 * time.Millisecond, Order: order})
			l := spec.Ladder.WithDefaults()
			if l.Levels() != 2 {
				t.Fatalf("levels = %d, want 2", l.Levels())
			}
			ctx := pubCtx(t)
			p := newPublisher(t, env, spec)
			sent := map[string]int{} // message ID -> last level
			for v := 1; v < 64; v++ {
				for _, d := range []time.Duration{
					time.Duration(v) * time.Millisecond,             // level 0 only
					time.Duration(v*64) * time.Millisecond,          // level 1 only
					time.Duration(v*64+(v%63)+1) * time.Millisecond, // both
				} {
					plan, err := l.Plan(d, ttlbuckets.Strict)
					if err != nil {
						t.Fatal(err)
					}
					r, err := p.Publish(ctx, target, "k", textMsg(d.String()), d)
					if err != nil {
						t.Fatalf("publish %v: %v", d, err)
					}
					sent[r.MessageID] = plan.LastLevel()
				}
			}
			checkArrivals(t, l, topology.Names{Prefix: spec.Prefix}, got, sent, 30*time.Second, true)
		})
	}
}

// checkArrivals waits for every message of sent (message ID -> the last level its headers
// name, or -1 for a message that must carry every level's digit and no last-level header),
// checks each arrived once, on time, with the headers its route needs, and that nothing else
// arrives. For a message with the last-level header, x-death must show that its first queue
// was entered from that queue's entry exchange (viaEntry) or else from its entry level's
// exchange.
func checkArrivals(t *testing.T, l ttlbuckets.Ladder, n topology.Names, got <-chan arrival, sent map[string]int, within time.Duration, viaEntry bool) {
	t.Helper()
	seen := map[string]bool{}
	for range sent {
		r := nextDelivery(t, got, within)
		checkOnTime(t, r)
		id := r.d.MessageId
		last, ok := sent[id]
		switch {
		case !ok:
			t.Errorf("unexpected delivery %q", id)
			continue
		case seen[id]:
			t.Errorf("%q arrived twice", id)
			continue
		}
		seen[id] = true
		h := r.d.Headers
		var queues []string         // the queues the message was dead-lettered from (x-death)
		from := map[string]string{} // queue -> the exchange the message entered it from
		deaths, _ := h["x-death"].([]any)
		for _, d := range deaths {
			if e, ok := d.(amqp.Table); ok {
				q, _ := e["queue"].(string)
				queues = append(queues, q)
				from[q], _ = e["exchange"].(string)
			}
		}
		if last < 0 {
			for _, q := range queues {
				if strings.HasSuffix(q, ".last") {
					t.Errorf("%q: dead-lettered from a last-hop queue %s without the last-level header", id, q)
				}
			}
			if _, has := h[ttlbuckets.LastLevelHeader]; has {
				t.Errorf("%q: has %s, want every level's digit instead", id, ttlbuckets.LastLevelHeader)
			}
			for level := range l.Levels() {
				if _, has := h[ttlbuckets.DigitHeader(level)]; !has {
					t.Errorf("%q: no %s", id, ttlbuckets.DigitHeader(level))
				}
			}
			continue
		}
		if h[ttlbuckets.LastLevelHeader] != int64(last) {
			t.Errorf("%q: %s = %v, want %d", id, ttlbuckets.LastLevelHeader, h[ttlbuckets.LastLevelHeader], last)
		}
		digits, err := l.DecodeDigits(h)
		if err != nil {
			t.Errorf("%q: DecodeDigits: %v", id, err)
			continue
		}
		// Digit headers from the entry (the first non-zero digit in travel order) to the last
		// hop's level, and none outside: the message never reaches those levels.
		entry := -1
		for level, d := range digits {
			if d != 0 && (entry < 0 || l.Order == ttlbuckets.LongestFirst) {
				entry = level // the lowest non-zero level, or for longest-first the highest
			}
		}
		if entry < 0 {
			t.Errorf("%q: every digit 0 (%v) with the last-level header", id, digits)
			continue
		}
		for level := range l.Levels() {
			outside := level > last || level < entry
			if l.Order == ttlbuckets.LongestFirst {
				outside = level < last || level > entry
			}
			if _, has := h[ttlbuckets.DigitHeader(level)]; has == outside {
				t.Errorf("%q (entry level %d, last level %d): digit header of level %d present = %v", id, entry, last, level, has)
			}
		}
		// The last hop went through the last-hop queue of its level and digit, unless its level
		// is where the order ends (its queues dead-letter into the dispatch exchange already).
		want := n.LadderLastHopQueueCopy(last, digits[last], 0)
		if _, more := l.Next(last); !more {
			want = n.LadderQueue(last, digits[last])
		}
		if !slices.Contains(queues, want) {
			t.Errorf("%q (last level %d): dead-lettered from %v, want %s among them", id, last, queues, want)
		}
		// The first queue: the last-hop queue when the first hop is also the last (at a level
		// that has last-hop queues), else the entry level's queue of its digit.
		first := n.LadderQueueCopy(entry, digits[entry], 0)
		if entry == last {
			first = want
		}
		wantFrom := n.LadderExchange(entry)
		if viaEntry {
			wantFrom = n.LadderEntryExchange(first)
		}
		if from[first] != wantFrom {
			t.Errorf("%q (entry level %d): entered its first queue %s from %q, want %q (x-death %v)", id, entry, first, from[first], wantFrom, deaths)
		}
	}
	noDelivery(t, got, time.Second)
}

// TestApplyRemovesObsoleteLastHopBindings: a topology applied by an earlier version has each
// level's exchange bound straight to its last-hop queues (Plan.Obsolete). While those
// bindings and the last-hop exchanges' both exist, a message whose last hop is at any level
// arrives exactly once; Status reports the old bindings as obsolete; Apply removes exactly
// them (reported deleted) and Status is clean again, as it is after an Apply without the
// management API; messages still arrive once.
func TestApplyRemovesObsoleteLastHopBindings(t *testing.T) {
	t.Parallel()
	env := brokertest.NewEnv(t)
	m := topoNeedManagement(t, env)
	target := env.Name("t")
	spec := testSpec(env, topology.Target{Name: target, Type: "topic"})
	spec.Ladder = routeLadder(ttlbuckets.ShortestFirst)
	declareTopology(t, env, spec)
	p, err := topology.NewPlan(spec)
	if err != nil {
		t.Fatal(err)
	}
	if want := 15; len(p.Obsolete) != want { // radix 4, levels 0-4 of 6 have a next level
		t.Fatalf("%d obsolete bindings in the plan, want %d", len(p.Obsolete), want)
	}
	ready := env.Name("ready")
	declareReadyQueue(t, env, ready, target, "#")
	got := consumeQueue(t, env, ready)
	l := spec.Ladder.WithDefaults()
	n := topology.Names{Prefix: spec.Prefix}
	pub := newPublisher(t, env, spec)
	ctx := pubCtx(t)
	sendAll := func(round string) {
		t.Helper()
		sent := map[string]int{}
		for d, last := range lastLevelDelays(l.Order) {
			r, err := pub.Publish(ctx, target, "k", textMsg(round+" "+d.String()), d)
			if err != nil {
				t.Fatalf("%s: publish %v: %v", round, d, err)
			}
			sent[r.MessageID] = last
		}
		checkArrivals(t, l, n, got, sent, 4*time.Second, true)
	}

	// The earlier version's bindings, beside the last-hop exchanges.
	ch := env.Channel(t)
	for _, b := range p.Obsolete {
		if err := ch.QueueBind(b.Destination, b.RoutingKey, b.Source, false, b.Args); err != nil {
			t.Fatalf("bind %s: %v", b, err)
		}
	}
	sendAll("both routes")
	conn := env.Dial(t)
	sctx := topoTestCtx(t, time.Minute)
	rep, err := topology.Status(sctx, conn, p, topology.StatusOptions{Management: m})
	if !errors.Is(err, topology.ErrUnhealthy) || len(rep.ObsoleteBindings) != len(p.Obsolete) || len(rep.UnplannedBindings) != 0 ||
		!strings.Contains(err.Error(), "obsolete binding") {
		t.Fatalf("status with the obsolete bindings: %v, %d obsolete and %d other unplanned bindings; want ErrUnhealthy naming %d obsolete bindings",
			err, len(rep.ObsoleteBindings), len(rep.UnplannedBindings), len(p.Obsolete))
	}

	arep, err := topology.Apply(sctx, conn, p, topology.ApplyOptions{Management: m})
	if err != nil {
		t.Fatalf("apply: %v", err)
	}
	if got := arep.Count(topology.StateDeleted); got != len(p.Obsolete) {
		t.Errorf("apply removed %d bindings, want the %d obsolete ones", got, len(p.Obsolete))
	}
	for _, r := range arep.Results {
		if r.State == topology.StateCreated && r.Kind != topology.KindPolicy { // declareTopology set no policy
			t.Errorf("apply created %s %s, want nothing but the policies", r.Kind, r.Name)
		}
	}
	if rep, err := topology.Status(sctx, conn, p, topology.StatusOptions{Management: m}); err != nil || len(rep.UnplannedBindings)+len(rep.ObsoleteBindings) != 0 {
		t.Fatalf("status after apply: %v, unplanned bindings %v, obsolete %v", err, rep.UnplannedBindings, rep.ObsoleteBindings)
	}
	// Without the management API Apply cannot list them and unbinds them all: those there go.
	for _, b := range p.Obsolete {
		if err := ch.QueueBind(b.Destination, b.RoutingKey, b.Source, false, b.Args); err != nil {
			t.Fatalf("bind %s again: %v", b, err)
		}
	}
	if _, err := topology.Apply(sctx, conn, p, topology.ApplyOptions{}); err != nil {
		t.Fatalf("apply without the management API: %v", err)
	}
	if rep, err := topology.Status(sctx, conn, p, topology.StatusOptions{Management: m}); err != nil || len(rep.UnplannedBindings)+len(rep.ObsoleteBindings) != 0 {
		t.Fatalf("status after apply without the management API: %v, unplanned bindings %v, obsolete %v", err, rep.UnplannedBindings, rep.ObsoleteBindings)
	}
	sendAll("new route")
}

// TestLadderEntryExchangeBroken: an entry exchange broken while the Publisher's connection
// stays up costs no publish, whichever way it is broken: deleted (404), re-declared internal
// (403), re-declared with another type and bound to its queue again, or left without its binding
// (the message returned unroutable). Each of 50 publishes in flight into it at once is sent again
// through the entry level's exchange and returns nil once confirmed, later publishes go there
// too (until the next connection checks the marker again), and every message arrives exactly
// once, never early.
func TestLadderEntryExchangeBroken(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		breakIt func(ch *amqp.Channel, entry, queue string) error
	}{
		{"deleted", func(ch *amqp.Channel, entry, _ string) error { return ch.ExchangeDelete(entry, false, false) }},
		{"internal", func(ch *amqp.Channel, entry, queue string) error {
			return redeclareEntry(ch, entry, queue, "fanout", true)
		}},
		{"direct", func(ch *amqp.Channel, entry, queue string) error {
			return redeclareEntry(ch, entry, queue, "direct", false)
		}},
		{"topic", func(ch *amqp.Channel, entry, queue string) error {
			return redeclareEntry(ch, entry, queue, "topic", false)
		}},
		{"unbound", func(ch *amqp.Channel, entry, queue string) error { return ch.QueueUnbind(queue, "", entry, nil) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			env, spec, target, got := ladderRouteSetup(t, routeLadder(ttlbuckets.ShortestFirst))
			l := spec.Ladder.WithDefaults()
			n := topology.Names{Prefix: spec.Prefix}
			ctx := pubCtx(t)
			p := newPublisher(t, env, spec)
			const single, two = 3 * time.Millisecond, 7 * time.Millisecond // radix 4: 0.03 (one hop, level 0) and 0.13 (two hops)
			publish := func(d time.Duration, wantExchange string) string {
				t.Helper()
				r, err := p.Publish(ctx, target, "k", textMsg(d.String()), d)
				if err != nil {
					t.Fatalf("publish %v: %v", d, err)
				}
				if r.Exchange != wantExchange {
					t.Errorf("publish %v went to %s, want %s", d, r.Exchange, wantExchange)
				}
				return r.MessageID
			}
			queue := n.LadderLastHopQueueCopy(0, 3, 0)
			broken := n.LadderEntryExchange(queue)
			id := publish(single, broken)
			checkArrivals(t, l, n, got, map[string]int{id: 0}, 4*time.Second, true)

			if err := tc.breakIt(env.Channel(t), broken, queue); err != nil {
				t.Fatalf("break %s: %v", broken, err)
			}
			// Many publishes in flight at once into the broken exchange: a 404 or 403 closes a
			// shared channel under the others too, and every one of them must still be sent again.
			sent := map[string]int{}
			var pending []*amqpdelay.Deferred
			for i := range 50 {
				d, err := p.PublishDeferred(ctx, target, "k", textMsg(fmt.Sprintf("in flight %d", i)), single)
				if err != nil {
					t.Fatalf("publish deferred %d: %v", i, err)
				}
				pending = append(pending, d)
			}
			for i, d := range pending {
				r, err := d.Wait(ctx)
				if err != nil {
					t.Fatalf("deferred publish %d into the broken entry exchange: %v", i, err)
				}
				if r.Exchange != n.LadderExchange(0) {
					t.Errorf("deferred publish %d went to %s, want %s", i, r.Exchange, n.LadderExchange(0))
				}
				sent[r.MessageID] = 0
			}
			sent[publish(two, n.LadderExchange(0))] = 1 // its own entry exchange is intact; not used until a reconnection
			checkArrivals(t, l, n, got, sent, 10*time.Second, false)
		})
	}
}

// redeclareEntry deletes the entry exchange and declares it again with type typ (internal
// when internal), bound to queue with the empty binding key, as a careless hand might.
func redeclareEntry(ch *amqp.Channel, entry, queue, typ string, internal bool) error {
	if err := ch.ExchangeDelete(entry, false, false); err != nil {
		return err
	}
	if err := ch.ExchangeDeclare(entry, typ, true, false, internal, false, nil); err != nil {
		return err
	}
	return ch.QueueBind(queue, "", entry, false, nil)
}
