//go:build integration

package integration

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/delaykit/rabbitdelay/amqpdelay"
	"github.com/delaykit/rabbitdelay/integration/brokertest"
	"github.com/delaykit/rabbitdelay/internal/delayspec"
)

// restartSpec is the topology of the restart tests on a private broker's default vhost.
func restartSpec(prefix string) delayspec.Spec {
	return delayspec.Spec{
		Prefix:      prefix,
		Targets:     delayspec.Targets{{Name: prefix + ".orders", Type: "direct"}},
		Buckets:     delayspec.Delays{3 * time.Second, 9 * time.Second},
		Ladder:      testLadder(),
		Plugin:      delayspec.PluginOff,
		QueueType:   delayspec.Quorum,
		ReadyQueues: delayspec.ReadyQueues{{Queue: prefix + ".ready", Exchange: prefix + ".orders", BindingKey: "k"}},
	}
}

// newRestartFixture starts a private broker with restartSpec(prefix) declared, a consumer of
// its ready queue that survives restarts, and a Publisher that reconnects quickly and records
// its reconnect events; target is the spec's target exchange.
func newRestartFixture(t *testing.T, prefix string) (b *privateBroker, got <-chan arrival, ev *events, p *amqpdelay.Publisher, target string) {
	t.Helper()
	b = startPrivateBroker(t)
	spec := restartSpec(prefix)
	declareTopologyAt(t, b.URL, spec)
	got = resilientConsumer(t, b.URL, prefix+".ready")
	ev = &events{}
	p = newPublisherURL(t, b.URL, spec, amqpdelay.Config{OnReconnect: ev.add, ReconnectMin: 50 * time.Millisecond, ReconnectMax: 500 * time.Millisecond})
	return b, got, ev, p, spec.Targets[0].Name
}

// events records a Publisher's reconnect events.
type events struct {
	mu   sync.Mutex
	seen []amqpdelay.ReconnectEvent
}

func (e *events) add(ev amqpdelay.ReconnectEvent) {
	e.mu.Lock()
	e.seen = append(e.seen, ev)
	e.mu.Unlock()
}
func (e *events) count() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.seen)
}

func (e *events) has(k amqpdelay.ReconnectKind) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, ev := range e.seen {
		if ev.Kind == k {
			return true
		}
	}
	return false
}

// TestPublisherBrokerRestart: the broker restarts (stop_app, start_app: quorum queues keep
// their messages) while messages wait on the ladder and in buckets: every message arrives,
// none early, and the same Publisher publishes again afterwards.
func TestPublisherBrokerRestart(t *testing.T) {
	t.Parallel()
	b, got, ev, p, target := newRestartFixture(t, "rdt-restart")
	ctx := pubCtx(t)
	// Due before, during and after the restart, through buckets and the ladder.
	delays := []time.Duration{2 * time.Second, 3 * time.Second, 4500 * time.Millisecond, 9 * time.Second, 12 * time.Second, 15*time.Second + 7*time.Millisecond}
	want := map[string]amqpdelay.Receipt{}
	for i, d := range delays {
		r, err := p.Publish(ctx, target, "k", textMsg(strconv.Itoa(i)), d)
		if err != nil {
			t.Fatalf("publish %v: %v", d, err)
		}
		want[strconv.Itoa(i)] = r
	}
	time.Sleep(500 * time.Millisecond)
	stopped := time.Now()
	b.stopApp(t)
	b.startApp(t)
	restarted := time.Now()
	t.Logf("broker restarted in %v", restarted.Sub(stopped))

	// The Publisher reconnects by itself. A new context: a slow restart on a busy machine may
	// have used up the first one.
	r, err := p.Publish(outageCtx(t), target, "k", textMsg("after"), time.Second)
	if err != nil {
		t.Fatalf("publish after the restart: %v", err)
	}
	want["after"] = r
	if !ev.has(amqpdelay.Disconnected) || !ev.has(amqpdelay.Reconnected) {
		t.Errorf("reconnect events %+v: want disconnected and reconnected", ev.seen)
	}
	for len(want) > 0 {
		// A message whose dead-lettering the stop interrupted can be held until the quorum
		// queue's dead-letter worker resends it (seen once: more than 20 s); at-least-once
		// means late, not lost, so wait for it, and say where it was.
		var a arrival
		select {
		case a = <-got:
		case <-time.After(20 * time.Second):
			env := &brokertest.Env{Broker: b.Broker, VHost: "/"}
			t.Logf("%d messages not there 20 s after the last one: %v; queues: %v", len(want), want, queueStats(t, env))
			select {
			case a = <-got:
			case <-time.After(150 * time.Second):
				t.Fatalf("%d messages missing: %v; queues: %v", len(want), want, queueStats(t, env))
			}
		}
		rc, ok := want[string(a.d.Body)]
		if !ok {
			t.Fatalf("unexpected or duplicate delivery %q", a.d.Body)
		}
		delete(want, string(a.d.Body))
		due, _ := amqpdelay.Due(a.d)
		if !due.Equal(rc.Due) {
			t.Errorf("%q: due header %v, receipt %v", a.d.Body, due, rc.Due)
		}
		if a.at.Before(due) {
			t.Errorf("%q (%v, %v) arrived %v EARLY", a.d.Body, rc.Path, rc.Delay, due.Sub(a.at))
		}
		// A hop that should have ended while the broker was down ends when it is back, and
		// the later hops start only then: any message may be late by up to the outage. How
		// late is a figure, not a test (a busy machine makes it later).
		t.Logf("%q (%v, %v) arrived %v late (outage %v)", a.d.Body, rc.Path, rc.Delay, a.at.Sub(due), restarted.Sub(stopped))
	}
}

