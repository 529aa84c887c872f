package amqpdelay

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/delaykit/rabbitdelay/internal/admin"
	"github.com/delaykit/rabbitdelay/internal/delayspec"
	"github.com/delaykit/rabbitdelay/ttlbuckets"
)

// TestDeadLetterHops: the hops are the queues a message waits in, each with the exchange
// RabbitMQ records for it: the entry exchange for the first, then the dead-letter exchange
// the topology's plan gives the previous queue.
func TestDeadLetterHops(t *testing.T) {
	for _, order := range []ttlbuckets.Order{ttlbuckets.ShortestFirst, ttlbuckets.LongestFirst} {
		t.Run(order.String(), func(t *testing.T) {
			spec := delayspec.Spec{Prefix: "rd", Targets: []delayspec.Target{{Name: "orders", Type: "direct"}},
				Ladder:  ttlbuckets.Ladder{Unit: time.Millisecond, Radix: 16, Max: 65535 * time.Millisecond, Order: order},
				Buckets: delayspec.Delays{30 * time.Second}}
			plan, err := admin.NewPlan(spec)
			if err != nil {
				t.Fatal(err)
			}
			dlx := map[string]string{}
			for _, q := range plan.Queues {
				dlx[q.Name] = q.DeadLetterExchange
			}
			names, ladder := spec.Names(), spec.WithDefaults().Ladder.WithDefaults()
			lp, err := ladder.Plan(4095*time.Millisecond, ttlbuckets.RoundUp)
			if err != nil {
				t.Fatal(err)
			}
			c := choice{path: PathLadder, plan: lp}
			dest := names.LadderExchange(lp.Entry)
			hops, last := deadLetterHops(names, ladder, &c, dest, 0)
			levels := []int{0, 1, 2}
			if order == ttlbuckets.LongestFirst {
				levels = []int{2, 1, 0}
			}
			var want []deadLetterHop
			for i, l := range levels {
				x := dest
				if i > 0 {
					x = dlx[want[i-1].queue]
				}
				want = append(want, deadLetterHop{queue: fmt.Sprintf("rd.ladder.%02d.15", l), exchange: x, reason: "expired"})
			}
			// The last hop is the last-hop queue of its level and digit (none at level 0, where
			// longest-first ends in D), dead-lettering into D.
			if order == ttlbuckets.ShortestFirst {
				want[2].queue = "rd.ladder.02.15.last"
			}
			if !slices.Equal(hops, want) {
				t.Errorf("4,095 ms: hops %+v, want %+v", hops, want)
			}
			if wantLast := dlx[hops[len(hops)-1].queue]; last != wantLast || last != "rd.dispatch" {
				t.Errorf("4,095 ms: last exchange %q, want the last queue's dead-letter exchange %q, rd.dispatch", last, wantLast)
			}
			for _, h := range hops {
				if _, ok := dlx[h.queue]; !ok {
					t.Errorf("hop queue %s is not in the topology", h.queue)
				}
			}
			lp2, _ := ladder.Plan(0x120*time.Millisecond, ttlbuckets.RoundUp) // digits 2 at level 1, 1 at level 2
			c2 := choice{path: PathLadder, plan: lp2}
			lh, lhLast := deadLetterHops(names, ladder, &c2, names.LadderExchange(lp2.Entry), 0)
			wantQ := []string{"rd.ladder.01.02", "rd.ladder.02.01.last"}
			if order == ttlbuckets.LongestFirst {
				wantQ = []string{"rd.ladder.02.01", "rd.ladder.01.02.last"}
			}
			if len(lh) != 2 || lh[0].queue != wantQ[0] || lh[1].queue != wantQ[1] || lh[1].exchange != dlx[lh[0].queue] || lhLast != "rd.dispatch" {
				t.Errorf("0x120 ms with last-hop queues: hops %+v last %q, want queues %v, then rd.dispatch", lh, lhLast, wantQ)
			}
			for _, h := range lh {
				if _, ok := dlx[h.queue]; !ok {
					t.Errorf("hop queue %s is not in the topology", h.queue)
				}
			}

			b := choice{path: PathBucket, bucketTTL: 30000}
			if got, last := deadLetterHops(names, ladder, &b, names.BucketExchange(), 0); !slices.Equal(got, []deadLetterHop{{"rd.bucket.30000ms", "rd.buckets", "expired"}}) || last != "rd.dispatch" {
				t.Errorf("bucket: hops %+v, last exchange %q", got, last)
			}
			for _, p := range []Path{PathDirect, PathPlugin} {
				if got, last := deadLetterHops(names, ladder, &choice{path: p}, "orders", 0); got != nil || last != "orders" {
					t.Errorf("%v: hops %+v, last exchange %q; want none, \"orders\"", p, got, last)
				}
			}
		})
	}
}

