//go:build integration

package integration

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
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

// attackCanaries runs 8 delayed and 8 direct victims beside bad() and reports what failed.
func attackCanaries(t *testing.T, p *amqpdelay.Publisher, target string, bad func() error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	delayed := startCanary(8, func() error {
		_, err := p.Publish(ctx, target, "v", textMsg("victim"), time.Minute)
		return err
	})
	direct := startCanary(8, func() error {
		_, err := p.Publish(ctx, target, "v", textMsg("victim"), 0)
		if errors.Is(err, amqpdelay.ErrUnroutable) {
			return nil
		}
		return err
	})
	time.Sleep(200 * time.Millisecond)
	err := bad()
	t.Logf("bad publish: err = %v", err)
	if errors.Is(err, amqpdelay.ErrConnectionLost) {
		t.Errorf("the bad publish, which the broker refused (nothing stored), got ErrConnectionLost: %v", err)
	}
	time.Sleep(200 * time.Millisecond)
	for _, c := range []struct {
		name string
		c    *canary
	}{{"delayed", delayed}, {"direct", direct}} {
		close(c.c.stop)
		c.c.wg.Wait()
		var first error
		if e := c.c.first.Load(); e != nil {
			first = *e
		}
		t.Logf("%s victims: %d ok, %d failed (first: %v)", c.name, c.c.sent.Load(), c.c.failed.Load(), first)
		if c.c.failed.Load() > 0 {
			t.Errorf("%d %s victims failed beside the bad publish (first: %v)", c.c.failed.Load(), c.name, first)
		}
	}
}

// TestPublisherNoWriteOnDelayExchange: a user who may write to the targets and the ladder but not
// to the buckets exchange; a bucket publish beside ladder publishes.
func TestPublisherNoWriteOnDelayExchange(t *testing.T) {
	env := brokertest.NewEnv(t)
	if env.Broker.ManagementURL == "" {
		t.Skip("management API")
	}
	target := env.Name("t")
	spec := testSpec(env, delayspec.Target{Name: target, Type: "topic"})
	spec.Buckets = delayspec.Delays{90 * time.Second}
	declareTopology(t, env, spec)
	user := env.Prefix + "-nobucket"
	if err := env.Broker.Management("PUT", "api/users/"+url.PathEscape(user), map[string]string{"password": "pw", "tags": ""}, nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Broker.Management("DELETE", "api/users/"+url.PathEscape(user), nil, nil) })
	perm := map[string]string{"configure": "^$", "write": `^(?!.*\.buckets$).*`, "read": ".*"}
	if err := env.Broker.Management("PUT", "api/permissions/"+url.PathEscape(env.VHost)+"/"+url.PathEscape(user), perm, nil); err != nil {
		t.Fatal(err)
	}
	u, _ := url.Parse(env.URL)
	u.User = url.UserPassword(user, "pw")
	p := newPublisherURL(t, u.String(), spec, amqpdelay.Config{Channels: 1})
	ctx := pubCtx(t)
	attackCanaries(t, p, target, func() error {
		r, err := p.Publish(ctx, target, "k", textMsg("bucket"), 90*time.Second)
		t.Logf("bucket publish path %v", r.Path)
		return err
	})
}

// atkCtl runs scripts/broker ctl ARGS on the broker of BROKER_STATE.
func atkCtl(t *testing.T, args ...string) {
	t.Helper()
	if out, ok := brokerCtl(t, args...); !ok {
		t.Fatalf("broker ctl %v failed: %s", args, out)
	}
}