// TestPublisherBrokerOutage: with the broker stopped, Publish returns the context's error when
// its context ends; once the broker is back, the same Publisher publishes successfully.
func TestPublisherBrokerOutage(t *testing.T) {
	t.Parallel()
	b, got, ev, p, target := newRestartFixture(t, "rdt-outage")
	if _, err := p.Publish(pubCtx(t), target, "k", textMsg("before"), 0); err != nil {
		t.Fatal(err)
	}
	checkOnTime(t, nextDelivery(t, got, 5*time.Second))

	// A second Publisher with one channel: the ladder publishes and the direct publish to a
	// missing exchange started during the outage share it once the broker is back.
	one := newPublisherURL(t, b.URL, restartSpec("rdt-outage"), amqpdelay.Config{Channels: 1, ReconnectMin: 50 * time.Millisecond, ReconnectMax: 500 * time.Millisecond})

	b.stopApp(t)
	for _, d := range []time.Duration{0, time.Second} {
		ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
		start := time.Now()
		_, err := p.Publish(ctx, target, "k", textMsg("during"), d)
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("publish during the outage (delay %v): err = %v, want context.DeadlineExceeded", d, err)
		}
		// Never before its context ended; the upper bound only catches a hang.
		if e := time.Since(start); e < 1400*time.Millisecond || e > time.Minute {
			t.Errorf("publish during the outage returned after %v, want when its context ended (1.5 s)", e)
		}
	}
	// A publish that starts during the outage and has time goes through once the broker is back.
	done := make(chan error, 1)
	go func() {
		_, err := p.Publish(outageCtx(t), target, "k", textMsg("waited"), 0)
		done <- err
	}()
	// Started during the outage: the direct publish to a missing exchange waits for the
	// connection and is checked on it (ErrExchangeNotFound), so its 404 does not close the one
	// channel the waiting ladder publishes go out on.
	var wg sync.WaitGroup
	ladderErrs := make(chan error, 8)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := one.Publish(outageCtx(t), target, "k", textMsg("ladder, after the test"), time.Minute)
			ladderErrs <- err
		}()
	}
	missing := make(chan error, 1)
	go func() {
		_, err := one.Publish(outageCtx(t), "rdt-outage.missing", "k", textMsg("x"), 0)
		missing <- err
	}()
	time.Sleep(300 * time.Millisecond) // all waiting for the connection
	b.startApp(t)
	if err := <-done; err != nil {
		t.Errorf("publish waiting through the outage: %v", err)
	}
	if err := <-missing; !errors.Is(err, amqpdelay.ErrExchangeNotFound) {
		t.Errorf("direct publish to a missing exchange, started during the outage: err = %v, want ErrExchangeNotFound", err)
	}
	wg.Wait()
	close(ladderErrs)
	for err := range ladderErrs {
		if err != nil {
			t.Errorf("ladder publish waiting through the outage beside a direct publish to a missing exchange: %v", err)
		}
	}
	if _, err := p.Publish(pubCtx(t), target, "k", textMsg("after"), 2*time.Second); err != nil {
		t.Fatalf("publish after the broker came back: %v", err)
	}
	for _, want := range []string{"waited", "after"} {
		a := nextDelivery(t, got, 10*time.Second)
		checkOnTime(t, a)
		if string(a.d.Body) != want {
			t.Errorf("delivery %q, want %q", a.d.Body, want)
		}
	}
	noDelivery(t, got, 200*time.Millisecond) // the timed-out ones were never sent
	if !ev.has(amqpdelay.Disconnected) || !ev.has(amqpdelay.ReconnectFailed) || !ev.has(amqpdelay.Reconnected) {
		t.Errorf("reconnect events %+v: want disconnected, reconnect-failed and reconnected", ev.seen)
	}

	// A memory alarm blocks a connection once it publishes: direct publishes whose exchange
	// checks are blocked give up with their contexts, and once the alarm ends the check answers
	// and the blocked publish completes.
	alarm := func(w string) {
		if out, err := b.script(t, "ctl", "set_vm_memory_high_watermark", w); err != nil {
			t.Fatalf("set_vm_memory_high_watermark %s: %v\n%s", w, err, out)
		}
	}
	// Closed while the alarm blocks its connection: Close still returns, within its bounds (5 s
	// for the publish in flight, 5 s for the broker's answer). Not newPublisherURL: its clean-up
	// would count Close's error (the broker never answered) as a failure.
	ccfg := amqpdelay.Config{Prefix: restartSpec("rdt-outage").Prefix, Channels: 1}
	ccfg.URL = b.URL
	closing, err := amqpdelay.NewPublisher(pubCtx(t), ccfg)
	if err != nil {
		t.Fatal(err)
	}
	alarm("0.0000001")
	go func() { // blocks closing's connection
		_, _ = closing.Publish(pubCtx(t), target, "k", textMsg("ladder, in the alarm, closed"), time.Minute)
	}()
	restored := false
	defer func() {
		if !restored {
			alarm("0.4")
		}
	}()
	blocked := make(chan error, 1)
	go func() { // blocks the connection; waits through Close below and the alarm's end
		_, err := one.Publish(outageCtx(t), target, "k", textMsg("ladder, in the alarm"), time.Minute)
		blocked <- err
	}()
	// The alarm takes effect, and the two ladder publishes reach the broker, in their own time
	// (on a busy machine, seconds): until the broker has blocked both connections, a direct
	// publish's check is answered. The broker says when it has.
	for start := time.Now(); ; {
		out, err := b.script(t, "ctl", "list_connections", "state")
		if err != nil {
			t.Fatalf("list_connections: %v\n%s", err, out)
		}
		if strings.Count(out, "blocked") >= 2 {
			break
		}
		if time.Since(start) > 2*time.Minute { // a hang bound
			t.Fatalf("the memory alarm did not block the two publishing connections within 2 minutes:\n%s", out)
		}
		time.Sleep(100 * time.Millisecond)
	}
	for i := range 20 {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
		_, err := one.Publish(ctx, "rdt-outage.typo", "k", textMsg("x"), 0)
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("direct publish %d to a missing exchange in the alarm: err = %v, want the context's deadline", i, err)
		}
	}
	start := time.Now()
	cerr := closing.Close()
	// Close bounds its waits (5 s for publishes, 5 s for the connection); the bound here only
	// catches a Close that waits for the alarm's end.
	if took := time.Since(start); took > 90*time.Second {
		t.Errorf("Close of a Publisher whose connection the alarm blocks took %v: it waited for the alarm", took)
	}
	t.Logf("Close in the alarm: %v after %v", cerr, time.Since(start).Round(time.Millisecond))
	alarm("0.4")
	restored = true
	if err := <-blocked; err != nil {
		t.Errorf("ladder publish blocked by the alarm: %v", err)
	}
	if _, err := one.Publish(pubCtx(t), "rdt-outage.typo", "k", textMsg("x"), 0); !errors.Is(err, amqpdelay.ErrExchangeNotFound) {
		t.Errorf("direct publish to a missing exchange after the alarm: err = %v, want ErrExchangeNotFound", err)
	}
}

// outageCtx is the context of a publish that waits through a broker outage or a memory alarm
// until the test ends it: how long rabbitmqctl takes to do so on a busy machine (start_app 39 s,
// Close plus set_vm_memory_high_watermark over 30 s, under a load average of 35) is not what
// the test checks, so the context only bounds a hang.
func outageCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	t.Cleanup(cancel)
	return ctx
}
