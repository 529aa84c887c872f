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
	"github.com/delaykit/rabbitdelay/internal/delayspec"
	"github.com/delaykit/rabbitdelay/internal/laddertest"
	"github.com/delaykit/rabbitdelay/internal/route"
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
func ladderRouteSetup(t *testing.T, l ttlbuckets.Ladder) (*brokertest.Env, delayspec.Spec, string, <-chan arrival) {
	t.Helper()
	env := brokertest.NewEnv(t)
	target := env.Name("t")
	spec := testSpec(env, delayspec.Target{Name: target, Type: "topic"})
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
	if order == ttlbuckets.TopFirst {
		// The highest digit's hop first (a first-hop queue, into level 0), then up from level 0:
		// the last hop is the second-highest digit's.
		for l := range levels {
			out[3*pow(l)] = l // one hop: the last-hop queue
			if l < levels-1 {
				out[pow(levels-1)+2*pow(l)] = l // the top level's first-hop queue, last at l
			}
			if l > 0 {
				out[2*pow(l)+pow(0)] = 0 // level l's first-hop queue, last at level 0
			}
		}
		return out
	}
	for l := range levels {
		out[3*pow(l)] = l
		if l != first && order != ttlbuckets.TopSplit {
			out[pow(l)+2*pow(first)] = l
		}
		if order == ttlbuckets.TopSplit && l < levels-1 {
			// A highest digit of 1 takes the top-first route: the top level's first-hop queue,
			// then up from level 0, last at l.
			out[pow(levels-1)+2*pow(l)] = l
		}
		if order == ttlbuckets.TopSplit && l > 0 {
			// The top digit less one first (a first-hop queue, into level 0), then up from level 0,
			// one unit of the top level last.
			out[2*pow(l)+pow(0)] = l
			out[3*pow(l)+2*pow(l-1)] = l
			out[3*pow(l)+pow(0)] = l // 1 unit of the top level first, 2 last
		}
	}
	return out
}

// topSplit returns the digit of plan's first hop when, in the top-split order, that hop goes
// through a first-hop queue (one hop more than its non-zero digits), and ok false otherwise.
func topSplit(l ttlbuckets.Ladder, plan ttlbuckets.Plan) (first int, ok bool) {
	nonZero := 0
	for _, v := range plan.Digits {
		if v != 0 {
			nonZero++
		}
	}
	if l.Order != ttlbuckets.TopSplit || len(plan.Hops) <= nonZero {
		return 0, false
	}
	return plan.Hops[0].Digit, true
}

// TestLadderLastLevel: in every hop order, a message whose last hop is at level L (every L of
// the ladder, with and without an earlier hop) takes that hop in the last-hop queue of L and
// its digit (x-death names it), which dead-letters into the dispatch exchange: it arrives
// exactly once, never early, carrying the last-level header and no digit header of a level
// after L. In the top-first order a message of several hops takes its first in the first-hop
// queue of its highest level and digit (every level above 0); in the top-split order one whose
// highest digit d is 2 or more takes its first in the first-hop queue of that level and d-u,
// and its last in the (last-hop) queue of that level and u (u from ttlbuckets' Plan, 1 or 2
// among the delays sent), and one whose highest digit is 1 takes the top-first route (last at
// every level below the top among the delays sent). A message sent with every level's
// digit header (by a plain AMQP publisher, to the exchange of its lowest non-zero level; the
// top-first and top-split orders' level queues are the shortest-first order's) still takes the ladder's own
// queues and passes through the remaining levels, and arrives exactly once. x-death shows each
// message of the Publisher entering its first queue from the queue's entry exchange.
func TestLadderLastLevel(t *testing.T) {
	t.Parallel()
	for _, order := range laddertest.Orders {
		t.Run(order.String(), func(t *testing.T) {
			t.Parallel()
			env, spec, target, got := ladderRouteSetup(t, routeLadder(order))
			l := spec.Ladder.WithDefaults()
			ctx := pubCtx(t)

			delays := lastLevelDelays(order)
			sent := map[string]int{}   // message ID -> last level; -1: every digit (legacy)
			splits := map[string]int{} // message ID -> its first hop's digit, for a top-split message through a first-hop queue
			p := newPublisher(t, env, spec)
			for d, last := range delays {
				r, err := p.Publish(ctx, target, "k", textMsg(d.String()), d)
				if err != nil {
					t.Fatalf("publish %v: %v", d, err)
				}
				sent[r.MessageID] = last
				plan, err := l.Plan(d, ttlbuckets.Strict)
				if err != nil {
					t.Fatal(err)
				}
				if top, ok := topSplit(l, plan); ok {
					splits[r.MessageID] = top
				}
			}
			// Messages with every level's digit header, published by hand to the entry exchange.
			ch := env.Channel(t)
			if err := ch.Confirm(false); err != nil {
				t.Fatalf("confirm: %v", err)
			}
			n := delayspec.Names{Prefix: spec.Prefix}
			for d := range delays {
				plan, err := l.Plan(d, ttlbuckets.Strict)
				if err != nil {
					t.Fatal(err)
				}
				m := textMsg("legacy " + d.String())
				m.MessageId = fmt.Sprintf("legacy-%d", d.Milliseconds())
				m.Headers = amqp.Table{route.TargetHeader: target, route.DueHeader: time.Now().Add(d).UnixMilli()}
				route.EncodeDigits(l, plan, m.Headers)
				entry := plan.Entry
				if route.FirstHopQueue(l, plan) {
					entry = plan.Hops[1].Level // the lowest non-zero level
				}
				dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, n.LadderExchange(entry), "k", false, false, m)
				if err != nil {
					t.Fatalf("publish legacy %v: %v", d, err)
				}
				if ok, err := dc.WaitContext(ctx); err != nil || !ok {
					t.Fatalf("legacy %v: confirm %v, %v", d, ok, err)
				}
				sent[m.MessageId] = -1
			}
			checkArrivals(t, l, n, got, sent, splits, 4*time.Second)
		})
	}
}

