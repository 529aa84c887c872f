//go:build integration

package integration

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/delaykit/rabbitdelay/amqpdelay"
	"github.com/delaykit/rabbitdelay/consumer"
	"github.com/delaykit/rabbitdelay/integration/brokertest"
	"github.com/delaykit/rabbitdelay/internal/delayspec"
)

// attackCase is one message sent direct and delayed while 8 victims publish delayed
// messages on a one-channel Publisher.
type attackCase struct {
	name    string
	key     string
	msg     amqp.Publishing
	toBK    bool // expected also on the queue bound by "bk"
	onlyDir bool
	onlyDel bool
}

type attackResult struct {
	name, mode string
	err        error
	victimErrs int64
	victimOK   int64
	victimErr  error
}

// watchConsumer consumes queue and records deliveries by body and whether the consumer's
// connection closed.
type watchConsumer struct {
	mu     sync.Mutex
	bodies map[string]int
	closed error
	early  []string
}

func startWatch(t *testing.T, env *brokertest.Env, queue string) *watchConsumer {
	w := &watchConsumer{bodies: map[string]int{}}
	conn := env.Dial(t)
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	ds, err := ch.Consume(queue, "", true, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	cl := conn.NotifyClose(make(chan *amqp.Error, 1))
	go func() {
		for d := range ds {
			now := time.Now()
			w.mu.Lock()
			w.bodies[string(d.Body)]++
			if due, ok := amqpdelay.Due(d); ok && now.Before(due) {
				w.early = append(w.early, string(d.Body))
			}
			w.mu.Unlock()
		}
	}()
	go func() {
		if e := <-cl; e != nil {
			w.mu.Lock()
			w.closed = e
			w.mu.Unlock()
		}
	}()
	return w
}

func runAttack(t *testing.T, cases []attackCase) {
	env := brokertest.NewEnv(t)
	target := env.Name("t")
	spec := testSpec(env, delayspec.Target{Name: target, Type: "topic"})
	declareTopology(t, env, spec)
	rq, bq := env.Name("ready"), env.Name("bk")
	declareReadyQueue(t, env, rq, target, "k")
	declareReadyQueue(t, env, bq, target, "bk")
	wr := startWatch(t, env, rq)
	wb := startWatch(t, env, bq)
	var ev events
	p := newPublisher(t, env, spec, amqpdelay.Config{Channels: 1, OnReconnect: ev.add})

	var results []attackResult
	for _, tc := range cases {
		for _, mode := range []string{"direct", "delayed"} {
			if tc.onlyDir && mode == "delayed" || tc.onlyDel && mode == "direct" {
				continue
			}
			delay := time.Duration(0)
			if mode == "delayed" {
				delay = 700 * time.Millisecond
			}
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			c := startCanary(8, func() error {
				_, err := p.Publish(ctx, target, "v", textMsg("victim"), time.Minute)
				return err
			})
			time.Sleep(50 * time.Millisecond)
			m := tc.msg
			m.Body = []byte(tc.name + "/" + mode)
			key := tc.key
			if key == "" {
				key = "k"
			}
			_, err := p.Publish(ctx, target, key, m, delay)
			time.Sleep(100 * time.Millisecond)
			close(c.stop)
			c.wg.Wait()
			cancel()
			r := attackResult{name: tc.name, mode: mode, err: err, victimErrs: c.failed.Load(), victimOK: c.sent.Load()}
			if e := c.first.Load(); e != nil {
				r.victimErr = *e
			}
			results = append(results, r)
			if r.victimErrs > 0 {
				t.Errorf("VICTIMS %s/%s: %d of %d victims failed (first: %v); bad publish err=%v", tc.name, mode, r.victimErrs, r.victimErrs+r.victimOK, r.victimErr, err)
			}
			if errors.Is(err, amqpdelay.ErrConnectionLost) {
				t.Errorf("LOST %s/%s: %v", tc.name, mode, err)
			}
		}
	}
	time.Sleep(6 * time.Second)
	wr.mu.Lock()
	wb.mu.Lock()
	defer wr.mu.Unlock()
	defer wb.mu.Unlock()
	byName := map[string]attackCase{}
	for _, tc := range cases {
		byName[tc.name] = tc
	}
	for _, r := range results {
		body := r.name + "/" + r.mode
		tc := byName[r.name]
		n := wr.bodies[body]
		if tc.key != "" && tc.key != "k" {
			n = -1 // not expected on the "k" queue
		}
		nb := wb.bodies[body]
		status := "ok"
		if r.err == nil {
			if n == 0 {
				status = "CONFIRMED-NOT-DELIVERED(k)"
				t.Errorf("%s: confirmed, not delivered to the k queue", body)
			}
			if tc.toBK && nb == 0 {
				status += " CONFIRMED-NOT-DELIVERED(bk)"
				t.Errorf("%s: confirmed, not delivered to the bk queue", body)
			}
		} else if n > 0 {
			status = "ERROR-BUT-DELIVERED"
		}
		errText := "<nil>"
		if r.err != nil {
			errText = r.err.Error()
			if len(errText) > 220 {
				errText = errText[:220] + "..."
			}
		}
		t.Logf("%-40s %-8s k=%d bk=%d victims=%d/%d %s err=%s", r.name, r.mode, n, nb, r.victimErrs, r.victimErrs+r.victimOK, status, errText)
	}
	if wr.closed != nil || wb.closed != nil {
		t.Errorf("consumer connection closed: ready=%v bk=%v", wr.closed, wb.closed)
	}
	if len(wr.early)+len(wb.early) > 0 {
		t.Errorf("early: %v %v", wr.early, wb.early)
	}
	ev.mu.Lock()
	for _, e := range ev.seen {
		t.Errorf("reconnect event %v: %v", e.Kind, e.Err)
	}
	ev.mu.Unlock()
	var extra []string
	for b := range wr.bodies {
		if !strings.Contains(b, "/") {
			extra = append(extra, b)
		}
	}
	sort.Strings(extra)
	if len(extra) > 0 {
		t.Logf("other bodies on k: %v", extra)
	}
}

func hdr(h amqp.Table) amqp.Publishing { return amqp.Publishing{Headers: h} }

func TestAttackHeaderTypes(t *testing.T) {
	if os.Getenv("ATTACK") == "" {
		t.Skip("a long sweep of header types beside victims: set ATTACK=1 to run it")
	}
	cases := []attackCase{
		{name: "nil value", msg: hdr(amqp.Table{"a": nil})},
		{name: "bool", msg: hdr(amqp.Table{"a": true})},
		{name: "byte 255", msg: hdr(amqp.Table{"a": byte(255)})},
		{name: "int8 -128", msg: hdr(amqp.Table{"a": int8(-128)})},
		{name: "int16", msg: hdr(amqp.Table{"a": int16(-32768)})},
		{name: "uint16 max", msg: hdr(amqp.Table{"a": uint16(65535)})},
		{name: "uint32 max", msg: hdr(amqp.Table{"a": uint32(math.MaxUint32)})},
		{name: "int64 min", msg: hdr(amqp.Table{"a": int64(math.MinInt64)})},
		{name: "float32 tiny", msg: hdr(amqp.Table{"a": float32(math.SmallestNonzeroFloat32)})},
		{name: "float64 max", msg: hdr(amqp.Table{"a": math.MaxFloat64})},
		{name: "float64 -0", msg: hdr(amqp.Table{"a": math.Copysign(0, -1)})},
		{name: "string non-utf8", msg: hdr(amqp.Table{"a": "\xff\xfe\x00"})},
		{name: "hdrkey non-utf8", msg: hdr(amqp.Table{"\xff\xfe": "v"})},
		{name: "empty key", msg: hdr(amqp.Table{"": "v"})},
		{name: "bytes empty", msg: hdr(amqp.Table{"a": []byte{}})},
		{name: "bytes 1000", msg: hdr(amqp.Table{"a": make([]byte, 1000)})},
		{name: "decimal scale 255", msg: hdr(amqp.Table{"a": amqp.Decimal{Scale: 255, Value: -1}})},
		{name: "decimal big", msg: hdr(amqp.Table{"a": amqp.Decimal{Scale: 0, Value: math.MinInt32}})},
		{name: "time zero", msg: hdr(amqp.Table{"a": time.Time{}})},
		{name: "time -1", msg: hdr(amqp.Table{"a": time.Unix(-1, 0)})},
		{name: "time far", msg: hdr(amqp.Table{"a": time.Unix(1<<62, 0)})},
		{name: "nested 20 tables", msg: hdr(amqp.Table{"a": nest(20)})},
		{name: "array of arrays", msg: hdr(amqp.Table{"a": []any{[]any{[]any{nil, true, "x"}}}})},
		{name: "array with decimal/time/bytes", msg: hdr(amqp.Table{"a": []any{amqp.Decimal{Scale: 2, Value: 5}, time.Unix(5, 0), []byte("x"), nil}})},
		{name: "empty table and array", msg: hdr(amqp.Table{"a": amqp.Table{}, "b": []any{}})},
		{name: "x-death string", msg: hdr(amqp.Table{"x-death": "garbage"})},
		{name: "x-death array of string", msg: hdr(amqp.Table{"x-death": []any{"x"}})},
		{name: "x-death bad table", msg: hdr(amqp.Table{"x-death": []any{amqp.Table{"count": "n", "queue": int32(1), "reason": int32(2)}}})},
		{name: "x-first-death-queue int", msg: hdr(amqp.Table{"x-first-death-queue": int32(3), "x-first-death-reason": true})},
		{name: "x-delay string", msg: hdr(amqp.Table{"x-delay": "abc"})},
		{name: "x-match", msg: hdr(amqp.Table{"x-match": "any"})},
		{name: "x-received-from", msg: hdr(amqp.Table{"x-received-from": "x"})},
		{name: "x-routing-key", msg: hdr(amqp.Table{"x-routing-key": "bk"})},
		{name: "x-cc", msg: hdr(amqp.Table{"x-cc": []any{"bk"}})},
		{name: "x-delivery-count str", msg: hdr(amqp.Table{"x-delivery-count": "z"})},
		{name: "x-stream-offset str", msg: hdr(amqp.Table{"x-stream-offset": "z"})},
		{name: "x-opt-foo", msg: hdr(amqp.Table{"x-opt-foo": "z"})},
		{name: "timestamp_in_ms", msg: hdr(amqp.Table{"timestamp_in_ms": "z"})},
		{name: "x-basic-type", msg: hdr(amqp.Table{"x-basic-type": int32(4)})},
		{name: "CC int", msg: hdr(amqp.Table{"CC": []any{int32(1)}})},
		{name: "CC bk+int", msg: hdr(amqp.Table{"CC": []any{"bk", int32(1)}}), toBK: true},
		{name: "CC nil", msg: hdr(amqp.Table{"CC": []any{nil}})},
		{name: "CC table", msg: hdr(amqp.Table{"CC": []any{amqp.Table{"a": "b"}}})},
		{name: "CC bytes bk", msg: hdr(amqp.Table{"CC": []any{[]byte("bk")}})},
		{name: "CC 300-byte key", msg: hdr(amqp.Table{"CC": []any{strings.Repeat("a", 300)}})},
		{name: "CC empty key", msg: hdr(amqp.Table{"CC": []any{""}})},
		{name: "CC empty array", msg: hdr(amqp.Table{"CC": []any{}})},
		{name: "CC bk", msg: hdr(amqp.Table{"CC": []any{"bk"}}), toBK: true},
		{name: "BCC bk", msg: hdr(amqp.Table{"BCC": []any{"bk"}}), toBK: true},
		{name: "BCC int", msg: hdr(amqp.Table{"BCC": []any{int32(1)}})},
		{name: "cc lowercase", msg: hdr(amqp.Table{"cc": "notarray"})},
		{name: "priority 255", msg: amqp.Publishing{Priority: 255}},
		{name: "timestamp prop -1", msg: amqp.Publishing{Timestamp: time.Unix(-1, 0)}},
		{name: "timestamp prop far", msg: amqp.Publishing{Timestamp: time.Unix(1<<62, 0)}},
		{name: "userid Guest", msg: amqp.Publishing{UserId: "Guest"}},
		{name: "userid guest", msg: amqp.Publishing{UserId: "guest"}},
		{name: "userid guest space", msg: amqp.Publishing{UserId: "guest "}},
		{name: "messageid non-utf8", msg: amqp.Publishing{MessageId: "\xff\xfe"}},
		{name: "contenttype non-utf8", msg: amqp.Publishing{ContentType: "\xff", ContentEncoding: "\xfe", Type: "\x00", AppId: "\xff", ReplyTo: "\xff", CorrelationId: "\xff"}},
		{name: "transient", msg: amqp.Publishing{DeliveryMode: 1}},
		{name: "exp 0", msg: amqp.Publishing{Expiration: "0"}, onlyDir: true},
		{name: "exp 00", msg: amqp.Publishing{Expiration: "00"}, onlyDir: true},
		{name: "exp 5000", msg: amqp.Publishing{Expiration: "5000"}, onlyDir: true},
		{name: "exp +5", msg: amqp.Publishing{Expiration: "+5"}, onlyDir: true},
		{name: "exp sp5", msg: amqp.Publishing{Expiration: " 5"}, onlyDir: true},
		{name: "exp -1", msg: amqp.Publishing{Expiration: "-1"}, onlyDir: true},
		{name: "exp max", msg: amqp.Publishing{Expiration: "315360000000"}, onlyDir: true},
		{name: "exp long zeros", msg: amqp.Publishing{Expiration: strings.Repeat("0", 200) + "9000"}, onlyDir: true},
		{name: "exp huge digits", msg: amqp.Publishing{Expiration: strings.Repeat("9", 30)}, onlyDir: true},
		{name: "key 255 ascii", key: strings.Repeat("k", 255)},
		{name: "key 255 utf8", key: strings.Repeat("€", 85)},
		{name: "key non-utf8", key: "\xff\xfe"},
		{name: "key with nul", key: "k\x00"},
	}
	runAttack(t, cases)
}

func nest(n int) amqp.Table {
	t := amqp.Table{"leaf": "x"}
	for i := 0; i < n; i++ {
		t = amqp.Table{fmt.Sprintf("l%d", i): t}
	}
	return t
}

// TestAttackParkedBoundaryMessage: the largest header Publish accepts for a 3-hop ladder delay
// reaches the ready queue; the consumer rejects it (no requeue), so the ready queue parks it
// with one more x-death entry. A plain consumer of the parking queue then gets it, its
// connection open (the Publisher's reserve counts that entry).
func TestAttackParkedBoundaryMessage(t *testing.T) {
	f := newBoundaryFixture(t, "ready-with-a-fairly-long-queue-name-as-services-have-them")
	if _, err := f.p.Publish(f.ctx, f.target, "k", padMsg(f.largest), boundaryDelay); err != nil {
		t.Fatal(err)
	}
	d := rejectFromReady(t, f.env, f.rq)
	t.Logf("ready consumer got it (%d x-death entries); rejected it", len(d.Headers["x-death"].([]any)))
	d = getParkedIntact(t, f.env, f.spec.WithDefaults().Names().Parking())
	t.Logf("parking consumer got it: %d x-death entries", len(d.Headers["x-death"].([]any)))
}

// boundaryDelay is the delay of the boundary fixtures' messages: 3 ladder hops.
const boundaryDelay = 1234 * time.Millisecond

// boundaryFixture is a direct target "orders" with one ready queue rq bound by "k", a
// Publisher, and largest: the largest "pad" header (padMsg) Publish accepts for a
// boundaryDelay delay, read from its refusal of a frame_max-sized one.
type boundaryFixture struct {
	env      *brokertest.Env
	target   string
	rq       string
	spec     delayspec.Spec
	p        *amqpdelay.Publisher
	ctx      context.Context
	frameMax int
	largest  int
}

func newBoundaryFixture(t *testing.T, readyQueue string) boundaryFixture {
	t.Helper()
	f := boundaryFixture{env: brokertest.NewEnv(t)}
	f.target = f.env.Name("orders")
	f.spec = testSpec(f.env, delayspec.Target{Name: f.target, Type: "direct"})
	f.rq = f.env.Name(readyQueue)
	f.spec.ReadyQueues = delayspec.ReadyQueues{{Queue: f.rq, Exchange: f.target, BindingKey: "k"}}
	declareTopology(t, f.env, f.spec)
	f.p = newPublisher(t, f.env, f.spec)
	f.ctx = pubCtx(t)
	f.frameMax = f.env.Dial(t).Config.FrameSize
	_, err := f.p.Publish(f.ctx, f.target, "k", padMsg(f.frameMax), boundaryDelay)
	_, _, total := refusalSizes(t, err)
	f.largest = f.frameMax - (total - f.frameMax)
	return f
}

// padMsg is a message whose headers hold pad bytes of padding.
func padMsg(pad int) amqp.Publishing {
	return amqp.Publishing{MessageId: "m", Headers: amqp.Table{"pad": strings.Repeat("p", pad)}, Body: []byte("b")}
}

// rejectFromReady consumes one delivery of queue q and rejects it without requeueing (the
// queue then dead-letters it to the parking queue), and returns it.
func rejectFromReady(t *testing.T, env *brokertest.Env, q string) amqp.Delivery {
	t.Helper()
	ds, err := env.Channel(t).Consume(q, "", false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case d := <-ds:
		_ = d.Reject(false)
		return d
	case <-time.After(time.Minute):
		t.Fatalf("nothing delivered from %s", q)
	}
	return amqp.Delivery{}
}

// getParkedIntact consumes one delivery of the parking queue on a connection of its own, acks
// it and returns it; the test fails when that connection closes first (a header frame over
// frame_max) or nothing comes.
func getParkedIntact(t *testing.T, env *brokertest.Env, parking string) amqp.Delivery {
	t.Helper()
	pc := env.Dial(t)
	closed := pc.NotifyClose(make(chan *amqp.Error, 1))
	pch, err := pc.Channel()
	if err != nil {
		t.Fatal(err)
	}
	pds, err := pch.Consume(parking, "", false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case d := <-pds:
		_ = d.Ack(false)
		return d
	case e := <-closed:
		t.Fatalf("the parking queue's consumer lost its connection: %v", e)
	case <-time.After(time.Minute):
		t.Fatal("nothing on the parking queue")
	}
	return amqp.Delivery{}
}

// TestReplayParkedLargeMessageBounded: a message near the header limit, with its 3 hops'
// x-death entries, that package consumer parks (a permanent error: a copy published to the
// parking queue with the failure record) goes back to its queue with consumer.Replay (the
// default exchange: no dead-lettering, no x-death entry, the failure record dropped), is
// rejected there by a plain consumer and parked by the ready queue's dead-lettering (one more
// x-death entry, which the Publisher reserved room for): a plain consumer of the parking queue
// gets it with its connection open, and Replay then leaves it in the parking queue (no
// failure record: a consumer did not park it), so nothing loops.
func TestReplayParkedLargeMessageBounded(t *testing.T) {
	t.Parallel()
	f := newBoundaryFixture(t, "ready")
	env, spec, rq := f.env, f.spec, f.rq
	// Room for the consumer's failure record (its error text at most consumer.MaxErrorLen) and
	// for the reserve of its park publish (a direct publish; the consumer's Publisher knows no
	// ready queue names, so it counts a 255-byte one).
	pad := f.largest - consumer.MaxErrorLen - 3000
	if _, err := f.p.Publish(f.ctx, f.target, "k", padMsg(pad), boundaryDelay); err != nil {
		t.Fatal(err)
	}
	cfg := amqpdelay.Config{URL: env.URL, Prefix: spec.Prefix}
	names := spec.WithDefaults().Names()
	parkedCount := func() int {
		q, err := env.Channel(t).QueueDeclarePassive(names.Parking(), true, false, false, false, nil)
		if err != nil {
			t.Fatal(err)
		}
		return q.Messages
	}
	var evMu sync.Mutex
	var evs []string
	c := newConsumer(t, cfg, rq, func(context.Context, amqp.Delivery) error {
		return consumer.Permanent(errors.New(strings.Repeat("e", 2*consumer.MaxErrorLen)))
	}, consumer.Options{Observer: func(e consumer.Event) {
		evMu.Lock()
		evs = append(evs, fmt.Sprintf("%v: %.300v", e.Kind, e.Err))
		evMu.Unlock()
	}})
	stop := runConsumer(t, c)
	waitFor(t, time.Minute, "the consumer parks the message", func() bool { return parkedCount() == 1 })
	stop()

	rctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if moved, err := consumer.Replay(rctx, cfg, rq, 0); err != nil || moved != 1 {
		evMu.Lock()
		t.Fatalf("Replay: moved %d, %v; want 1 (the consumer's events: %v)", moved, err, evs)
	}
	// A plain consumer rejects it: the ready queue parks it.
	if _, ok := rejectFromReady(t, env, rq).Headers[consumer.HeaderReplayed]; !ok {
		t.Errorf("the replayed delivery has no %s header", consumer.HeaderReplayed)
	}
	waitFor(t, time.Minute, "the ready queue parks the rejected message", func() bool { return parkedCount() == 1 })
	if moved, err := consumer.Replay(rctx, cfg, rq, 0); err != nil || moved != 0 {
		t.Errorf("Replay of a message the ready queue parked: moved %d, %v; want 0 (it stays parked)", moved, err)
	}
	d := getParkedIntact(t, env, names.Parking())
	deaths, _ := d.Headers["x-death"].([]any)
	newest, _ := deaths[0].(amqp.Table)
	if newest["queue"] != rq || newest["reason"] != "rejected" {
		t.Errorf("parked message's newest x-death entry %v, want queue %s, reason rejected", newest, rq)
	}
	t.Logf("parked after a replay: %d x-death entries, newest %v %v", len(deaths), newest["queue"], newest["reason"])
}
