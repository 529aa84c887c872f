//go:build integration

package integration

import (
	"fmt"
	"testing"
	"time"

	"github.com/delaykit/rabbitdelay/schedule"
)

// schedDeclarers is how many scheduler processes declare at the same instant.
const schedDeclarers = 4

// startDeclarers starts n scheduler processes that declare sch at the instant at (each after
// its own New) and then run, and returns them.
func startDeclarers(t *testing.T, f *schedFixture, gen string, n int, sch schedule.Schedule, at time.Time) []*schedProc {
	t.Helper()
	procs := make([]*schedProc, n)
	for i := range procs {
		procs[i] = startSchedProc(t, schedProcConfig{Instance: fmt.Sprintf("%s-%d", gen, i), Config: connOf(f.cfg), Schedule: sch, DeclareAt: at})
	}
	return procs
}

// declaredBy waits until every process of procs printed that its Declare returned, fails when
// one declared before at (it was not ready in time: the test proves nothing then), and returns
// the latest return.
func declaredBy(t *testing.T, procs []*schedProc, at time.Time) time.Time {
	t.Helper()
	var last time.Time
	waitFor(t, time.Minute, "every process's Declare to return", func() bool {
		last = time.Time{}
		for _, p := range procs {
			d, ok := p.declared()
			if !ok {
				return false
			}
			if d.After(last) {
				last = d
			}
		}
		return true
	})
	for _, p := range procs {
		if d, _ := p.declared(); d.Before(at) {
			t.Fatalf("%s: Declare returned at %s, before the common instant %s", p.name, d.Format(time.RFC3339Nano), at.Format(time.RFC3339Nano))
		}
	}
	return last
}

// nextTick is the first multiple of every (from the Unix epoch, as an Interval schedule
// without Start fires) after t.
func nextTick(t time.Time, every time.Duration) time.Time {
	return t.Truncate(every).Add(every)
}

// consecutive fails unless ds (sorted by occurrence time as delivered) are every apart.
func consecutive(t *testing.T, what string, ds []delivery, every time.Duration) {
	t.Helper()
	for i := 1; i < len(ds); i++ {
		if want := ds[i-1].at.Add(every); !ds[i].at.Equal(want) {
			t.Errorf("%s: after %s came %s, want the occurrence at %s", what, ds[i-1].id, ds[i].id, want.Format(time.RFC3339Nano))
		}
	}
}

// TestScheduleDeclaredAtOnce: several scheduler processes (real processes, as in
// TestScheduleProcessesKilled) start and declare the same new 2 s schedule at the same instant,
// then run it. A plain AMQP consumer of the target's queue gets every occurrence from the first
// after the instant on, each once by its id, none early.
func TestScheduleDeclaredAtOnce(t *testing.T) {
	t.Parallel()
	f := newSchedFixture(t)
	log := consumeOccurrences(t, f.env.URL, f.queue)
	const every = 2 * time.Second
	sch := f.schedule("atonce", every)
	at := time.Now().Add(8 * time.Second).Truncate(every).Add(every / 2) // between two occurrences
	procs := startDeclarers(t, f, "p", schedDeclarers, sch, at)
	last := declaredBy(t, procs, at)
	waitFor(t, time.Minute, "8 occurrences", func() bool { return log.count() >= 8 })
	n := log.check(t, every) // none twice, none early, none missing between the first and the last
	all := log.all()
	first := all[0]
	for _, d := range all {
		if d.at.Before(first.at) {
			first = d
		}
	}
	if first.at.Before(at) || first.at.After(nextTick(last, every)) {
		t.Errorf("first occurrence %s: want the first after the common instant %s (declares returned by %s)",
			first.id, at.Format(time.RFC3339Nano), last.Format(time.RFC3339Nano))
	}
	infos, err := schedule.Inspect(t.Context(), f.cfg, schedule.Options{})
	if err != nil || len(infos) != 1 || infos[0].Broken || infos[0].Next.IsZero() {
		t.Errorf("Inspect: %+v, %v", infos, err)
	}
	t.Logf("%d processes declared at %s (the last returned %v later); %d occurrences, first %s, each once",
		len(procs), at.Format(time.RFC3339Nano), last.Sub(at), n, first.id)
}

// TestScheduleChangedAtOnce: processes run a 2 s schedule with body v1; then as many new
// processes start and declare, at the same instant (1 s after an occurrence of v1), a changed
// definition: every 3 s, body v2, while the first ones keep running. Each occurrence is
// delivered once by its id and none early; v1's occurrences run without a gap up to the last
// one before the instant; none of v1 comes after it; v2's start with the first occurrence of v2
// after the declares returned (at the latest) and run without a gap.
func TestScheduleChangedAtOnce(t *testing.T) {
	t.Parallel()
	f := newSchedFixture(t)
	log := consumeOccurrences(t, f.env.URL, f.queue)
	const every1, every2 = 2 * time.Second, 3 * time.Second
	v1 := f.schedule("changed", every1)
	old := startDeclarers(t, f, "v1", schedDeclarers-1, v1, time.Now().Add(6*time.Second))
	declaredBy(t, old, time.Time{})
	waitFor(t, time.Minute, "3 occurrences of v1", func() bool { return log.count() >= 3 })
	// The common instant: 1 s after an occurrence of v1, 2 s before one of v2 (6 s = both periods).
	at := time.Now().Add(8 * time.Second).Truncate(6 * time.Second).Add(6*time.Second + time.Second)
	v2 := f.schedule("changed", every2)
	v2.Message.Body = []byte("v2")
	procs := startDeclarers(t, f, "v2", schedDeclarers, v2, at)
	last := declaredBy(t, procs, at)
	if last.After(at.Add(2 * time.Second)) {
		t.Logf("the declares took %v: the first v2 occurrence is a later one", last.Sub(at))
	}
	waitFor(t, 2*time.Minute, "4 occurrences of v2", func() bool {
		n := 0
		for _, d := range log.all() {
			if d.body == "v2" {
				n++
			}
		}
		return n >= 4
	})
	log.check(t, 0) // none twice by id, none early
	var d1, d2 []delivery
	for _, d := range log.all() {
		switch d.body {
		case "v1":
			d1 = append(d1, d)
			if d.at.After(at) {
				t.Errorf("occurrence %s of v1 after the change was declared at %s", d.id, at.Format(time.RFC3339Nano))
			}
		case "v2":
			d2 = append(d2, d)
			if d.at.Before(at) {
				t.Errorf("occurrence %s of v2 before the change was declared at %s", d.id, at.Format(time.RFC3339Nano))
			}
		default:
			t.Errorf("occurrence %s with body %q", d.id, d.body)
		}
	}
	consecutive(t, "v1", d1, every1)
	consecutive(t, "v2", d2, every2)
	if lastV1 := d1[len(d1)-1].at; !lastV1.Equal(at.Add(-time.Second)) {
		t.Errorf("last occurrence of v1 %s: want the one before the change, at %s", d1[len(d1)-1].id, at.Add(-time.Second).Format(time.RFC3339Nano))
	}
	if first := d2[0].at; first.After(nextTick(last, every2)) {
		t.Errorf("first occurrence of v2 %s: want the first after the declares returned (%s) at the latest", d2[0].id, last.Format(time.RFC3339Nano))
	}
	t.Logf("v1: %d occurrences to %s; %d processes declared v2 at %s (the last returned %v later); v2: %d occurrences from %s",
		len(d1), d1[len(d1)-1].id, len(procs), at.Format(time.RFC3339Nano), last.Sub(at), len(d2), d2[0].id)
}
