//go:build integration

package integration

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/delaykit/rabbitdelay/amqpdelay"
	"github.com/delaykit/rabbitdelay/integration/brokertest"
	"github.com/delaykit/rabbitdelay/internal/delayspec"
)

// TestPublisherRefusesConnectionKillers: input that amqp091 cannot encode (a short string
// over 255 bytes) or that RabbitMQ answers by closing the connection (a NaN or infinite float
// header) is refused with ErrInvalidInput before anything is sent, at once even with
// context.Background(); meanwhile a good publisher on the same Publisher keeps succeeding,
// and the connection is never lost (no reconnect event).
func TestPublisherRefusesConnectionKillers(t *testing.T) {
	t.Parallel()
	var ev events
	f := newDirectFixture(t, amqpdelay.Config{OnReconnect: ev.add})
	target, got, p := f.target, f.got, f.p

	// The good publisher: direct publishes, one every 5 ms, until stop.
	var ok atomic.Int64
	var goodErrs []error
	var mu sync.Mutex
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			case <-time.After(5 * time.Millisecond):
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			_, err := p.Publish(ctx, target, "k", textMsg("good"), 0)
			cancel()
			if err != nil {
				mu.Lock()
				goodErrs = append(goodErrs, err)
				mu.Unlock()
				continue
			}
			ok.Add(1)
		}
	}()

	long := strings.Repeat("r", 300)
	withHeaders := func(h amqp.Table) amqp.Publishing { m := textMsg("bad"); m.Headers = h; return m }
	typed := textMsg("bad")
	typed.Type = long
	huge := textMsg("bad")
	huge.Body = make([]byte, amqpdelay.DefaultMaxMessageSize+1)
	bad := []struct {
		name  string
		key   string
		msg   amqp.Publishing
		delay time.Duration
		want  string
	}{
		{"300-byte routing key, direct", long, textMsg("bad"), 0, "routing key"},
		{"300-byte routing key, delayed", long, textMsg("bad"), 2 * time.Second, "routing key"},
		{"NaN header", "k", withHeaders(amqp.Table{"score": math.NaN()}), 0, `msg.Headers["score"] is NaN`},
		{"Inf in a nested array, delayed", "k", withHeaders(amqp.Table{"a": []any{amqp.Table{"b": float32(math.Inf(1))}}}), time.Second, "+Inf"},
		{"300-byte header key", "k", withHeaders(amqp.Table{long: "v"}), 0, "msg.Headers key"},
		{"300-byte msg.Type", "k", typed, 0, "msg.Type"},
		{"200 KB of headers, direct", "k", withHeaders(amqp.Table{"pad": strings.Repeat("p", 200_000)}), 0, "frame_max"},
		{"200 KB of headers, delayed", "k", withHeaders(amqp.Table{"pad": strings.Repeat("p", 200_000)}), time.Second, "frame_max"},
		{"body over the maximum message size", "k", huge, time.Second, "Config.MaxMessageSize"},
		{"tables 33 deep, direct", "k", withHeaders(deepHeaders(33)), 0, "nested 33 deep"},
		{"tables 33 deep, delayed", "k", withHeaders(deepHeaders(33)), time.Second, "nested 33 deep"},
		{"array of 8193, delayed", "k", withHeaders(amqp.Table{"w": make([]any, 8193)}), time.Second, "8193 entries"},
	}
	time.Sleep(100 * time.Millisecond) // the good publisher is under way
	for _, b := range bad {
		res := make(chan error, 1)
		go func() {
			_, err := p.Publish(context.Background(), target, b.key, b.msg, b.delay)
			res <- err
		}()
		select {
		case err := <-res:
			if !errors.Is(err, amqpdelay.ErrInvalidInput) || !strings.Contains(err.Error(), b.want) {
				t.Errorf("%s: err = %v, want ErrInvalidInput naming %s", b.name, err, b.want)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("%s: Publish with context.Background() has not returned after 5 s", b.name)
		}
	}
	time.Sleep(300 * time.Millisecond) // a lost connection would show by now
	close(stop)
	<-done

	mu.Lock()
	defer mu.Unlock()
	for _, err := range goodErrs {
		t.Errorf("good publish failed: %v", err)
	}
	if ok.Load() < 1 { // how many depends on the machine's speed: one shows the connection held
		t.Errorf("only %d good publishes succeeded", ok.Load())
	}
	ev.mu.Lock()
	if len(ev.seen) != 0 {
		t.Errorf("the connection changed: %d reconnect events, first %v (%v)", len(ev.seen), ev.seen[0].Kind, ev.seen[0].Err)
	}
	ev.mu.Unlock()
	for range ok.Load() {
		if a := nextDelivery(t, got, 5*time.Second); string(a.d.Body) != "good" {
			t.Fatalf("delivered %q: a refused message was sent", a.d.Body)
		}
	}
	noDelivery(t, got, 2500*time.Millisecond) // the delayed bad ones were due after 1 s and 2 s
}