// delivered builds the message a consumer receives for m after hops, the way RabbitMQ 4.0's
// mc_amqpl:protocol_state writes it: BCC gone, Expiration gone, an x-death entry per hop,
// x-first-death-* and x-last-death-*.
func delivered(m amqp.Publishing, routingKey string, hops []deadLetterHop) amqp.Publishing {
	h := amqp.Table{}
	for k, v := range m.Headers {
		if k != "BCC" {
			h[k] = v
		}
	}
	keys := []any{routingKey}
	if cc, ok := m.Headers["CC"].([]any); ok {
		for _, k := range cc {
			if s, ok := k.(string); ok {
				keys = append(keys, s)
			}
		}
	}
	var deaths []any
	for i, hop := range hops {
		e := amqp.Table{"count": int64(1), "reason": hop.reason, "queue": hop.queue, "time": time.Unix(1700000000, 0),
			"exchange": hop.exchange, "routing-keys": keys}
		if i == 0 && m.Expiration != "" {
			e["original-expiration"] = m.Expiration
		}
		deaths = append([]any{e}, deaths...)
	}
	h["x-death"] = deaths
	first, last := hops[0], hops[len(hops)-1]
	h["x-first-death-reason"], h["x-first-death-queue"], h["x-first-death-exchange"] = first.reason, first.queue, first.exchange
	h["x-last-death-reason"], h["x-last-death-queue"], h["x-last-death-exchange"] = last.reason, last.queue, last.exchange
	m.Headers = h
	m.Expiration = ""
	return m
}

func ladderHops(prefix string, levels ...int) []deadLetterHop {
	var hops []deadLetterHop
	for i, l := range levels {
		x := fmt.Sprintf("%s.ladder.%02d", prefix, l)
		if i > 0 {
			x = fmt.Sprintf("%s.ladder.%02d", prefix, levels[i-1]+1)
		}
		hops = append(hops, deadLetterHop{queue: fmt.Sprintf("%s.ladder.%02d.%02d", prefix, l, 15), exchange: x, reason: deadLetterReason})
	}
	return hops
}

// TestDeadLetteredHeaderSize: the computed size is that of the headers RabbitMQ delivers,
// counted field by field by contentHeaderSize.
func TestDeadLetteredHeaderSize(t *testing.T) {
	three := ladderHops("rabbitdelay", 0, 1, 2)
	one := []deadLetterHop{{queue: "p.bucket.30000ms", exchange: "p.buckets", reason: deadLetterReason}}
	parked := []deadLetterHop{{queue: "orders.timeouts", exchange: "orders", reason: parkReason}}
	threeParked := append(slices.Clip(three), deadLetterHop{queue: "orders.timeouts", exchange: "rabbitdelay.dispatch", reason: parkReason})
	cc := []any{"cc.one", strings.Repeat("c", 200), []byte("not a longstr"), int32(3)}
	tests := []struct {
		name string
		msg  amqp.Publishing
		key  string
		hops []deadLetterHop
	}{
		{"no headers", amqp.Publishing{DeliveryMode: 2}, "k", three},
		{"own headers", amqp.Publishing{MessageId: "m", Headers: amqp.Table{"rabbitdelay-due": int64(1), "a": "b"}}, "order.42", three},
		{"CC list", amqp.Publishing{Headers: amqp.Table{"CC": cc, "x": int32(1)}}, "k", three},
		{"BCC only", amqp.Publishing{Headers: amqp.Table{"BCC": []any{"hidden", "hidden2"}}}, "k", one},
		{"CC and BCC", amqp.Publishing{Headers: amqp.Table{"CC": cc, "BCC": []any{"b"}, "x": "y"}}, strings.Repeat("r", 255), one},
		{"per-message TTL", amqp.Publishing{Expiration: "60000", Headers: amqp.Table{"x": "y"}}, "k", three},
		{"one hop", amqp.Publishing{Headers: amqp.Table{"x": "y"}}, "k", one},
		{"parked after 3 hops", amqp.Publishing{Headers: amqp.Table{"CC": cc}}, "k", threeParked},
		{"direct, parked", amqp.Publishing{Expiration: "5000", Headers: amqp.Table{"x": "y"}}, "k", parked},
	}
	for _, tt := range tests {
		want := contentHeaderSize(new(delivered(tt.msg, tt.key, tt.hops)))
		if got := deadLetteredHeaderSize(&tt.msg, contentHeaderSize(&tt.msg), tt.key, tt.hops); got != want {
			t.Errorf("%s: deadLetteredHeaderSize = %d, want %d (the delivered message's contentHeaderSize)", tt.name, got, want)
		}
	}
	m := amqp.Publishing{Headers: amqp.Table{"x": "y"}}
	if got := deadLetteredHeaderSize(&m, contentHeaderSize(&m), "k", nil); got != contentHeaderSize(&m) {
		t.Errorf("no hops: %d, want the published size %d", got, contentHeaderSize(&m))
	}
	// RabbitMQ 3.10.8 added 585 bytes to a 3-hop ladder message with prefix "rabbitdelay" and
	// routing key "k" (measured), without x-last-death-* (3.13+).
	lastDeath := deathSummarySize("x-last-death-", three[2])
	if growth := deadLetteredHeaderSize(&m, contentHeaderSize(&m), "k", three) - contentHeaderSize(&m) - lastDeath; growth != 585 {
		t.Errorf("3-hop growth without x-last-death-*: %d bytes, want the 585 measured on 3.10.8", growth)
	}
}

