package admin

import (
	"context"
	"errors"
	"fmt"
	"sync"

	amqp "github.com/rabbitmq/amqp091-go"
)

// DefaultWorkers is the number of channels Apply, Status and Teardown use in parallel when
// their options say 0. Declaring a quorum queue costs the broker noticeable work; several
// channels overlap it (docs/benchmarks.md).
const DefaultWorkers = 8

// job is one AMQP operation on a channel. A job whose error closed the channel (any broker
// refusal does) gets the next job a fresh channel.
type job func(ch *amqp.Channel) error

// runJobs runs jobs on up to workers channels of conn and returns each job's error, by
// index. When stopOnError is set, no job starts after one has failed (those are reported
// with errSkipped). It returns ctx.Err() as soon as ctx ends: amqp091's declare methods take
// no context, so an operation in flight then finishes (or fails) in the background when the
// broker answers or the connection closes.
func runJobs(ctx context.Context, conn *amqp.Connection, workers int, stopOnError bool, jobs []job) ([]error, error) {
	errs := make([]error, len(jobs))
	if len(jobs) == 0 {
		return errs, ctx.Err()
	}
	if workers <= 0 {
		workers = DefaultWorkers
	}
	workers = min(workers, len(jobs))
	var (
		mu     sync.Mutex
		next   int
		failed bool
	)
	take := func() (int, bool) {
		mu.Lock()
		defer mu.Unlock()
		if next >= len(jobs) {
			return 0, false
		}
		i := next
		next++
		if (stopOnError && failed) || ctx.Err() != nil {
			errs[i] = errSkipped
			return i, true
		}
		return i, true
	}
	var wg sync.WaitGroup
	done := make(chan struct{})
	for range workers {
		wg.Go(func() {
			var ch *amqp.Channel
			defer func() {
				if ch != nil {
					_ = ch.Close()
				}
			}()
			for {
				i, ok := take()
				if !ok {
					return
				}
				mu.Lock()
				skip := errs[i] != nil
				mu.Unlock()
				if skip {
					continue
				}
				if ch == nil || ch.IsClosed() {
					var err error
					if ch, err = conn.Channel(); err != nil {
						ch = nil
						err = fmt.Errorf("topology: open channel: %w", err)
						mu.Lock()
						errs[i], failed = err, true
						mu.Unlock()
						continue
					}
				}
				err := jobs[i](ch)
				if err != nil {
					mu.Lock()
					errs[i], failed = err, true
					mu.Unlock()
					// Any broker refusal closes the channel; start the next job on a new one.
					_ = ch.Close()
					ch = nil
				}
			}
		})
	}
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
		return errs, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// errSkipped marks a job that did not run because an earlier one failed or ctx ended.
var errSkipped = errors.New("topology: skipped after an earlier failure")

// firstErr returns the first error of errs that is not errSkipped, with its index.
func firstErr(errs []error) (int, error) {
	for i, err := range errs {
		if err != nil && err != errSkipped {
			return i, err
		}
	}
	for i, err := range errs {
		if err != nil {
			return i, err
		}
	}
	return -1, nil
}