// TestPublisherHeaderFrameLimit finds, from the Publisher's own error, the largest header the
// direct path can carry on this connection, and checks both sides of that boundary against
// the broker: the largest one is confirmed without losing the connection, one byte more is
// refused by Publish with ErrInvalidInput. Publish follows the specification (a frame,
// its 8 bytes of overhead included, fits in frame_max); RabbitMQ (3.10.8, observed) tolerates
// 8 bytes more, a payload of frame_max itself, and closes the connection beyond that. So the
// properties of largest+1+8 sent with plain amqp091 must close the connection: the check is
// the specification's limit, not a cautious guess.
func TestPublisherHeaderFrameLimit(t *testing.T) {
	t.Parallel()
	var ev events
	f := declareDirectFixture(t)
	// Without a ready queue that parks (ReadyDeliveryLimit -1), a direct publish reserves no
	// room for an x-death entry (TestPublisherDeadLetterHeaderLimit covers that room): the
	// limit found is the frame's.
	// The Publisher reads the delivery limit from the spec record: a topology of its own, under
	// another prefix, with the fixture's target and without the fixture's ready queue (declared
	// with a limit, it would conflict), whose binding still takes the direct publishes.
	spec := f.spec
	spec.Prefix += "-nolimit"
	spec.ReadyDeliveryLimit = delayspec.NoReadyDeliveryLimit
	spec.ReadyQueues = nil
	declareTopology(t, f.env, spec)
	env, target, p := f.env, f.target, newPublisher(t, f.env, spec, amqpdelay.Config{OnReconnect: ev.add})
	frameMax := env.Dial(t).Config.FrameSize
	if frameMax <= 0 {
		t.Fatalf("negotiated frame_max = %d", frameMax)
	}
	msg := func(pad int) amqp.Publishing {
		return amqp.Publishing{MessageId: "m", DeliveryMode: amqp.Persistent, Headers: amqp.Table{"pad": strings.Repeat("p", pad)}, Body: []byte("b")}
	}
	_, err := p.Publish(pubCtx(t), target, "k", msg(frameMax), 0)
	var size int
	if err == nil || !errors.Is(err, amqpdelay.ErrInvalidInput) {
		t.Fatalf("a %d-byte header: err = %v, want ErrInvalidInput", frameMax, err)
	}
	if _, scanErr := fmt.Sscanf(err.Error()[strings.Index(err.Error(), "encode to "):], "encode to %d bytes", &size); scanErr != nil {
		t.Fatalf("the error does not say the size (%v): %v", scanErr, err)
	}
	largest := frameMax - (size - frameMax)
	if _, err := p.Publish(pubCtx(t), target, "k", msg(largest), 0); err != nil {
		t.Fatalf("the largest header that fits (pad %d bytes): %v", largest, err)
	}
	if _, err := p.Publish(pubCtx(t), target, "k", msg(largest+1), 0); !errors.Is(err, amqpdelay.ErrInvalidInput) {
		t.Fatalf("one byte more: err = %v, want ErrInvalidInput", err)
	}
	ev.mu.Lock()
	if len(ev.seen) != 0 {
		t.Errorf("the Publisher's connection changed: %v (%v)", ev.seen[0].Kind, ev.seen[0].Err)
	}
	ev.mu.Unlock()

	// The broker's side: what the Publisher would have sent for largest+9, sent by hand.
	over := msg(largest + 1 + 8)
	over.Headers["rabbitdelay-due"] = time.Now().UnixMilli() // the direct path's own headers
	over.Headers[amqpdelay.CopyHeader] = "0123456789abcdef"  // a copy tag: 16 hex digits
	brokerClosesConnection(t, env, target, over, amqp.FrameError,
		"the broker accepted a frame payload over frame_max: the Publisher's limit is stricter than it need be")
}

