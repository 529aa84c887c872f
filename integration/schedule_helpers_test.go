//go:build integration

package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/rs/zerolog"

	"github.com/delaykit/rabbitdelay/amqpdelay"
	"github.com/delaykit/rabbitdelay/integration/brokertest"
	"github.com/delaykit/rabbitdelay/internal/delayspec"
	"github.com/delaykit/rabbitdelay/schedule"
)

// Scheduler processes: like the consumer processes (consumer_proc_test.go), the schedule tests
// run this test binary again with schedProcEnv set; init below then runs one Scheduler (Declare,
// then Run) until SIGTERM, SIGKILL or the end of the test binary (its stdin closes).

const schedProcEnv = "RABBITDELAY_TEST_SCHEDULE_PROCESS"

type schedProcConfig struct {
	Instance string
	Config   procConn // the broker and topology (amqpdelay.Config's func fields do not marshal)
	Schedule schedule.Schedule
	// DeclareAt, when set, is the instant the process calls Declare (after New): processes
	// given the same instant declare at the same moment. The process then prints
	// "declared <RFC 3339 time Declare returned>".
	DeclareAt time.Time
}

// procConn is the part of an amqpdelay.Config that a consumer or scheduler process reads,
// in a form that marshals to JSON.
type procConn struct{ URL, TLSCA, TLSCert, TLSKey, Prefix string }

func connOf(c amqpdelay.Config) procConn {
	return procConn{URL: c.URL, TLSCA: c.TLSCA, TLSCert: c.TLSCert, TLSKey: c.TLSKey, Prefix: c.Prefix}
}

func (c procConn) config() amqpdelay.Config {
	return amqpdelay.Config{URL: c.URL, TLSCA: c.TLSCA, TLSCert: c.TLSCert, TLSKey: c.TLSKey, Prefix: c.Prefix}
}

func init() {
	if os.Getenv(schedProcEnv) != "" {
		os.Exit(schedProcMain())
	}
}

func schedProcMain() int {
	var pc schedProcConfig
	if err := json.Unmarshal([]byte(os.Getenv(schedProcEnv)), &pc); err != nil {
		fmt.Fprintf(os.Stderr, "schedule process: %v\n", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		os.Exit(3)
	}()
	var s *schedule.Scheduler
	for ctx.Err() == nil { // the broker (a cluster node) may be down at start
		c, cancel := context.WithTimeout(ctx, 20*time.Second)
		var err error
		s, err = schedule.New(c, pc.Config.config(), schedule.Options{Instance: pc.Instance})
		if err == nil {
			time.Sleep(time.Until(pc.DeclareAt))
			err = s.Declare(c, pc.Schedule)
			if err != nil {
				_ = s.Close()
			} else if !pc.DeclareAt.IsZero() {
				fmt.Fprintf(os.Stderr, "declared %s\n", time.Now().Format(time.RFC3339Nano))
			}
		}
		cancel()
		if err == nil {
			break
		}
		fmt.Fprintf(os.Stderr, "schedule process %s: start: %v\n", pc.Instance, err)
		time.Sleep(time.Second)
	}
	if s == nil {
		return 0
	}
	defer s.Close()
	fmt.Fprintf(os.Stderr, "schedule process %s: running\n", pc.Instance)
	if err := s.Run(ctx); err != nil {
		fmt.Fprintf(os.Stderr, "schedule process %s: Run: %v\n", pc.Instance, err)
		return 1
	}
	return 0
}

// schedFixture is a test's delay topology with one target exchange and a ready queue bound to
// it with "#", which a plain AMQP consumer (occurrenceLog) reads.
type schedFixture struct {
	env    *brokertest.Env
	spec   delayspec.Spec
	cfg    amqpdelay.Config
	target string
	queue  string
}

func newSchedFixture(t *testing.T) *schedFixture {
	t.Helper()
	env := brokertest.NewEnv(t)
	if env.VHost == "/" {
		t.Skip("the schedule tests need the management API (a vhost of their own): set AMQP_MANAGEMENT_URL")
	}
	f := &schedFixture{env: env, target: env.Name("billing"), queue: env.Name("bills")}
	f.spec = testSpec(env, delayspec.Target{Name: f.target, Type: "topic"})
	f.spec.ReadyQueues = delayspec.ReadyQueues{{Queue: f.queue, Exchange: f.target, BindingKey: "#"}}
	declareTopology(t, env, f.spec)
	f.cfg = amqpdelay.Config{URL: env.URL, Prefix: f.spec.Prefix}
	return f
}

func (f *schedFixture) schedule(name string, every time.Duration) schedule.Schedule {
	return schedule.Schedule{Name: name, Interval: every, Exchange: f.target, RoutingKey: "bill.run",
		Message: amqp.Publishing{ContentType: "text/plain", Body: []byte("v1"), Headers: amqp.Table{"job": "billing"}}}
}

// newScheduler starts an in-process Scheduler (closed at the end of the test).
func (f *schedFixture) newScheduler(t *testing.T, instance string) *schedule.Scheduler {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	s, err := schedule.New(ctx, f.cfg, schedule.Options{Instance: instance, Logger: zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.DebugLevel)})
	if err != nil {
		t.Fatalf("schedule.New: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// runScheduler runs s.Run until the returned stop is called (stop waits for Run to return).
func runScheduler(t *testing.T, s *schedule.Scheduler) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = s.Run(ctx) }()
	var once sync.Once
	stop = func() { once.Do(func() { cancel(); <-done }) }
	t.Cleanup(stop)
	return stop
}

// delivery is one occurrence as a plain AMQP consumer of the ready queue received it.
type delivery struct {
	id      string
	at      time.Time // the occurrence's time, from its id
	arrived time.Time
	body    string
	late    int64
	missed  int64
	by      string
}

// occurrenceLog is a plain AMQP consumer of a queue that keeps every delivery.
type occurrenceLog struct {
	mu   sync.Mutex
	list []delivery
	bad  []string
}

func consumeOccurrences(t *testing.T, url, queue string) *occurrenceLog {
	return consumeOccurrencesAt(t, []string{url}, queue)
}

// consumeOccurrencesAt consumes queue through urls, the next one after each connection loss.
func consumeOccurrencesAt(t *testing.T, urls []string, queue string) *occurrenceLog {
	t.Helper()
	l := &occurrenceLog{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	t.Cleanup(func() { cancel(); <-done })
	go func() {
		defer close(done)
		for i := 0; ctx.Err() == nil; i++ { // reconnects (the cluster test kills nodes)
			l.consume(ctx, urls[i%len(urls)], queue)
			select {
			case <-ctx.Done():
			case <-time.After(500 * time.Millisecond):
			}
		}
	}()
	return l
}

func (l *occurrenceLog) consume(ctx context.Context, url, queue string) {
	conn, err := amqp.DialConfig(url, amqp.Config{Dial: amqp.DefaultDial(5 * time.Second), Heartbeat: 2 * time.Second})
	if err != nil {
		return
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		return
	}
	ds, err := ch.ConsumeWithContext(ctx, queue, "", false, false, false, false, nil)
	if err != nil {
		return
	}
	for d := range ds {
		now := time.Now()
		x := delivery{id: d.MessageId, arrived: now, body: string(d.Body)}
		_, at, err := schedule.ParseOccurrenceID(d.MessageId)
		l.mu.Lock()
		if err != nil || d.Headers[schedule.OccurrenceHeader] != d.MessageId {
			l.bad = append(l.bad, fmt.Sprintf("id %q header %v", d.MessageId, d.Headers[schedule.OccurrenceHeader]))
		}
		x.at = at
		x.late, _ = d.Headers[schedule.LateHeader].(int64)
		x.missed, _ = d.Headers[schedule.MissedHeader].(int64)
		x.by, _ = d.Headers[schedule.InstanceHeader].(string)
		l.list = append(l.list, x)
		l.mu.Unlock()
		_ = d.Ack(false)
	}
}

func (l *occurrenceLog) all() []delivery {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]delivery(nil), l.list...)
}

