//go:build integration

package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/redis/go-redis/v9"

	"github.com/delaykit/rabbitdelay/consumer"
)

// Consumer processes: the tests below start real OS processes, each running one
// consumer.Consumer with a RedisStore, by running this test binary again with procEnv set:
// TestMain then runs consumerProcMain instead of the tests. The processes share one Redis and
// record there what their handlers did, so the test counts effects across processes.

// procEnv carries a consumer process's procConfig (JSON).
const procEnv = "RABBITDELAY_TEST_CONSUMER_PROCESS"

// procConfig is one consumer process's settings.
type procConfig struct {
	Name     string   // connection name (the retry Publisher's is Name-retry)
	Config   procConn // the broker and topology
	Queue    string
	RedisURL string
	Store    string        // the RedisStore's key prefix, shared by the processes of a test
	Keys     string        // prefix of the keys the handler and observer write (below)
	Lease    time.Duration // consumer.Options.Lease
	Busy     time.Duration // consumer.Options.BusyDelay
	Grace    time.Duration // consumer.Options.ShutdownTimeout (negative: none)
	Work     time.Duration // the least time the handler of an "other" message takes (0: 5 ms); up to 5 times it
}

// The Redis keys a consumer process writes, under procConfig.Keys:
//
//	effects  hash id -> how often the handler made the message's effect (HINCRBY)
//	by       hash process name -> how many effects that process made
//	events   hash event kind -> how often the Consumer reported it
//	entered:<id>  the pid of the first handler to enter a kill-* or slow message (SET NX)
//	release  once set, the handler of "slow" makes its effect and returns
//
// What the handler does, by message id:
//
//	slow         first entry: waits for release, then the effect; later entries: the effect
//	kill-before  first entry: blocks (the test kills the process); later: the effect
//	kill-after   first entry: the effect, then blocks; later: the effect
//	other        waits Work to 5 x Work, 5-25 ms by default (returns ctx's error if it ends first: no
//	             effect), the effect
func consumerProcMain() int {
	var pc procConfig
	if err := json.Unmarshal([]byte(os.Getenv(procEnv)), &pc); err != nil {
		fmt.Fprintf(os.Stderr, "consumer process: %s: %v\n", procEnv, err)
		return 2
	}
	opt, err := redis.ParseURL(pc.RedisURL)
	if err != nil {
		fmt.Fprintf(os.Stderr, "consumer process: redis URL: %v\n", err)
		return 2
	}
	rdb := redis.NewClient(opt)
	defer rdb.Close()
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	go func() { // the test process died: stop at once
		_, _ = io.Copy(io.Discard, os.Stdin)
		os.Exit(3)
	}()
	pid := strconv.Itoa(os.Getpid())
	bg := func() (context.Context, context.CancelFunc) {
		return context.WithTimeout(context.Background(), 10*time.Second)
	}
	effect := func(id string) error {
		c, cancel := bg()
		defer cancel()
		if err := rdb.HIncrBy(c, pc.Keys+"effects", id, 1).Err(); err != nil {
			return err
		}
		_ = rdb.HIncrBy(c, pc.Keys+"by", pc.Name, 1).Err() // who: bookkeeping only
		return nil
	}
	first := func(id string) (bool, error) {
		c, cancel := bg()
		defer cancel()
		return rdb.SetNX(c, pc.Keys+"entered:"+id, pid, 0).Result()
	}
	h := func(ctx context.Context, d amqp.Delivery) error {
		id := d.MessageId
		switch id {
		case "slow", "kill-before", "kill-after":
			isFirst, err := first(id)
			if err != nil {
				return err
			}
			if !isFirst {
				return effect(id)
			}
			if id == "kill-after" {
				if err := effect(id); err != nil {
					return err
				}
			}
			for { // until killed, or (slow) released
				if id == "slow" {
					c, cancel := bg()
					n, err := rdb.Exists(c, pc.Keys+"release").Result()
					cancel()
					if err == nil && n == 1 {
						return effect(id)
					}
				}
				select {
				case <-ctx.Done():
					return ctx.Err()
				case <-time.After(50 * time.Millisecond):
				}
			}
		}
		work := pc.Work
		if work <= 0 {
			work = 5 * time.Millisecond
		}
		select {
		case <-time.After(work + rand.N(4*work)):
		case <-ctx.Done():
			return ctx.Err() // cancelled before the effect: nothing done
		}
		return effect(id)
	}
	observe := func(e consumer.Event) {
		c, cancel := bg()
		defer cancel()
		_ = rdb.HIncrBy(c, pc.Keys+"events", string(e.Kind), 1).Err()
	}
	c, err := consumer.New(pc.Config.config(), pc.Queue, h, consumer.Options{
		Store:           consumer.NewRedisStore(rdb, pc.Store),
		ConnectionName:  pc.Name,
		Concurrency:     8,
		Lease:           pc.Lease,
		Keep:            time.Hour,
		BusyDelay:       pc.Busy,
		ShutdownTimeout: pc.Grace,
		Observer:        observe,
	})
	if err != nil {
		fmt.Fprintf(os.Stderr, "consumer process: %v\n", err)
		return 2
	}
	if err := c.Run(ctx); err != nil {
		if ctx.Err() != nil && errors.Is(err, context.Canceled) {
			return 0 // SIGTERM before the first connection was made (a busy machine): nothing taken
		}
		fmt.Fprintf(os.Stderr, "consumer process: Run: %v\n", err)
		return 1
	}
	return 0
}