// TestPublisherLeavesRoomForDeathHeaders: every hop of a delayed message makes RabbitMQ add
// x-death headers, so a message that fits in a frame when published may not when delivered,
// and then RabbitMQ closes the connection of every consumer it is delivered to. Publish
// leaves room for them: the largest header it accepts on a 3-hop ladder delay is delivered
// to a plain consumer, and one byte more is refused with ErrInvalidInput naming x-death.
func TestPublisherLeavesRoomForDeathHeaders(t *testing.T) {
	t.Parallel()
	f := newDirectFixture(t)
	frameMax := f.env.Dial(t).Config.FrameSize
	const delay = 1234 * time.Millisecond // 0x4d2 ms: three hops on the radix-16 test ladder
	msg := func(pad int) amqp.Publishing {
		return amqp.Publishing{MessageId: "m", Headers: amqp.Table{"pad": strings.Repeat("p", pad)}, Body: []byte("b")}
	}
	_, err := f.p.Publish(f.ctx, f.target, "k", msg(frameMax), delay)
	var size, reserve int
	if !errors.Is(err, amqpdelay.ErrInvalidInput) || !strings.Contains(err.Error(), "x-death") {
		t.Fatalf("a %d-byte header on the ladder: err = %v, want ErrInvalidInput naming x-death", frameMax, err)
	}
	if _, scanErr := fmt.Sscanf(err.Error()[strings.Index(err.Error(), "encode to "):], "encode to %d bytes (with this path's own headers), and %d bytes", &size, &reserve); scanErr != nil {
		t.Fatalf("the error does not give the sizes (%v): %v", scanErr, err)
	}
	largest := frameMax - (size + reserve - frameMax)
	r, err := f.p.Publish(f.ctx, f.target, "k", msg(largest), delay)
	if err != nil || r.Path != amqpdelay.PathLadder || r.Hops != 3 {
		t.Fatalf("the largest header that leaves the room (pad %d): %+v, %v; want 3 ladder hops", largest, r, err)
	}
	if _, err := f.p.Publish(f.ctx, f.target, "k", msg(largest+1), delay); !errors.Is(err, amqpdelay.ErrInvalidInput) {
		t.Fatalf("one byte more: err = %v, want ErrInvalidInput", err)
	}
	a := nextDelivery(t, f.got, 10*time.Second) // a plain consumer: its connection must survive the delivery
	if len(a.d.Headers["pad"].(string)) != largest {
		t.Errorf("delivered a pad of %d bytes, want %d", len(a.d.Headers["pad"].(string)), largest)
	}
	if _, ok := a.d.Headers["x-death"]; !ok {
		t.Errorf("the delivery has no x-death header: the test no longer tests what it says")
	}
}

// brokerClosesConnection publishes msg to exchange on a connection of its own and checks
// that the broker closes that connection with code; ifOpen is the failure when it stays open.
func brokerClosesConnection(t *testing.T, env *brokertest.Env, exchange string, msg amqp.Publishing, code int, ifOpen string) {
	t.Helper()
	conn := env.Dial(t)
	closed := conn.NotifyClose(make(chan *amqp.Error, 1))
	ch, err := conn.Channel()
	if err != nil {
		t.Fatalf("channel: %v", err)
	}
	// The broker may close the connection as soon as it reads the content header, before
	// amqp091 has written the body: the publish then fails with 504 (amqp.ErrClosed), and the
	// connection's close reason below still tells why.
	if err := ch.PublishWithContext(pubCtx(t), exchange, "k", false, false, msg); err != nil && !errors.Is(err, amqp.ErrClosed) {
		t.Fatalf("publish: %v", err)
	}
	select {
	case e := <-closed:
		if e == nil || e.Code != code {
			t.Errorf("connection closed with %v, want code %d", e, code)
		}
	case <-time.After(5 * time.Second):
		t.Error(ifOpen)
	}
}

// TestBrokerClosesConnectionOnNaNHeader checks the broker fact behind refusing NaN headers:
// amqp091 encodes a NaN float header, and RabbitMQ (3.10.8) closes the whole connection
// with 541 INTERNAL_ERROR instead of refusing only the message or the channel.
func TestBrokerClosesConnectionOnNaNHeader(t *testing.T) {
	t.Parallel()
	env := brokertest.NewEnv(t)
	h := amqp.Table{"score": math.NaN()}
	if err := h.Validate(); err != nil {
		t.Fatalf("amqp091 now refuses NaN itself (%v): the check in amqpdelay may be redundant", err)
	}
	brokerClosesConnection(t, env, "", amqp.Publishing{Headers: h}, amqp.InternalError,
		"the broker kept the connection open after a NaN header: the refusal in amqpdelay may be too strict")
}

