package admin

import (
	"context"
	"fmt"

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

func newRunner(ctx context.Context, conn *amqp.Connection, workers int, log zerolog.Logger, op string, rep *Report) *runner {
	return &runner{ctx: ctx, conn: conn, workers: workers, log: log, op: op, rep: rep, rows: map[string]int{}}
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
