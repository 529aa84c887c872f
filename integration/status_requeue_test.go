//go:build integration

package integration

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/delaykit/rabbitdelay/integration/brokertest"
	"github.com/delaykit/rabbitdelay/internal/admin"
	"github.com/delaykit/rabbitdelay/internal/delayspec"
)

// TestStatusRequeueLoop: a plain consumer of a ready queue that gives one message back with
// requeue, over and over, is reported by Status exactly when no delivery limit ends the loop:
//
//   - quorum, basic.nack: on RabbitMQ 4.3+ a requeue loop (cause nack-not-counted: the
//     delivery limit does not count nacks, rabbitmq-server PR #15387), status fails naming the
//     queue and what to do; before 4.3 the limit parks the message and status reports no loop;
//   - quorum, basic.reject: parked at the limit on every version, no loop;
//   - classic (no delivery limit), basic.nack: a loop on every version (cause classic);
//   - a reader of the parking queue (quorum), basic.nack: a loop on every version (cause
//     parking: that queue has no delivery limit, so that nothing parked is dropped).
//
// What the management API shows for the loop, checked on 4.3.6 and 3.10.8 before the rule
// was written: redeliver rate = deliver rate (hundreds to thousands a second), ack rate 0, the
// message held (messages 1). Status sees it after the management API's next statistics
// samples, so the test polls (up to 90 s) instead of timing anything.
func TestStatusRequeueLoop(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name    string
		qt      delayspec.QueueType
		reject  bool
		parking bool // the reader reads the parking queue, not the ready queue
	}{
		{"quorum-nack", delayspec.Quorum, false, false},
		{"quorum-reject", delayspec.Quorum, true, false},
		{"classic-nack", delayspec.Classic, false, false},
		{"parking-nack", delayspec.Quorum, false, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			env := brokertest.NewEnv(t)
			m := topoNeedManagement(t, env)
			spec := polSpec(c.qt)
			spec.Prefix = env.Prefix
			spec.Targets = delayspec.Targets{{Name: env.Name("orders"), Type: "topic"}}
			ready := env.Name("ready")
			spec.ReadyQueues = delayspec.ReadyQueues{{Queue: ready, Exchange: env.Name("orders"), BindingKey: "k"}}
			spec.ReadyDeliveryLimit = 3
			p, _, err := polApply(t, env, m, spec)
			if err != nil {
				t.Fatal(err)
			}
			conn := env.Dial(t)
			version := admin.ServerVersion(conn)
			ch := env.Channel(t)
			looped := ready
			if c.parking { // a parked message, put straight into the parking queue
				looped = p.Names.Parking()
				err = ch.Publish("", looped, false, false, amqp.Publishing{Body: []byte("parked")})
			} else {
				err = ch.Publish(env.Name("orders"), "k", false, false, amqp.Publishing{Body: []byte("poison")})
			}
			if err != nil {
				t.Fatal(err)
			}
			// The plain consumer: every delivery goes back with requeue.
			cctx, stop := context.WithCancel(context.Background())
			defer stop()
			cch := env.Channel(t)
			dels, err := cch.Consume(looped, "", false, false, false, false, nil)
			if err != nil {
				t.Fatal(err)
			}
			go func() {
				for {
					select {
					case d, ok := <-dels:
						if !ok {
							return
						}
						if c.reject {
							_ = d.Reject(true)
						} else {
							_ = d.Nack(false, true)
						}
					case <-cctx.Done():
						return
					}
				}
			}()

			wantLoop := ""
			switch {
			case c.parking:
				wantLoop = admin.CauseParking
			case c.qt == delayspec.Classic:
				wantLoop = admin.CauseClassic
			case !c.reject && strings.HasPrefix(version, "4.") && !strings.HasPrefix(version, "4.0") &&
				!strings.HasPrefix(version, "4.1") && !strings.HasPrefix(version, "4.2"):
				wantLoop = admin.CauseNackNotCounted
			}
			deadline := time.Now().Add(90 * time.Second)
			var rep *admin.StatusReport
			for {
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				rep, err = admin.Status(ctx, conn, p, admin.StatusOptions{Management: m})
				cancel()
				if rep == nil {
					t.Fatal(err)
				}
				done := false
				if wantLoop != "" {
					done = len(rep.RequeueLoops) > 0
				} else { // parked at the limit: the parking queue holds it and the ready queue is empty
					park := rep.Parking()
					done = park.Messages == 1 && readyMessages(rep, ready) == 0
				}
				if done || time.Now().After(deadline) {
					break
				}
				time.Sleep(2 * time.Second)
			}
			stop()
			t.Logf("RabbitMQ %s, %s: %d requeue loops %+v, parking %d; err %v", version, c.name, len(rep.RequeueLoops),
				rep.RequeueLoops, rep.Parking().Messages, err)
			if wantLoop == "" {
				if len(rep.RequeueLoops) != 0 || (err != nil && strings.Contains(err.Error(), "requeue loop")) {
					t.Errorf("RabbitMQ %s, %s: a requeue loop reported where the delivery limit parks the message: %+v, %v",
						version, c.name, rep.RequeueLoops, err)
				}
				if rep.Parking().Messages != 1 {
					t.Errorf("RabbitMQ %s, %s: parking holds %d, want the message parked at the limit", version, c.name, rep.Parking().Messages)
				}
				return
			}
			if len(rep.RequeueLoops) != 1 || rep.RequeueLoops[0].Queue != looped || rep.RequeueLoops[0].Cause != wantLoop {
				t.Fatalf("RabbitMQ %s, %s: requeue loops %+v, want %s with cause %s", version, c.name, rep.RequeueLoops, looped, wantLoop)
			}
			kind, advice := "ready", p.Names.Parking()
			if c.parking {
				kind, advice = "parking", "cancel the reader's consumer"
			}
			if want := fmt.Sprintf("requeue loop in %s queue %s", kind, looped); err == nil || !strings.Contains(err.Error(), want) ||
				!strings.Contains(err.Error(), advice) {
				t.Errorf("RabbitMQ %s, %s: status error %v, want %q with the advice (%q)", version, c.name, err, want, advice)
			}
		})
	}
}

// readyMessages is the messages a ready queue holds in rep (management API), -1 when unknown.
func readyMessages(rep *admin.StatusReport, name string) int64 {
	for _, q := range rep.Queues {
		if q.Name == name {
			return q.Messages
		}
	}
	return -1
}