// deepHeaders returns a headers table whose value "a" holds tables nested depth deep below it.
func deepHeaders(depth int) amqp.Table {
	var v any = "leaf"
	for range depth {
		v = amqp.Table{"a": v}
	}
	return amqp.Table{"a": v}
}

// depthOf returns how deep tables nest below the headers table h along the key "a".
func depthOf(h amqp.Table) int {
	n := 0
	for v := h["a"]; ; n++ {
		t, ok := v.(amqp.Table)
		if !ok {
			return n
		}
		v = t["a"]
	}
}

// TestPublisherRefusesUnreadableHeaders checks the limits behind refusing headers that
// amqp091-go cannot read (tables and arrays nested more than 32 deep, more than 8,192 entries in
// one): a plain amqp091 consumer loses its connection on a message 33 deep that RabbitMQ took,
// while the Publisher's messages at the limits, direct and delayed, are confirmed and read back
// whole by the same kind of consumer (the refusals themselves are in
// TestPublisherRefusesConnectionKillers).
func TestPublisherRefusesUnreadableHeaders(t *testing.T) {
	t.Parallel()
	f := newDirectFixture(t)

	// The fact: RabbitMQ takes a message 33 deep, and amqp091 cannot read it.
	env := f.env
	q := env.Name("deep")
	ch := env.Channel(t)
	if _, err := ch.QueueDeclare(q, false, true, false, false, nil); err != nil {
		t.Fatalf("declare %s: %v", q, err)
	}
	if err := ch.PublishWithContext(f.ctx, "", q, false, false, amqp.Publishing{Headers: deepHeaders(33), Body: []byte("deep")}); err != nil {
		t.Fatalf("publish 33 deep: %v", err)
	}
	conn := env.Dial(t)
	closed := conn.NotifyClose(make(chan *amqp.Error, 1))
	cch, err := conn.Channel()
	if err != nil {
		t.Fatalf("channel: %v", err)
	}
	if _, err := cch.Consume(q, "", true, false, false, false, nil); err != nil {
		t.Fatalf("consume %s: %v", q, err)
	}
	select {
	case e := <-closed:
		if e == nil {
			t.Errorf("the consumer's connection closed without an error")
		}
	case <-time.After(10 * time.Second):
		t.Errorf("an amqp091 consumer read a message with tables 33 deep: amqpdelay's limit may now be too strict")
	}

	// At the limits, the Publisher's messages arrive and read back whole.
	wide := make([]any, 8192)
	for i := range wide {
		wide[i] = int64(i)
	}
	for _, delay := range []time.Duration{0, time.Second} {
		m := textMsg("limits")
		m.Headers = deepHeaders(32)
		m.Headers["w"] = wide
		if _, err := f.p.Publish(f.ctx, f.target, "k", m, delay); err != nil {
			t.Fatalf("publish at the limits, delay %v: %v", delay, err)
		}
		a := nextDelivery(t, f.got, maxLateness)
		if d := depthOf(a.d.Headers); d != 32 {
			t.Errorf("delay %v: tables arrived %d deep, want 32", delay, d)
		}
		if w, _ := a.d.Headers["w"].([]any); len(w) != 8192 || w[8191] != int64(8191) {
			t.Errorf("delay %v: the 8,192-entry array arrived with %d entries", delay, len(w))
		}
	}
}