// TestDeadLetterReserve: the reserve is the growth plus the margin, counts the CC list at
// every hop, is never negative, and 0 without hops.
func TestDeadLetterReserve(t *testing.T) {
	three := ladderHops("rabbitdelay", 0, 1, 2)
	m := amqp.Publishing{Headers: amqp.Table{"x": "y"}}
	if r := deadLetterReserve(&m, contentHeaderSize(&m), "k", nil, nil); r != 0 {
		t.Errorf("no hops: reserve %d, want 0", r)
	}
	base := deadLetterReserve(&m, contentHeaderSize(&m), "k", three, nil)
	if want := deadLetteredHeaderSize(&m, contentHeaderSize(&m), "k", three) - contentHeaderSize(&m) + deadLetterMargin; base != want {
		t.Errorf("reserve %d, want growth + margin = %d", base, want)
	}
	withCC := amqp.Publishing{Headers: amqp.Table{"x": "y", "CC": []any{strings.Repeat("c", 100)}}}
	// Published once (1+2 key, 'A' 1+4, 'S' 1+4+100), and in each of the 3 x-death entries (5+100).
	if got := deadLetterReserve(&withCC, contentHeaderSize(&withCC), "k", three, nil); got != base+3*105 {
		t.Errorf("a 100-byte CC key: reserve %d, want %d (105 bytes more per hop)", got, base+3*105)
	}
	bcc := amqp.Publishing{Headers: amqp.Table{"BCC": []any{strings.Repeat("b", 5000)}}}
	if got := deadLetterReserve(&bcc, contentHeaderSize(&bcc), "k", three, nil); got != 0 {
		t.Errorf("a 5,000-byte BCC key, stripped on publish: reserve %d, want 0 (the published size is the larger)", got)
	}
	if got, longer := deadLetterReserve(&m, contentHeaderSize(&m), "k", three, nil), deadLetterReserve(&m, contentHeaderSize(&m), strings.Repeat("k", 200), three, nil); longer != got+3*199 {
		t.Errorf("a 200-byte routing key reserves %d, want %d", longer, got+3*199)
	}
}

// TestHeaderTooLargeWithReserve: a message that fits without the reserve but not with it is
// refused, naming the sizes and x-death; the sizes parse as the integration tests read them.
func TestHeaderTooLargeWithReserve(t *testing.T) {
	three := ladderHops("rabbitdelay", 0, 1, 2)
	const frameMax = 131072
	pad := func(n int) amqp.Publishing {
		return amqp.Publishing{Headers: amqp.Table{"pad": strings.Repeat("p", n), "CC": []any{"cc"}}}
	}
	largest := 0
	{
		m := pad(0)
		largest = frameMax - frameOverhead - contentHeaderSize(&m) - deadLetterReserve(&m, contentHeaderSize(&m), "k", three, nil)
	}
	fits, over := pad(largest), pad(largest+1)
	if p := headerTooLarge(contentHeaderSize(&fits), frameMax, deadLetterReserve(&fits, contentHeaderSize(&fits), "k", three, nil)); p != "" {
		t.Errorf("the largest pad is refused: %s", p)
	}
	r := deadLetterReserve(&over, contentHeaderSize(&over), "k", three, nil)
	p := headerTooLarge(contentHeaderSize(&over), frameMax, r)
	if !strings.Contains(p, "x-death") || !strings.Contains(p, "CC") || !strings.Contains(p, "frame_max of 131072") {
		t.Fatalf("one byte more: %q, want a refusal naming x-death, CC and frame_max", p)
	}
	var size, reserve, total int
	if _, err := fmt.Sscanf(p[strings.Index(p, "encode to "):], "encode to %d bytes (with this path's own headers), and %d bytes", &size, &reserve); err != nil {
		t.Fatalf("sizes not found in %q: %v", p, err)
	}
	if _, err := fmt.Sscanf(p[strings.Index(p, "margin): "):], "margin): %d bytes when delivered", &total); err != nil {
		t.Fatalf("delivered size not found in %q: %v", p, err)
	}
	if size != contentHeaderSize(&over)+frameOverhead || reserve != r || total != frameMax+1 {
		t.Errorf("sizes %d + %d = %d, want %d + %d = %d", size, reserve, total, contentHeaderSize(&over)+frameOverhead, r, frameMax+1)
	}
}

