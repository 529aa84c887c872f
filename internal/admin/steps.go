package admin

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/rs/zerolog"
)

// step is one AMQP operation (look up, declare, delete) on one object of a plan.
type step struct {
	kind Kind
	name string
	do   job
}

func rowKey(kind Kind, name string) string { return string(kind) + " " + name }

func (s step) key() string { return rowKey(s.kind, s.name) }

// runner runs the steps of one Apply or Teardown and keeps the report's rows up to date.
type runner struct {
	ctx     context.Context
	conn    *amqp.Connection
	workers int
	log     zerolog.Logger
	op      string // "declare" or "teardown", for the error when ctx ends
	rep     *Report
	rows    map[string]int // rowKey → index in rep.Results
}

func (r *runner) add(res Result) {
	r.rows[rowKey(res.Kind, res.Name)] = len(r.rep.Results)
	r.rep.Results = append(r.rep.Results, res)
}

func (r *runner) row(s step) *Result { return &r.rep.Results[r.rows[s.key()]] }

func (r *runner) look(steps []step) ([]error, error) {
	return runJobs(r.ctx, r.conn, r.workers, false, jobsOf(steps))
}

// run runs one phase, no step starting once one failed: each step that succeeds gets state
// done in its row; run returns what fail returns for the first failure.
func (r *runner) run(steps []step, done State, fail func(row *Result, err error) error) error {
	errs, err := r.runPhase(steps)
	if err != nil {
		return err
	}
	for i, s := range steps {
		if errs[i] == nil {
			r.row(s).State = done
			r.log.Debug().Str("kind", string(s.kind)).Str("name", s.name).Msg(string(done))
		}
	}
	if k, e := firstErr(errs); e != nil {
		return fail(r.row(steps[k]), e)
	}
	return nil
}

func (r *runner) runPhase(steps []step) ([]error, error) {
	errs, err := runJobs(r.ctx, r.conn, r.workers, true, jobsOf(steps))
	if err != nil {
		return nil, fmt.Errorf("topology: %s: %w", r.op, err)
	}
	return errs, nil
}

func jobsOf(steps []step) []job {
	jobs := make([]job, len(steps))
	for i, s := range steps {
		jobs[i] = s.do
	}
	return jobs
}

// runUnrecorded runs steps that have no rows, as run does, wrapping the first failure with
// what (e.g. "declare") and its object.
func (r *runner) runUnrecorded(steps []step, what string) error {
	errs, err := r.runPhase(steps)
	if err != nil {
		return err
	}
	if k, e := firstErr(errs); e != nil {
		return wrapBroker(e, fmt.Sprintf("%s %s %q", what, steps[k].kind, steps[k].name))
	}
	for _, s := range steps {
		r.log.Debug().Str("kind", string(s.kind)).Str("name", s.name).Msg(what)
	}
	return nil
}

// planObject is an exchange or queue of a plan; its step declares it.
type planObject struct {
	step
	typ    string // the exchange type
	args   amqp.Table
	plugin bool // the delayed-message plugin's exchange
}

// objectsOf lists p's exchanges, then queues; a queue with a Slot is declared through
// nodes[Slot mod len(nodes)] when nodes are given.
func objectsOf(p *Plan, nodes []*amqp.Connection) []planObject {
	var objects []planObject
	for _, e := range p.Exchanges {
		decl := func(ch *amqp.Channel) error {
			return ch.ExchangeDeclare(e.Name, e.Type, true, false, false, false, e.Args)
		}
		objects = append(objects, planObject{step{KindExchange, e.Name, decl}, e.Type, e.Args, e.Role == RolePlugin})
	}
	for _, q := range p.Queues {
		decl := func(ch *amqp.Channel) error {
			_, err := ch.QueueDeclare(q.Name, true, false, false, false, q.Args)
			return err
		}
		if q.Slot >= 0 && len(nodes) > 0 {
			decl = declareQueueOn(q, nodes[q.Slot%len(nodes)])
		}
		objects = append(objects, planObject{step: step{KindQueue, q.Name, decl}, args: q.Args})
	}
	return objects
}

// survey finds, with passive declarations, which of p's objects (objectsOf) exist, by key.
func survey(r *runner, p *Plan, objects []planObject) (map[string]bool, error) {
	l, err := lookUp(r.ctx, r.conn, p, r.workers)
	if err != nil {
		return nil, fmt.Errorf("topology: look up existing objects: %w", err)
	}
	ok, err := found(l.errs, func(i int) string { return fmt.Sprintf("look up %s %q", objects[i].kind, objects[i].name) })
	exists := map[string]bool{}
	for i, o := range objects {
		exists[o.key()] = err == nil && ok[i]
	}
	return exists, err
}

// declareQueueOn declares q on a channel of its own on conn, the node that is to lead q.
func declareQueueOn(q Queue, conn *amqp.Connection) job {
	return func(*amqp.Channel) error {
		ch, err := conn.Channel()
		if err != nil {
			return fmt.Errorf("topology: open channel to place queue %q: %w", q.Name, err)
		}
		defer ch.Close()
		_, err = ch.QueueDeclare(q.Name, true, false, false, false, q.Args)
		return err
	}
}

// DefaultWorkers is the number of channels Apply, Status and Teardown use in parallel when
// their options say 0 (docs/benchmarks.md).
const DefaultWorkers = 8

type job func(ch *amqp.Channel) error

// runJobs runs jobs on up to workers channels of conn and returns each job's error, by index.
// With stopOnError no job starts after one failed (errSkipped). It returns ctx.Err() as soon
// as ctx ends; operations in flight then finish in the background (amqp091 takes no context).
func runJobs(ctx context.Context, conn *amqp.Connection, workers int, stopOnError bool, jobs []job) ([]error, error) {
	errs := make([]error, len(jobs))
	if workers <= 0 {
		workers = DefaultWorkers
	}
	var mu sync.Mutex
	next, failed := 0, false
	take := func() (int, bool) {
		mu.Lock()
		defer mu.Unlock()
		for ; next < len(jobs); next++ {
			if (stopOnError && failed) || ctx.Err() != nil {
				errs[next] = errSkipped
				continue
			}
			next++
			return next - 1, true
		}
		return 0, false
	}
	record := func(i int, err error) {
		mu.Lock()
		errs[i], failed = err, true
		mu.Unlock()
	}
	var wg sync.WaitGroup
	for range min(workers, len(jobs)) {
		wg.Go(func() {
			var ch *amqp.Channel
			defer func() {
				if ch != nil {
					_ = ch.Close()
				}
			}()
			for i, ok := take(); ok; i, ok = take() {
				if ch == nil || ch.IsClosed() {
					var err error
					if ch, err = conn.Channel(); err != nil {
						ch = nil
						record(i, fmt.Errorf("topology: open channel: %w", err))
						continue
					}
				}
				if err := jobs[i](ch); err != nil {
					record(i, err)
					// Any broker refusal closes the channel; start the next job on a new one.
					_ = ch.Close()
					ch = nil
				}
			}
		})
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return errs, nil
}

// errSkipped marks a job that did not run because an earlier one failed or ctx ended.
var errSkipped = errors.New("topology: skipped after an earlier failure")

// firstErr returns the first error of errs, preferring one that is not errSkipped, and its index.
func firstErr(errs []error) (int, error) {
	i := slices.IndexFunc(errs, func(e error) bool { return e != nil && e != errSkipped })
	if i < 0 {
		i = slices.IndexFunc(errs, func(e error) bool { return e != nil })
	}
	if i < 0 {
		return -1, nil
	}
	return i, errs[i]
}
