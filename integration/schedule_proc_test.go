//go:build integration

package integration

import (
	"fmt"
	"math/rand/v2"
	"os"
	"testing"
	"time"

	"github.com/delaykit/rabbitdelay/schedule"
)

// TestScheduleProcessesKilled: three scheduler processes run the same 2 s schedule for 2 minutes
// (RABBITDELAY_SCHEDULE_SOAK overrides) while one of them, chosen at random, is killed (SIGKILL)
// every 2-8 s and started again at once. A plain AMQP consumer of the target's queue gets every
// occurrence between the first and the last, none twice by its id, none early; and occurrences go
// on up to the end of the run.
func TestScheduleProcessesKilled(t *testing.T) {
	t.Parallel()
	f := newSchedFixture(t)
	log := consumeOccurrences(t, f.env.URL, f.queue)
	const every = 2 * time.Second
	sch := f.schedule("killed", every)
	sch.Missed = schedule.MissedAll // a link held up past the next time by a kill still fires each
	run := 2 * time.Minute
	if d, err := time.ParseDuration(os.Getenv("RABBITDELAY_SCHEDULE_SOAK")); err == nil {
		run = d
	}
	procs := make([]*schedProc, 3)
	gen := 0
	start := func(i int) {
		gen++
		procs[i] = startSchedProc(t, schedProcConfig{Instance: fmt.Sprintf("proc-%d-%d", i, gen), Config: connOf(f.cfg), Schedule: sch})
	}
	for i := range procs {
		start(i)
	}
	waitFor(t, time.Minute, "the first occurrence", func() bool { return log.count() > 0 })
	end := time.Now().Add(run)
	kills := 0
	for time.Now().Before(end) {
		time.Sleep(2*time.Second + rand.N(6*time.Second))
		i := rand.N(len(procs))
		procs[i].kill()
		kills++
		start(i)
	}
	stopAt := time.Now()
	waitFor(t, time.Minute, "the occurrences due by the end of the run", func() bool {
		for _, d := range log.all() {
			if !d.at.Before(stopAt) {
				return true
			}
		}
		return false
	})
	n := log.check(t, every)
	by := map[string]int{}
	late := 0
	for _, d := range log.all() {
		by[d.by]++
		if d.late > 1000 {
			late++
		}
	}
	if n < int(run/every)-2 {
		t.Errorf("%d occurrences in a run of %v at %v", n, run, every)
	}
	t.Logf("%d occurrences, each once, none early, with %d kills; fired by %v; %d more than 1 s late", n, kills, by, late)
}