// TestPublishDirectIntoTopologyRefused: a direct publish (no delay) into the delay topology's
// own objects is refused with ErrInvalidInput before anything is sent: one of its exchanges
// that is not a target, or one of its queues through the default exchange, named by the
// routing key or by a CC or BCC routing key. Such a message lacks the headers that route it on
// and, dead-lettered nowhere, would hold up every delayed message behind it. The parking queue
// and the user's own queues stay open to the default exchange, and delayed messages pass.
func TestPublishDirectIntoTopologyRefused(t *testing.T) {
	t.Parallel()
	env := brokertest.NewEnv(t)
	target := env.Name("orders")
	spec := testSpec(env, delayspec.Target{Name: target, Type: "direct"})
	spec.Buckets = delayspec.Delays{3 * time.Second}
	declareTopology(t, env, spec)
	q := env.Name("ready")
	declareReadyQueue(t, env, q, target, "k")
	got := consumeQueue(t, env, q)
	p := newPublisher(t, env, spec)
	ctx := pubCtx(t)
	n := spec.WithDefaults().Names()
	ladderQ := n.LadderQueue(0, 1)
	refused := []struct {
		name, exchange, key string
		headers             amqp.Table
	}{
		{"ladder queue", "", ladderQ, nil},
		{"upper ladder queue", "", n.LadderQueue(2, 5), nil},
		{"last-hop queue", "", n.LadderLastHopQueueShard(1, 3, 0), nil},
		{"bucket queue", "", n.BucketQueue(3000), nil},
		{"revocation stream", "", n.Revoked(), nil},
		{"another prefix's ladder queue", "", "other.ladder.01.02", nil},
		{"another prefix's last-hop queue copy", "", "other.ladder.01.02.s2.last", nil},
		{"another prefix's bucket queue", "", "other.bucket.60000ms", nil},
		{"CC to a ladder queue", "", q, amqp.Table{"CC": []any{ladderQ}}},
		{"BCC to a bucket queue", "", q, amqp.Table{"BCC": []any{"x", n.BucketQueue(3000)}}},
		{"dispatch exchange", n.Dispatch(), "k", nil},
		{"bucket exchange", n.BucketExchange(), "k", nil},
		{"ladder exchange", n.LadderExchange(1), "k", nil},
		{"entry exchange", n.LadderEntryExchange(ladderQ), "k", nil},
		{"last-hop exchange", n.LadderLastHopExchangeShard(1, 0), "k", nil},
		{"plugin exchange", n.PluginExchange(), "k", nil},
	}
	for _, c := range refused {
		m := textMsg("by hand: " + c.name)
		m.Headers = c.headers
		_, err := p.Publish(ctx, c.exchange, c.key, m, 0)
		if !errors.Is(err, amqpdelay.ErrInvalidInput) || !strings.Contains(err.Error(), "delay topology") {
			t.Errorf("%s (exchange %q, routing key %q): err = %v, want ErrInvalidInput naming the delay topology", c.name, c.exchange, c.key, err)
		}
		d, derr := p.PublishDeferred(ctx, c.exchange, c.key, m, -time.Second)
		if derr == nil {
			_, derr = d.Wait(ctx)
		}
		if !errors.Is(derr, amqpdelay.ErrInvalidInput) {
			t.Errorf("%s, PublishDeferred with a negative delay: err = %v, want ErrInvalidInput", c.name, derr)
		}
	}
	// Still open: the user's queue through the default exchange, the parking queue (the
	// consumer package parks messages that way), the target; and delayed messages.
	if _, err := p.Publish(ctx, "", q, textMsg("direct to the ready queue"), 0); err != nil {
		t.Errorf("default exchange to the user's queue: %v", err)
	}
	if _, err := p.Publish(ctx, "", n.Parking(), textMsg("parked"), 0); err != nil {
		t.Errorf("default exchange to the parking queue: %v", err)
	}
	for _, d := range []time.Duration{0, 17 * time.Millisecond, 3 * time.Second} {
		if _, err := p.Publish(ctx, target, "k", textMsg(fmt.Sprint("delayed ", d)), d); err != nil {
			t.Errorf("publish to the target with delay %v: %v", d, err)
		}
	}
	want := map[string]bool{"direct to the ready queue": true, "delayed 0s": true, "delayed 17ms": true, "delayed 3s": true}
	deadline := time.After(maxLateness + 3*time.Second)
	for len(want) > 0 {
		select {
		case a := <-got:
			delete(want, string(a.d.Body))
		case <-deadline:
			t.Fatalf("not delivered: %v", want)
		}
	}
	ch := env.Channel(t)
	for _, name := range []string{ladderQ, n.BucketQueue(3000)} {
		qi, err := ch.QueueDeclarePassive(name, true, false, false, false, nil)
		if err != nil {
			t.Fatalf("inspect %s: %v", name, err)
		}
		if qi.Messages != 0 {
			t.Errorf("%s holds %d messages, want 0", name, qi.Messages)
		}
	}
}
