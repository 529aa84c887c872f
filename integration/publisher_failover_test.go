//go:build integration

package integration

import (
	"context"
	"testing"
	"time"

	"github.com/delaykit/rabbitdelay/amqpdelay"
)

// TestPublisherFailover: a Publisher given an address list of two brokers (standing in for two
// nodes of a cluster: same vhost, same topology) keeps publishing while either is down, and a
// Publish that waits through an outage of both resumes once one of them answers again.
func TestPublisherFailover(t *testing.T) {
	t.Parallel()
	a, b := startPrivateBroker(t), startPrivateBroker(t)
	spec := restartSpec("rdt-failover")
	declareTopologyAt(t, a.URL, spec)
	declareTopologyAt(t, b.URL, spec)
	gotA := resilientConsumer(t, a.URL, "rdt-failover.ready")
	gotB := resilientConsumer(t, b.URL, "rdt-failover.ready")
	ev := &events{}
	p := newPublisherURL(t, a.URL+","+b.URL, spec, amqpdelay.Config{OnReconnect: ev.add, ReconnectMin: 50 * time.Millisecond, ReconnectMax: time.Second})
	target := spec.Targets[0].Name

	publish := func(what string) {
		t.Helper()
		if _, err := p.Publish(pubCtx(t), target, "k", textMsg(what), 500*time.Millisecond); err != nil {
			t.Fatalf("publish %s: %v", what, err)
		}
	}
	arrived := func(what string) {
		t.Helper()
		select {
		case r := <-gotA:
			checkOnTime(t, r)
		case r := <-gotB:
			checkOnTime(t, r)
		case <-time.After(maxLateness + 10*time.Second):
			t.Fatalf("%s never arrived", what)
		}
	}
	publish("first")
	arrived("first")

	// Each node down in turn: the Publisher goes on through the other.
	for i, down := range []*privateBroker{a, b} {
		down.stopApp(t)
		publish("one node down")
		arrived("one node down")
		down.startApp(t)
		t.Logf("round %d: events %d", i, ev.count())
	}

	// Both down: a Publish waits, and resumes when one node answers.
	a.stopApp(t)
	b.stopApp(t)
	done := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		_, err := p.Publish(ctx, target, "k", textMsg("waited"), 500*time.Millisecond)
		done <- err
	}()
	time.Sleep(2 * time.Second)
	select {
	case err := <-done:
		t.Fatalf("Publish returned with both nodes down: %v", err)
	default:
	}
	b.startApp(t)
	back := time.Now()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Publish waiting through the outage: %v", err)
		}
		t.Logf("the waiting Publish was confirmed %v after one node came back", time.Since(back))
	case <-time.After(2 * time.Minute):
		t.Fatal("the waiting Publish never went through after a node came back")
	}
	arrived("waited")
	a.startApp(t)
	if !ev.has(amqpdelay.Disconnected) || !ev.has(amqpdelay.Reconnected) {
		t.Errorf("reconnect events %+v: want disconnected and reconnected", ev.seen)
	}
}