func (l *occurrenceLog) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.list)
}

// check reports duplicates (by id), early deliveries, and, for an interval schedule, every
// occurrence between the first and the last delivered that is missing.
func (l *occurrenceLog) check(t *testing.T, every time.Duration) (distinct int) {
	t.Helper()
	distinct, _ = l.verify(t, every, t.Errorf)
	return distinct
}

// verify is check with duplicates reported through dup (t.Errorf fails them, t.Logf only
// logs them); it also returns how many ids were delivered more than once.
func (l *occurrenceLog) verify(t *testing.T, every time.Duration, dup func(format string, args ...any)) (distinct, dups int) {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, b := range l.bad {
		t.Errorf("occurrence without a matching id and %s header: %s", schedule.OccurrenceHeader, b)
	}
	seen := map[string]int{}
	var first, last time.Time
	for _, d := range l.list {
		seen[d.id]++
		if d.arrived.Before(d.at) {
			t.Errorf("occurrence %s arrived %v early", d.id, d.at.Sub(d.arrived))
		}
		if first.IsZero() || d.at.Before(first) {
			first = d.at
		}
		if d.at.After(last) {
			last = d.at
		}
	}
	for id, n := range seen {
		if n > 1 {
			dups++
			dup("occurrence %s delivered %d times", id, n)
		}
	}
	if every > 0 && !first.IsZero() {
		name, _, _ := schedule.ParseOccurrenceID(l.list[0].id)
		for at := first; !at.After(last); at = at.Add(every) {
			if seen[schedule.OccurrenceID(name, at)] == 0 {
				t.Errorf("occurrence %s never delivered", schedule.OccurrenceID(name, at))
			}
		}
	}
	return len(seen), dups
}

// schedProc is a running scheduler process.
type schedProc struct {
	name string
	cmd  *exec.Cmd
	out  *lockedBuffer
	done chan struct{}
}

func startSchedProc(t *testing.T, pc schedProcConfig) *schedProc {
	t.Helper()
	js, err := json.Marshal(pc)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), schedProcEnv+"="+string(js))
	p := &schedProc{name: pc.Instance, cmd: cmd, out: &lockedBuffer{}, done: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = p.out, p.out
	if _, err := cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", pc.Instance, err)
	}
	go func() { _ = cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		_ = p.cmd.Process.Kill()
		<-p.done
		if t.Failed() {
			t.Logf("output of %s:\n%s", p.name, p.out)
		}
	})
	return p
}

// declared returns when the process's Declare returned (its "declared" line; false: none yet).
func (p *schedProc) declared() (time.Time, bool) {
	for _, line := range strings.Split(p.out.String(), "\n") {
		if s, ok := strings.CutPrefix(line, "declared "); ok {
			at, err := time.Parse(time.RFC3339Nano, s)
			return at, err == nil
		}
	}
	return time.Time{}, false
}

func (p *schedProc) kill() {
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
}