// TestPublisherBodyLimitLoweredAcrossReconnect: the Publisher learnt that a 2 MiB body is fine;
// the broker it reconnects to has max_message_size 1 MiB (a lowered limit after a restart, or
// another node of a cluster). A 1.5 MiB delayed publish beside delayed victims is refused with
// ErrInvalidInput, and no victim fails. RabbitMQ 3.10 reads max_message_size at each new
// connection, 4.3 only when its application starts (seen on 4.3.6: a value lowered at run time
// took effect only after stop_app and start_app), so the test lowers it on a node of its own and
// restarts that node's application, which also makes the Publisher reconnect.
func TestPublisherBodyLimitLoweredAcrossReconnect(t *testing.T) {
	b := startPrivateBroker(t)
	prefix := "bodylimit"
	spec := restartSpec(prefix)
	target := spec.Targets[0].Name
	declareTopologyAt(t, b.URL, spec)
	var ev events
	p := newPublisherURL(t, b.URL, spec, amqpdelay.Config{Channels: 1, OnReconnect: ev.add, ReconnectMin: 50 * time.Millisecond, ReconnectMax: 500 * time.Millisecond})
	ctx := pubCtx(t)
	if _, err := p.Publish(ctx, target, "k", amqp.Publishing{Body: make([]byte, 2<<20)}, time.Minute); err != nil {
		t.Fatal(err)
	}
	if out, err := b.script(t, "ctl", "eval", "application:set_env(rabbit, max_message_size, 1048576)."); err != nil {
		t.Fatalf("scripts/broker ctl eval: %v\n%s", err, out)
	}
	b.stopApp(t)
	b.startApp(t)
	for i := 0; ev.count() < 2 && i < 300; i++ {
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("reconnect events: %d", ev.count())
	var badErr error
	attackCanaries(t, p, target, func() error {
		// A context of its own: the restart above can take longer than the first one's 30 s
		// on a loaded machine.
		_, badErr = p.Publish(pubCtx(t), target, "k", amqp.Publishing{Body: make([]byte, 1536<<10)}, time.Minute)
		return badErr
	})
	if !errors.Is(badErr, amqpdelay.ErrInvalidInput) || !strings.Contains(badErr.Error(), "max_message_size") {
		t.Errorf("1.5 MiB publish to a broker whose max_message_size is 1 MiB: err = %v, want ErrInvalidInput naming max_message_size", badErr)
	}
}

// TestPublisherCrashWhilePublishing: 8 goroutines publish delayed messages (1-6 s) while the
// broker is stopped (ATTACK_CRASH=stop-app: stop_app/start_app; kill: kill -9 and start-node 1);
// every confirmed message must arrive, none early, nothing that was never published.
func TestPublisherCrashWhilePublishing(t *testing.T) {
	mode := os.Getenv("ATTACK_CRASH")
	if mode == "" || os.Getenv("BROKER_STATE") == "" {
		t.Skip("ATTACK_CRASH and BROKER_STATE")
	}
	env := brokertest.NewEnv(t)
	target := env.Name("t")
	spec := testSpec(env, delayspec.Target{Name: target, Type: "topic"})
	spec.Buckets = delayspec.Delays{3 * time.Second}
	declareTopology(t, env, spec)
	rq := env.Name("ready")
	declareReadyQueue(t, env, rq, target, "k")
	got := resilientConsumer(t, env.URL, rq)
	p := newPublisher(t, env, spec, amqpdelay.Config{Channels: 2})
	var mu sync.Mutex
	confirmed := map[string]amqpdelay.Receipt{}
	unknown := map[string]bool{}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var seq atomic.Int64
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				id := fmt.Sprint(seq.Add(1))
				d := time.Second + time.Duration(seq.Load()%5000)*time.Millisecond
				if seq.Load()%7 == 0 {
					d = 3 * time.Second
				}
				ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
				r, err := p.Publish(ctx, target, "k", amqp.Publishing{MessageId: id, Body: []byte(id)}, d)
				cancel()
				mu.Lock()
				if err == nil {
					confirmed[id] = r
				} else {
					unknown[id] = true
				}
				mu.Unlock()
				if err != nil {
					time.Sleep(50 * time.Millisecond)
				}
			}
		}()
	}
	time.Sleep(2 * time.Second)
	switch mode {
	case "kill":
		atkScript(t, "kill", "1")
		time.Sleep(time.Second)
		atkScript(t, "start-node", "1")
	default:
		atkScript(t, "stop-app")
		time.Sleep(time.Second)
		atkScript(t, "start-app")
	}
	time.Sleep(3 * time.Second)
	close(stop)
	wg.Wait()
	mu.Lock()
	t.Logf("confirmed %d, errors %d", len(confirmed), len(unknown))
	mu.Unlock()
	seen := map[string]int{}
	deadline := time.After(90 * time.Second)
	early := 0
	for missing := len(confirmed); missing > 0; {
		select {
		case a := <-got:
			id := string(a.d.Body)
			seen[id]++
			if due, ok := amqpdelay.Due(a.d); ok && a.at.Before(due) {
				early++
				t.Errorf("%s early by %v", id, due.Sub(a.at))
			}
			if _, ok := confirmed[id]; ok && seen[id] == 1 {
				missing--
			} else if !unknown[id] && seen[id] == 1 {
				t.Errorf("delivered %s, never published", id)
			}
		case <-deadline:
			var miss []string
			for id := range confirmed {
				if seen[id] == 0 {
					miss = append(miss, id)
				}
			}
			t.Fatalf("%d confirmed messages missing after 90 s: %v; queues %v", len(miss), miss, queueStats(t, env))
		}
	}
	// drain a little more for duplicates and unknown outcomes
	drain := time.After(5 * time.Second)
loop:
	for {
		select {
		case a := <-got:
			seen[string(a.d.Body)]++
		case <-drain:
			break loop
		}
	}
	dups, unknownDelivered := 0, 0
	for id, n := range seen {
		if n > 1 {
			dups++
		}
		if unknown[id] {
			unknownDelivered++
		}
	}
	t.Logf("all %d confirmed delivered; %d duplicates; %d of %d errored publishes delivered anyway; early %d", len(confirmed), dups, unknownDelivered, len(unknown), early)
}

func atkScript(t *testing.T, args ...string) {
	t.Helper()
	cmd := exec.Command("../scripts/broker", args...)
	out, err := cmd.CombinedOutput()
	t.Logf("scripts/broker %v: %v %s", args, err, lastLine(string(out)))
	if err != nil {
		t.Fatalf("scripts/broker %v: %v\n%s", args, err, out)
	}
}
