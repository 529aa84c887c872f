package admin

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	amqp "github.com/rabbitmq/amqp091-go"
)

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