// consumerProc is a running consumer process.
type consumerProc struct {
	name string
	cmd  *exec.Cmd
	out  *lockedBuffer
	done chan struct{}
	err  error // Wait's, once done is closed
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// procRig is a test's consumer processes, their shared Redis keys and a client to read them.
type procRig struct {
	t     *testing.T
	f     *consumerFixture
	rdb   *redis.Client
	base  procConfig
	procs []*consumerProc
}

func newProcRig(t *testing.T, f *consumerFixture, lease, busy time.Duration) *procRig {
	t.Helper()
	u := os.Getenv("REDIS_URL")
	redisStore(t) // skips or fails the test without REDIS_URL, as the other Redis tests do
	opt, err := redis.ParseURL(u)
	if err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(opt)
	t.Cleanup(func() { _ = rdb.Close() })
	prefix := fmt.Sprintf("rdproc:%s:%d:", f.env.Prefix, time.Now().UnixNano())
	r := &procRig{t: t, f: f, rdb: rdb, base: procConfig{Config: connOf(f.cfg), Queue: f.work, RedisURL: u, Store: prefix + "store:",
		Keys: prefix, Lease: lease, Busy: busy, Grace: 5 * time.Second}}
	t.Cleanup(func() {
		for _, p := range r.procs {
			_ = p.cmd.Process.Kill()
			<-p.done
			if t.Failed() {
				t.Logf("output of %s:\n%s", p.name, p.out)
			}
		}
		c, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if keys, err := rdb.Keys(c, prefix+"*").Result(); err == nil && len(keys) > 0 {
			_ = rdb.Del(c, keys...).Err()
		}
	})
	return r
}

// start starts a consumer process with grace as its shutdown timeout.
func (r *procRig) start(grace time.Duration) *consumerProc {
	r.t.Helper()
	pc := r.base
	pc.Name = fmt.Sprintf("consumer-process-%d", len(r.procs))
	pc.Grace = grace
	js, err := json.Marshal(pc)
	if err != nil {
		r.t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), procEnv+"="+string(js))
	p := &consumerProc{name: pc.Name, cmd: cmd, out: &lockedBuffer{}, done: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = p.out, p.out
	if _, err := cmd.StdinPipe(); err != nil { // kept open: the process exits when this test binary dies
		r.t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		r.t.Fatalf("start %s: %v", pc.Name, err)
	}
	go func() { p.err = cmd.Wait(); close(p.done) }()
	r.procs = append(r.procs, p)
	return p
}

// stop sends sig to p and waits for it to exit. It may run on a goroutine of its own (it
// reports with Errorf).
func (r *procRig) stop(p *consumerProc, sig os.Signal) {
	r.t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil {
		r.t.Errorf("signal %s: %v", p.name, err)
		return
	}
	select {
	case <-p.done:
	case <-time.After(2 * time.Minute):
		r.t.Errorf("%s did not exit within 2 min of %v", p.name, sig)
		return
	}
	if sig == syscall.SIGTERM && p.err != nil {
		r.t.Errorf("%s after SIGTERM: %v (want a graceful exit 0)\n%s", p.name, p.err, p.out)
	}
}

// hash reads one of the processes' hashes (effects or events).
func (r *procRig) hash(name string) map[string]int {
	r.t.Helper()
	c, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	m, err := r.rdb.HGetAll(c, r.base.Keys+name).Result()
	if err != nil {
		r.t.Fatalf("redis HGETALL %s: %v", name, err)
	}
	out := make(map[string]int, len(m))
	for k, v := range m {
		out[k], _ = strconv.Atoi(v)
	}
	return out
}

func (r *procRig) effects(id string) int { return r.hash("effects")[id] }
func (r *procRig) events(k consumer.EventKind) int {
	return r.hash("events")[string(k)]
}

// entered returns the process whose handler entered id first, or nil.
func (r *procRig) entered(id string) *consumerProc {
	r.t.Helper()
	c, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	v, err := r.rdb.Get(c, r.base.Keys+"entered:"+id).Result()
	if err != nil {
		return nil
	}
	for _, p := range r.procs {
		if strconv.Itoa(p.cmd.Process.Pid) == v {
			return p
		}
	}
	r.t.Fatalf("entered:%s holds pid %s, not one of the consumer processes", id, v)
	return nil
}

// TestConsumerProcessesDuplicates: three consumer processes sharing a RedisStore (lease 10 s).
//   - One message id published twice: the effect happens once, the second copy is skipped.
//   - A message whose process loses its connection mid-handler (closed by the broker; the
//     handler goes on): the broker delivers it again to another process, which defers it while
//     the first holds the lease; the first makes the effect and marks it done; the copy is
//     skipped. Effect once.
//   - A process killed (SIGKILL) mid-handler before the effect: its lease is no longer renewed;
//     the redelivered copy is deferred until the lease expires, then handled once. Effect once.
//   - A process killed after the effect, before the Consumer marked it done: the copy runs again
//     after the lease expires, and the effect happens twice - the limit the consumer package's
//     Guarantees state (make such effects idempotent).
func TestConsumerProcessesDuplicates(t *testing.T) {
	t.Parallel()
	f := newConsumerFixture(t)
	r := newProcRig(t, f, 10*time.Second, 300*time.Millisecond)
	for range 3 {
		r.start(5 * time.Second)
	}
	f.publish(t, "dup", 20*time.Millisecond)
	f.publish(t, "dup", 20*time.Millisecond)
	waitFor(t, 2*time.Minute, "dup handled and its copy skipped", func() bool {
		return r.effects("dup") == 1 && r.events(consumer.Skipped) >= 1
	})

	f.publish(t, "slow", 0)
	var a *consumerProc
	waitFor(t, time.Minute, "slow entered a handler", func() bool { a = r.entered("slow"); return a != nil })
	closeConnection(t, f.env, a.name)
	waitFor(t, time.Minute, "the redelivered slow message deferred", func() bool { return r.events(consumer.Deferred) >= 1 })
	if n := r.effects("slow"); n != 0 {
		t.Fatalf("slow's effect happened %d times while %s's handler held it", n, a.name)
	}
	c, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := r.rdb.Set(c, r.base.Keys+"release", "1", 0).Err(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, time.Minute, "slow handled and its copy skipped", func() bool {
		return r.effects("slow") == 1 && r.events(consumer.Skipped) >= 2
	})

	deferred := r.events(consumer.Deferred)
	f.publish(t, "kill-before", 0)
	f.publish(t, "kill-after", 0)
	var kb, ka *consumerProc
	waitFor(t, time.Minute, "kill-before and kill-after entered handlers", func() bool {
		kb, ka = r.entered("kill-before"), r.entered("kill-after")
		return kb != nil && ka != nil && r.effects("kill-after") == 1
	})
	r.stop(kb, syscall.SIGKILL)
	if ka != kb {
		r.stop(ka, syscall.SIGKILL)
	}
	waitFor(t, 2*time.Minute, "the killed processes' messages handled after their leases expired", func() bool {
		return r.effects("kill-before") == 1 && r.effects("kill-after") == 2
	})
	time.Sleep(2 * time.Second) // a copy that would run once more has time to
	got := r.hash("effects")
	want := map[string]int{"dup": 1, "slow": 1, "kill-before": 1, "kill-after": 2}
	for id, n := range want {
		if got[id] != n {
			t.Errorf("effect of %s happened %d times, want %d", id, got[id], n)
		}
	}
	if r.events(consumer.Deferred) == deferred {
		t.Errorf("no copy of the killed processes' messages was deferred: their leases did not hold")
	}
	t.Logf("events of the processes: %v (killed %s and %s)", r.hash("events"), kb.name, ka.name)
}

// TestConsumerProcessesShutdownUnderLoad: 1,000 messages wait in the queue (a backlog, so that
// every process has handlers running and deliveries prefetched whenever it is stopped); three
// consumer processes sharing a RedisStore handle them (100-500 ms each: the effect, then return).
// Once every process has handled some and a quarter are done, one is stopped with SIGTERM (a
// graceful shutdown, 5 s grace); at half, one with no grace at all (SIGTERM, a negative
// shutdown timeout: its running handlers are cancelled and their messages given back, Requeued); at three
// quarters a fourth starts. Nothing is lost, no effect happens twice, and the no-grace stop
// gave messages back (else the test checked nothing of a shutdown under load).
func TestConsumerProcessesShutdownUnderLoad(t *testing.T) {
	t.Parallel()
	f := newConsumerFixture(t)
	r := newProcRig(t, f, 5*time.Second, 200*time.Millisecond)
	// Handlers of 100-500 ms: the no-grace stop cancels some mid-handler, even when the broker
	// takes a while to answer the Consumer's basic.cancel (running handlers go on meanwhile).
	r.base.Work = 100 * time.Millisecond
	const n = 1000
	f.publishLoad(t, n, "s", 20*time.Millisecond, nil)
	p1, p2 := r.start(5*time.Second), r.start(-1)
	p3 := r.start(5 * time.Second)
	waitFor(t, 3*time.Minute, "each of the three processes handled a message", func() bool {
		by := r.hash("by")
		return by[p1.name] > 0 && by[p2.name] > 0 && by[p3.name] > 0
	})
	var wg sync.WaitGroup
	stopAt := func(k int, p *consumerProc) {
		waitFor(t, 3*time.Minute, fmt.Sprintf("%d messages handled", k), func() bool { return len(r.hash("effects")) >= k })
		wg.Add(1)
		go func() { defer wg.Done(); r.stop(p, syscall.SIGTERM) }()
	}
	stopAt(n/4, p1)
	stopAt(n/2, p2)
	waitFor(t, 3*time.Minute, fmt.Sprintf("%d messages handled", 3*n/4), func() bool { return len(r.hash("effects")) >= 3*n/4 })
	r.start(5 * time.Second)
	waitFor(t, 3*time.Minute, fmt.Sprintf("%d messages handled", n), func() bool { return len(r.hash("effects")) == n })
	time.Sleep(2 * time.Second)
	var twice []string
	for id, k := range r.hash("effects") {
		if k != 1 {
			twice = append(twice, fmt.Sprintf("%s x%d", id, k))
		}
	}
	if len(twice) > 0 {
		t.Fatalf("%d effects happened more than once: %v", len(twice), twice[:min(10, len(twice))])
	}
	wg.Wait()
	if r.events(consumer.Requeued) == 0 {
		t.Errorf("no message was given back (Requeued): the no-grace shutdown had nothing running, so the test checked nothing of it")
	}
	t.Logf("%d handled once each across 4 processes; effects by process %v; events %v", n, r.hash("by"), r.hash("events"))
}
