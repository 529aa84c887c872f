package admin

import (
	"context"
	"fmt"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/rs/zerolog"
)

// step is one AMQP operation (look up, declare, delete) on one object of a plan. Apply and
// Teardown express each of their phases as a list of steps that a [runner] runs.
type step struct {
	kind Kind
	name string
	do   job
}

// rowKey names an object of the report: its kind and name.
func rowKey(kind Kind, name string) string { return string(kind) + " " + name }

func (s step) key() string { return rowKey(s.kind, s.name) }

// runner runs the phases of one Apply or Teardown on up to workers channels of conn, and
// keeps the report's rows (one per object, found by kind and name) up to date.
type runner struct {
	ctx     context.Context
	conn    *amqp.Connection
	workers int
	log     zerolog.Logger
	// op names the operation in the error returned when ctx ends ("declare", "teardown").
	op   string
	rep  *Report
	rows map[string]int // rowKey → index in rep.Results
}

func newRunner(ctx context.Context, conn *amqp.Connection, workers int, log zerolog.Logger, op string, rep *Report) *runner {
	return &runner{ctx: ctx, conn: conn, workers: workers, log: log, op: op, rep: rep, rows: map[string]int{}}
}

// add appends the row of one object to the report.
func (r *runner) add(res Result) {
	r.rows[rowKey(res.Kind, res.Name)] = len(r.rep.Results)
	r.rep.Results = append(r.rep.Results, res)
}

// row returns the report's row of the object of s.
func (r *runner) row(s step) *Result { return &r.rep.Results[r.rows[s.key()]] }

// look runs every step, whatever the others return, and returns each step's error in the
// order of steps (nil: it succeeded), or ctx.Err() when ctx ends.
func (r *runner) look(steps []step) ([]error, error) {
	return runJobs(r.ctx, r.conn, r.workers, false, jobsOf(steps))
}

// run runs one phase: no step starts once one has failed. Each step that succeeds gets state
// done in its row; the first failure is handed to fail with its row, and run returns what
// fail returns.
func (r *runner) run(steps []step, done State, fail func(row *Result, err error) error) error {
	errs, err := runJobs(r.ctx, r.conn, r.workers, true, jobsOf(steps))
	if err != nil {
		return fmt.Errorf("topology: %s: %w", r.op, err)
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

func jobsOf(steps []step) []job {
	jobs := make([]job, len(steps))
	for i, s := range steps {
		jobs[i] = s.do
	}
	return jobs
}

// runUnrecorded runs steps that have no rows in the report, as run does (apply's second
// declare of a queue deleted right after the first); the first failure is returned wrapped
// with what (the operation, e.g. "declare") and its object.
func (r *runner) runUnrecorded(steps []step, what string) error {
	errs, err := runJobs(r.ctx, r.conn, r.workers, true, jobsOf(steps))
	if err != nil {
		return fmt.Errorf("topology: %s: %w", r.op, err)
	}
	if k, e := firstErr(errs); e != nil {
		return wrapBroker(e, fmt.Sprintf("%s %s %q", what, steps[k].kind, steps[k].name))
	}
	for _, s := range steps {
		r.log.Debug().Str("kind", string(s.kind)).Str("name", s.name).Msg(what)
	}
	return nil
}