// TestLadderRadix64Digits: on a radix-64 ladder (1 ms, two levels: 1-63 ms and 64-4,032 ms;
// the largest radix AMQPDELAY_LADDER_RADIX takes), in every hop order, every digit value of
// every level routes: a message with one non-zero digit v at level 0 or 1, and one with both
// (v at level 1, another digit at level 0), for v = 1..63, arrives exactly once, never early,
// through the queue or last-hop queue of its last level and digit (last-hop header values up to
// 127: digit + radix); in the top-split order, a message with both whose level-1 digit v is 2 or
// more first through the first-hop queue of level 1 and v-u, and last through the queue of
// level 1 and u (u = 1 + the level-0 digit mod (v-1)); for v of 3 or more one more message
// takes level-0 digit v-2, so that u = v-1 (a first hop of one unit): every u from 1 to 62.
func TestLadderRadix64Digits(t *testing.T) {
	t.Parallel()
	for _, order := range laddertest.Orders {
		t.Run(order.String(), func(t *testing.T) {
			t.Parallel()
			env, spec, target, got := ladderRouteSetup(t, ttlbuckets.Ladder{Unit: time.Millisecond, Radix: 64, Max: 4095 * time.Millisecond, Order: order})
			l := spec.Ladder.WithDefaults()
			if l.Levels() != 2 {
				t.Fatalf("levels = %d, want 2", l.Levels())
			}
			ctx := pubCtx(t)
			p := newPublisher(t, env, spec)
			sent := map[string]int{}   // message ID -> last level
			splits := map[string]int{} // message ID -> its first hop's digit, for a top-split message through a first-hop queue
			for v := 1; v < 64; v++ {
				delays := []time.Duration{
					time.Duration(v) * time.Millisecond,             // level 0 only
					time.Duration(v*64) * time.Millisecond,          // level 1 only
					time.Duration(v*64+(v%63)+1) * time.Millisecond, // both
				}
				if v >= 3 {
					delays = append(delays, time.Duration(v*64+v-2)*time.Millisecond) // both; top-split: u = v-1
				}
				for _, d := range delays {
					plan, err := l.Plan(d, ttlbuckets.Strict)
					if err != nil {
						t.Fatal(err)
					}
					r, err := p.Publish(ctx, target, "k", textMsg(d.String()), d)
					if err != nil {
						t.Fatalf("publish %v: %v", d, err)
					}
					sent[r.MessageID] = route.LastLevel(plan)
					if top, ok := topSplit(l, plan); ok {
						splits[r.MessageID] = top
					}
				}
			}
			checkArrivals(t, l, delayspec.Names{Prefix: spec.Prefix}, got, sent, splits, 30*time.Second)
		})
	}
}