// TestParkRoute: a quorum ready queue with a delivery limit dead-letters to the parking queue,
// counted with the spec's longest ready-queue name (the longest name RabbitMQ takes when the
// spec lists none); classic ready queues and limit -1 have no such route. The reserve then
// holds one more x-death entry with reason delivery_limit, on every path.
func TestParkRoute(t *testing.T) {
	base := delayspec.Spec{Prefix: "rd", Targets: []delayspec.Target{{Name: "orders", Type: "direct"}}}.WithDefaults()
	withReady := base
	withReady.ReadyQueues = delayspec.ReadyQueues{{Queue: "a", Exchange: "orders"}, {Queue: "orders.timeouts", Exchange: "orders"}}
	classic := withReady
	classic.QueueType = delayspec.Classic
	noLimit := withReady
	noLimit.ReadyDeliveryLimit = delayspec.NoReadyDeliveryLimit
	for _, tt := range []struct {
		name string
		spec delayspec.Spec
		want string
	}{
		{"no ready queues listed", base, strings.Repeat("q", delayspec.MaxNameLen)},
		{"ready queues", withReady, strings.Repeat("q", len("orders.timeouts"))},
		{"classic", classic, ""},
		{"no delivery limit", noLimit, ""},
	} {
		if got := parkQueue(tt.spec); got != tt.want {
			t.Errorf("%s: %+v, want %+v", tt.name, got, tt.want)
		}
	}
	park := deadLetterHop{queue: parkQueue(withReady), exchange: "rd.dispatch", reason: parkReason}
	three := ladderHops("rd", 0, 1, 2)
	m := amqp.Publishing{Headers: amqp.Table{"CC": []any{"c"}}}
	without, with := deadLetterReserve(&m, contentHeaderSize(&m), "k", three, nil), deadLetterReserve(&m, contentHeaderSize(&m), "k", three, &park)
	want := deadLetteredHeaderSize(&m, contentHeaderSize(&m), "k", append(slices.Clip(three), park)) + deadLetterMargin - contentHeaderSize(&m)
	if with != want || with <= without {
		t.Errorf("3 hops then parked: reserve %d, want %d (more than the %d without parking)", with, want, without)
	}
	direct := deadLetterHop{queue: parkQueue(withReady), exchange: "orders", reason: parkReason}
	if got := deadLetterReserve(&m, contentHeaderSize(&m), "k", nil, &direct); got <= deadLetterMargin {
		t.Errorf("a direct publish that can be parked reserves %d bytes, want an x-death entry and the margin", got)
	}
}

// TestDeadLetterHopsCopy: in shard k of the ladder, every hop is a queue of shard k entered from
// shard k's exchanges, matching the plan's dead-letter exchanges.
func TestDeadLetterHopsCopy(t *testing.T) {
	spec := delayspec.Spec{Prefix: "rd", Targets: []delayspec.Target{{Name: "orders", Type: "direct"}}, Shards: 3,
		Ladder: ttlbuckets.Ladder{Radix: 16, Max: 65535 * time.Millisecond}}
	plan, err := admin.NewPlan(spec)
	if err != nil {
		t.Fatal(err)
	}
	names, ladder := spec.Names(), plan.Ladder
	lp, err := ladder.Plan(4369*time.Millisecond, ttlbuckets.RoundUp) // 0x1111: four hops
	if err != nil {
		t.Fatal(err)
	}
	c := choice{path: PathLadder, plan: lp}
	dest := names.LadderExchangeShard(lp.Entry, 2)
	hops, last := deadLetterHops(names, ladder, &c, dest, 2)
	if len(hops) != 4 || last != names.Dispatch() {
		t.Fatalf("hops %v, last %s", hops, last)
	}
	entered := dest
	for i, h := range hops {
		q, ok := plan.Queue(h.queue)
		if !ok || q.Shard != 2 || h.exchange != entered {
			t.Fatalf("hop %d: %+v (queue in plan %v, shard %d), entered from %s", i, h, ok, q.Shard, entered)
		}
		entered = q.DeadLetterExchange
	}
}

