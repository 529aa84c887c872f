//go:build integration

package integration

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/delaykit/rabbitdelay/schedule"
)

// TestScheduleChangeAndRemove: a 1 s schedule fires with body v1; declared again with body v2
// (a changed definition), every occurrence after the Declare returned carries v2; Pause stops
// it and Resume restarts it; Remove ends it: no occurrence after Remove returned, even 4 s
// later; the list shows it removed.
func TestScheduleChangeAndRemove(t *testing.T) {
	t.Parallel()
	f := newSchedFixture(t)
	log := consumeOccurrences(t, f.env.URL, f.queue)
	s := f.newScheduler(t, "a")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	sch := f.schedule("change", time.Second)
	if err := s.Declare(ctx, sch); err != nil {
		t.Fatal(err)
	}
	runScheduler(t, s)
	waitFor(t, time.Minute, "2 occurrences of v1", func() bool { return log.count() >= 2 })
	sch.Message.Body = []byte("v2")
	if err := s.Declare(ctx, sch); err != nil {
		t.Fatal(err)
	}
	changed := time.Now()
	waitFor(t, time.Minute, "2 occurrences of v2", func() bool {
		n := 0
		for _, d := range log.all() {
			if d.body == "v2" {
				n++
			}
		}
		return n >= 2
	})
	for _, d := range log.all() {
		if d.at.After(changed) && d.body != "v2" {
			t.Errorf("occurrence %s after the change (%s) has body %q", d.id, changed.Format(time.RFC3339Nano), d.body)
		}
	}

	if err := s.Pause(ctx, "change"); err != nil {
		t.Fatal(err)
	}
	paused := time.Now()
	time.Sleep(3 * time.Second)
	for _, d := range log.all() {
		if d.at.After(paused) {
			t.Errorf("occurrence %s fired while paused (since %s)", d.id, paused.Format(time.RFC3339Nano))
		}
	}
	if err := s.Resume(ctx, "change"); err != nil {
		t.Fatal(err)
	}
	resumed := time.Now()
	waitFor(t, time.Minute, "an occurrence after Resume", func() bool {
		for _, d := range log.all() {
			if d.at.After(resumed) {
				return true
			}
		}
		return false
	})

	if err := s.Remove(ctx, "change"); err != nil {
		t.Fatal(err)
	}
	removed := time.Now()
	time.Sleep(4 * time.Second)
	for _, d := range log.all() {
		if d.at.After(removed) {
			t.Errorf("occurrence %s fired after Remove returned (%s)", d.id, removed.Format(time.RFC3339Nano))
		}
	}
	log.check(t, 0)
	infos, err := s.List(ctx)
	if err != nil || len(infos) != 1 || infos[0].State != "removed" || !infos[0].Next.IsZero() {
		t.Errorf("List after Remove: %+v, %v", infos, err)
	}
	// A removed schedule is not paused or resumed: only a new Declare restarts it.
	for what, op := range map[string]func(context.Context, string) error{"Pause": s.Pause, "Resume": s.Resume} {
		if err := op(ctx, "change"); !errors.Is(err, schedule.ErrUnknownSchedule) {
			t.Errorf("%s after Remove: %v; want ErrUnknownSchedule", what, err)
		}
	}
	if infos, err := s.List(ctx); err != nil || len(infos) != 1 || infos[0].State != "removed" {
		t.Errorf("List after Pause and Resume of a removed schedule: %+v, %v", infos, err)
	}
}

// TestScheduleMissedPolicies: for each policy a 1 s schedule fires, its only scheduler stops for
// 6 s (every instance down), and a new one starts:
//   - latest: the only occurrence of the window that fires is the latest missed one, at the
//     restart, late (LateHeader > 0) and counting the others (MissedHeader); nothing in between;
//   - all: every occurrence of the window fires, the first ones late;
//   - skip: none of the window fires; the next one is after the restart.
func TestScheduleMissedPolicies(t *testing.T) {
	t.Parallel()
	for _, p := range []schedule.MissedPolicy{schedule.MissedLatest, schedule.MissedAll, schedule.MissedSkip} {
		t.Run(p.String(), func(t *testing.T) {
			t.Parallel()
			f := newSchedFixture(t)
			log := consumeOccurrences(t, f.env.URL, f.queue)
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			sch := f.schedule("missed", time.Second)
			sch.Missed = p
			a := f.newScheduler(t, "a")
			if err := a.Declare(ctx, sch); err != nil {
				t.Fatal(err)
			}
			stop := runScheduler(t, a)
			waitFor(t, time.Minute, "2 occurrences", func() bool { return log.count() >= 2 })
			stop()
			_ = a.Close()
			down := time.Now()
			before := log.count()
			time.Sleep(6 * time.Second)
			b := f.newScheduler(t, "b")
			if err := b.Declare(ctx, sch); err != nil { // same definition, chain pending: nothing written
				t.Fatal(err)
			}
			restarted := time.Now()
			runScheduler(t, b)
			waitFor(t, time.Minute, "2 occurrences after the restart", func() bool {
				n := 0
				for _, d := range log.all() {
					if d.by == "b" && d.at.After(restarted) {
						n++
					}
				}
				return n >= 2
			})
			log.check(t, 0)
			all := log.all()
			after := all[before:]
			var window []delivery // fired by b for occurrence times while nobody ran
			for _, d := range after {
				if d.at.Before(restarted) && d.at.After(down.Add(time.Second)) {
					window = append(window, d)
				}
			}
			switch p {
			case schedule.MissedLatest:
				if len(window) != 1 {
					t.Fatalf("latest: %d occurrences of the window fired, want 1: %+v", len(window), window)
				}
				if w := window[0]; w.late <= 0 || w.missed < 3 || restarted.Sub(w.at) > 1500*time.Millisecond {
					t.Errorf("latest: %s late %d ms, missed %d: want the latest missed one, late, counting >= 3 missed", w.id, w.late, w.missed)
				}
			case schedule.MissedAll:
				if len(window) < 5 {
					t.Errorf("all: %d occurrences of the 6 s window fired", len(window))
				}
				log.check(t, time.Second)
				if window[0].late < 3000 {
					t.Errorf("all: first missed occurrence %s only %d ms late", window[0].id, window[0].late)
				}
			case schedule.MissedSkip:
				if len(window) != 0 {
					t.Errorf("skip: %d occurrences of the window fired: %+v", len(window), window)
				}
			}
			t.Logf("%s: %d fired in the window; first after restart %+v", p, len(window), after[0])
		})
	}
}