// checkArrivals waits for every message of sent (message ID -> the last level its headers
// name, or -1 for a message that must carry every level's digit and no last-level header),
// checks each arrived once, on time, with the headers its route needs, and that nothing else
// arrives. For a message with the last-level header, x-death must show that its first queue
// was entered from that queue's entry exchange. splits holds the first hop's digit of each
// top-split message whose first hop goes through a first-hop queue (its headers carry the last
// hop's digit at that level).
func checkArrivals(t *testing.T, l ttlbuckets.Ladder, n delayspec.Names, got <-chan arrival, sent map[string]int, splits map[string]int, within time.Duration) {
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
			if _, has := h[route.LastLevelHeader]; has {
				t.Errorf("%q: has %s, want every level's digit instead", id, route.LastLevelHeader)
			}
			for level := range l.Levels() {
				if _, has := h[route.DigitHeader(level)]; !has {
					t.Errorf("%q: no %s", id, route.DigitHeader(level))
				}
			}
			continue
		}
		if h[route.LastLevelHeader] != int64(last) {
			t.Errorf("%q: %s = %v, want %d", id, route.LastLevelHeader, h[route.LastLevelHeader], last)
		}
		digits, err := route.DecodeDigits(l, h)
		if err != nil {
			t.Errorf("%q: DecodeDigits: %v", id, err)
			continue
		}
		// Digit headers from the entry (the first non-zero digit in travel order) to the last
		// hop's level, and none outside: the message never reaches those levels.
		splitFirst, split := splits[id]
		entry, hops := -1, 0
		for level, d := range digits {
			if d != 0 && (entry < 0 || l.Order != ttlbuckets.ShortestFirst) {
				entry = level // the lowest non-zero level, or for longest-first, top-first and top-split the highest
			}
			if d != 0 {
				hops++
			}
		}
		if entry < 0 {
			t.Errorf("%q: every digit 0 (%v) with the last-level header", id, digits)
			continue
		}
		// The top-first route: top-first of several hops, and top-split whose highest digit is 1.
		topFirst := (l.Order == ttlbuckets.TopFirst || l.Order == ttlbuckets.TopSplit && !split) && hops > 1
		for level := range l.Levels() {
			outside := level > last || level < entry
			switch {
			case l.Order == ttlbuckets.LongestFirst:
				outside = level < last || level > entry
			case topFirst:
				outside = level > last && level != entry // the top level, then 0 to the last
			case split:
				outside = level > last // the top level, then 0 to the top level again
			}
			if _, has := h[route.DigitHeader(level)]; has == outside {
				t.Errorf("%q (entry level %d, last level %d): digit header of level %d present = %v", id, entry, last, level, has)
			}
		}
		// The last hop went through the last-hop queue of its level and digit, unless its level
		// is where the order ends (its queues dead-letter into the dispatch exchange already).
		want := n.LadderLastHopQueueShard(last, digits[last], 0)
		if _, more := route.Next(l, last); !more {
			want = n.LadderQueue(last, digits[last])
		}
		if !slices.Contains(queues, want) {
			t.Errorf("%q (last level %d): dead-lettered from %v, want %s among them", id, last, queues, want)
		}
		// The first queue: the last-hop queue when the first hop is also the last (at a level
		// that has last-hop queues), else the entry level's queue of its digit.
		first := n.LadderQueueShard(entry, digits[entry], 0)
		switch {
		case split:
			first = n.LadderFirstHopQueueShard(entry, splitFirst, 0)
		case entry == last:
			first = want
		case topFirst:
			first = n.LadderFirstHopQueueShard(entry, digits[entry], 0)
		}
		wantFrom := n.LadderEntryExchange(first)
		if from[first] != wantFrom {
			t.Errorf("%q (entry level %d): entered its first queue %s from %q, want %q (x-death %v)", id, entry, first, from[first], wantFrom, deaths)
		}
	}
	noDelivery(t, got, time.Second)
}

// TestLadderEntryExchangeBroken: the Publisher needs the entry exchanges `rabbitdelay apply`
// declares. With one deleted (404) or unbound from its queue (the message returned
// unroutable), each of 20 publishes in flight into it at once returns an error naming the
// fault (ErrExchangeNotFound, ErrUnroutable), none returns nil, and nothing arrives.
func TestLadderEntryExchangeBroken(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		breakIt func(ch *amqp.Channel, entry, queue string) error
		want    error
	}{
		{"deleted", func(ch *amqp.Channel, entry, _ string) error { return ch.ExchangeDelete(entry, false, false) }, amqpdelay.ErrExchangeNotFound},
		{"unbound", func(ch *amqp.Channel, entry, queue string) error { return ch.QueueUnbind(queue, "", entry, nil) }, amqpdelay.ErrUnroutable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			env, spec, target, got := ladderRouteSetup(t, routeLadder(ttlbuckets.ShortestFirst))
			n := delayspec.Names{Prefix: spec.Prefix}
			ctx := pubCtx(t)
			p := newPublisher(t, env, spec)
			const single = 3 * time.Millisecond // radix 4: 0.03, one hop at level 0
			queue := n.LadderLastHopQueueShard(0, 3, 0)
			broken := n.LadderEntryExchange(queue)
			if err := tc.breakIt(env.Channel(t), broken, queue); err != nil {
				t.Fatalf("break %s: %v", broken, err)
			}
			var pending []*amqpdelay.Deferred
			for i := range 20 {
				d, err := p.PublishDeferred(ctx, target, "k", textMsg(fmt.Sprintf("in flight %d", i)), single)
				if err != nil {
					if !errors.Is(err, tc.want) {
						t.Fatalf("publish deferred %d: %v, want %v", i, err, tc.want)
					}
					continue
				}
				pending = append(pending, d)
			}
			for i, d := range pending {
				if r, err := d.Wait(ctx); !errors.Is(err, tc.want) {
					t.Errorf("deferred publish %d into the broken entry exchange: receipt %+v, err %v; want %v", i, r, err, tc.want)
				}
			}
			noDelivery(t, got, time.Second)
		})
	}
}