// TestShardOf: one ladder is shard 0; ids spread evenly over the copies, the same id always to
// the same copy.
func TestShardOf(t *testing.T) {
	if shardOf("x", 1) != 0 || shardOf("x", 0) != 0 {
		t.Fatal("one ladder: not shard 0")
	}
	counts := make([]int, 3)
	for i := range 30000 {
		counts[shardOf(newMessageID(), 3)]++
		if id := fmt.Sprint("order-", i); shardOf(id, 3) != shardOf(id, 3) {
			t.Fatal("not deterministic")
		}
	}
	for k, n := range counts {
		if n < 9000 || n > 11000 {
			t.Errorf("copy %d: %d of 30000 ids", k, n)
		}
	}
}

// TestDeadLetterHopsTopSplit: a top-split message enters through the first-hop queue of its
// highest digit d less u, comes back to level 0, climbs, and leaves through u units of its
// highest level (u = 1 + the lower digits' value mod (d-1)): that level's last-hop queue, or
// its own queue at the top level (which ends in D). A message whose highest digit is 1 takes the
// top-first route: that digit's first-hop queue, then up from level 0, leaving through the
// last-hop queue of its second-highest level. Each hop is entered from the previous queue's
// dead-letter exchange in the plan.
func TestDeadLetterHopsTopSplit(t *testing.T) {
	spec := delayspec.Spec{Prefix: "rd", Targets: []delayspec.Target{{Name: "orders", Type: "direct"}},
		Ladder: ttlbuckets.Ladder{Unit: time.Millisecond, Radix: 16, Max: 65535 * time.Millisecond, Order: ttlbuckets.TopSplit}}
	plan, err := admin.NewPlan(spec)
	if err != nil {
		t.Fatal(err)
	}
	names, ladder := spec.Names(), plan.Ladder
	for _, tc := range []struct {
		d      time.Duration
		queues []string
	}{
		{0x321 * time.Millisecond, []string{"rd.ladder.02.01.first", "rd.ladder.00.01", "rd.ladder.01.02", "rd.ladder.02.02.last"}}, // 0x21 mod 2 = 1: u = 2
		{0x320 * time.Millisecond, []string{"rd.ladder.02.02.first", "rd.ladder.01.02", "rd.ladder.02.01.last"}},                    // 0x20 mod 2 = 0: u = 1
		{0x3021 * time.Millisecond, []string{"rd.ladder.03.01.first", "rd.ladder.00.01", "rd.ladder.01.02", "rd.ladder.03.02"}},
		{0x121 * time.Millisecond, []string{"rd.ladder.02.01.first", "rd.ladder.00.01", "rd.ladder.01.02.last"}}, // highest digit 1: top-first
		{0x1021 * time.Millisecond, []string{"rd.ladder.03.01.first", "rd.ladder.00.01", "rd.ladder.01.02.last"}},
		{0x1300 * time.Millisecond, []string{"rd.ladder.03.01.first", "rd.ladder.02.03.last"}},
		{0x100 * time.Millisecond, []string{"rd.ladder.02.01.last"}}, // one digit: one hop
	} {
		lp, err := ladder.Plan(tc.d, ttlbuckets.Strict)
		if err != nil {
			t.Fatal(err)
		}
		c := choice{path: PathLadder, plan: lp}
		dest, _, _ := (&Publisher{names: names, ladder: ladder}).destination(c, "orders", 0)
		hops, last := deadLetterHops(names, ladder, &c, dest, 0)
		entered := dest
		var got []string
		for _, h := range hops {
			q, ok := plan.Queue(h.queue)
			if !ok || h.exchange != entered {
				t.Errorf("%v: hop %+v (in plan %v), entered from %s", tc.d, h, ok, entered)
			}
			got = append(got, h.queue)
			entered = q.DeadLetterExchange
		}
		if !slices.Equal(got, tc.queues) || last != entered || last != names.Dispatch() || dest != names.LadderEntryExchange(tc.queues[0]) {
			t.Errorf("%v: queues %v entered from %s, last exchange %s; want %v entered from its entry exchange, then %s", tc.d, got, dest, last, tc.queues, names.Dispatch())
		}
	}
}
