//go:build integration

package integration

import (
	"context"
	"testing"
	"time"
)

// TestScheduleFires: one in-process Scheduler fires a 1 s schedule; a plain consumer of the
// target's queue gets each occurrence once, with its id and header, never early.
func TestScheduleFires(t *testing.T) {
	t.Parallel()
	f := newSchedFixture(t)
	log := consumeOccurrences(t, f.env.URL, f.queue)
	s := f.newScheduler(t, "a")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := s.Declare(ctx, f.schedule("fires", time.Second)); err != nil {
		t.Fatal(err)
	}
	if err := s.Declare(ctx, f.schedule("fires", time.Second)); err != nil { // same: nothing written
		t.Fatal(err)
	}
	runScheduler(t, s)
	waitFor(t, time.Minute, "5 occurrences", func() bool { return log.count() >= 5 })
	if n := log.check(t, time.Second); n < 5 {
		t.Errorf("%d distinct occurrences", n)
	}
	infos, err := s.List(ctx)
	if err != nil || len(infos) != 1 || infos[0].LastBy != "a" || infos[0].Next.IsZero() || infos[0].Broken {
		t.Errorf("List: %+v, %v", infos, err)
	}
}
