//go:build integration

package integration

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/delaykit/rabbitdelay/internal/admin"
	"github.com/delaykit/rabbitdelay/schedule"
)

// TestScheduleBrokenChainRepaired: a schedule's pending link is destroyed for real while no
// instance runs: purged from the links queue after it arrived there (every 2 s), or purged with
// every queue of the delay topology while it waits there (every 20 s). Once the link is more than
// the link grace past due, the CLI binary's `schedules` and `status` exit 1 and say the chain
// is broken and that declaring the schedule again repairs it. A new instance declares it again:
// `schedules` then exits 0, and, running, the instance fires the occurrences from there on, each
// exactly once by its id, none early, none missing after the first; `status` exits 0.
func TestScheduleBrokenChainRepaired(t *testing.T) {
	t.Parallel()
	bin := buildDeclare(t)
	for _, c := range []struct {
		name  string
		every time.Duration
		where string // what is purged: "links" (the links queue), "delay" (the delay topology's queues)
	}{
		{"links-queue", 2 * time.Second, "links"},
		{"delay-topology", 20 * time.Second, "delay"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			f := newSchedFixture(t)
			log := consumeOccurrences(t, f.env.URL, f.queue)
			ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
			defer cancel()
			vars := []string{"AMQPDELAY_URL=" + f.env.URL, "AMQPDELAY_PREFIX=" + f.env.Prefix, "AMQPDELAY_PLUGIN=off",
				"AMQPDELAY_QUEUE_TYPE=quorum", "AMQPDELAY_LADDER_UNIT=1ms", "AMQPDELAY_LADDER_RADIX=16", "AMQPDELAY_LADDER_MAX=65535ms",
				"AMQPDELAY_LADDER_ORDER=shortest-first", // testLadder
				"AMQPDELAY_TARGETS=" + f.target + ":topic", "AMQPDELAY_READY_QUEUES=" + f.queue + "=" + f.target + ":#",
				"AMQPDELAY_MANAGEMENT_URL=" + f.env.Broker.ManagementURL}
			// rabbitdelay apply with the management API sets the policies too: status is clean.
			if code, out, errs := runDeclare(t, bin, vars, "apply"); code != 0 {
				t.Fatalf("rabbitdelay apply: exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errs)
			}
			sch := f.schedule("broken", c.every)
			a := f.newScheduler(t, "a")
			if err := a.Declare(ctx, sch); err != nil {
				t.Fatal(err)
			}
			stop := runScheduler(t, a)
			waitFor(t, time.Minute, "the first occurrence", func() bool { return log.count() >= 1 })
			if code, out, errs := runDeclare(t, bin, vars, "status"); code != 0 {
				t.Fatalf("rabbitdelay status with the chain whole: exit %d, want 0\nstdout:\n%s\nstderr:\n%s", code, out, errs)
			}
			stop()
			_ = a.Close()
			infos, err := schedule.Inspect(ctx, f.cfg, schedule.Options{})
			if err != nil || len(infos) != 1 || infos[0].Next.IsZero() || infos[0].Broken {
				t.Fatalf("Inspect before the link is lost: %+v, %v", infos, err)
			}
			next := infos[0].Next
			links := (f.spec.WithDefaults().Prefix + ".schedules.links")
			ch := f.env.Channel(t)
			purged := 0
			switch c.where {
			case "links":
				waitFor(t, time.Minute, "the pending link in the links queue", func() bool {
					q, err := ch.QueueDeclarePassive(links, true, false, false, false, nil)
					return err == nil && q.Messages > 0
				})
				n, err := ch.QueuePurge(links, false)
				if err != nil {
					t.Fatal(err)
				}
				purged = n
			case "delay":
				if !time.Now().Before(next.Add(-2 * time.Second)) {
					t.Fatalf("the link for %s is about to leave the delay topology: no time to purge it there", next)
				}
				plan, err := admin.NewPlan(f.spec)
				if err != nil {
					t.Fatal(err)
				}
				// The link hops from queue to queue while the queues are purged one by one: it
				// can leave a queue not yet purged for one purged already. Pass over them again
				// until it is found, while it still has time to wait in the delay topology.
				for purged == 0 && time.Now().Before(next.Add(-time.Second)) {
					for _, q := range plan.Queues {
						if q.Role != admin.RoleLadder && q.Role != admin.RoleBucket {
							continue
						}
						n, err := ch.QueuePurge(q.Name, false)
						if err != nil {
							t.Fatalf("purge %s: %v", q.Name, err)
						}
						purged += n
					}
				}
			}
			if purged != 1 {
				t.Fatalf("purged %d messages from the %s queues, want the 1 pending link", purged, c.where)
			}
			fired := log.count()

			// Broken, once the link is more than the grace past due.
			var code int
			var out, errs string
			waitFor(t, time.Until(next.Add(schedule.DefaultLinkGrace+time.Minute)), "rabbitdelay schedules to report the broken chain", func() bool {
				code, out, errs = runDeclare(t, bin, vars, "schedules")
				if code == 0 {
					time.Sleep(time.Second)
				}
				return code != 0
			})
			if code != 1 || !strings.Contains(out, "chain broken") || !strings.Contains(errs, "declaring the schedule again repairs it") ||
				!strings.Contains(errs, "not in the links queue") {
				t.Errorf("rabbitdelay schedules of a broken chain: exit %d, want 1, saying so\nstdout:\n%s\nstderr:\n%s", code, out, errs)
			}
			code, out, errs = runDeclare(t, bin, vars, "status")
			if code != 1 || !strings.Contains(out+errs, `schedule chain broken, nothing of it will fire: "broken"`) ||
				!strings.Contains(out+errs, "declaring the schedule again repairs it") {
				t.Errorf("rabbitdelay status of a broken chain: exit %d, want 1, saying so\nstdout:\n%s\nstderr:\n%s", code, out, errs)
			}
			if n := log.count(); n != fired {
				t.Fatalf("%d occurrences fired with no instance running", n-fired)
			}

			// Declared again: repaired.
			b := f.newScheduler(t, "b")
			if err := b.Declare(ctx, sch); err != nil {
				t.Fatal(err)
			}
			repaired := time.Now()
			if code, out, errs = runDeclare(t, bin, vars, "schedules"); code != 0 || strings.Contains(out, "chain broken") {
				t.Errorf("rabbitdelay schedules after the repair: exit %d, want 0\nstdout:\n%s\nstderr:\n%s", code, out, errs)
			}
			runScheduler(t, b)
			waitFor(t, 2*time.Minute, "3 occurrences after the repair", func() bool {
				n := 0
				for _, d := range log.all() {
					if d.by == "b" {
						n++
					}
				}
				return n >= 3
			})
			log.check(t, 0) // none twice by id, none early
			var after []delivery
			for _, d := range log.all()[fired:] {
				if d.by != "b" {
					t.Errorf("occurrence %s fired by %q, not by the repairing instance", d.id, d.by)
				}
				after = append(after, d)
			}
			// The repaired chain's first occurrence is the latest missed one (the default
			// policy) or, if none was missed, the next one; then every occurrence in turn.
			if first := after[0].at; first.After(repaired.Add(c.every)) || first.Before(next) {
				t.Errorf("first occurrence after the repair %s: want between the lost link's time %s and one interval after the repair %s",
					after[0].id, next.Format(time.RFC3339Nano), repaired.Format(time.RFC3339Nano))
			}
			for i := 1; i < len(after); i++ {
				if want := after[i-1].at.Add(c.every); !after[i].at.Equal(want) {
					t.Errorf("after %s came %s, want %s", after[i-1].id, after[i].id, schedule.OccurrenceID("broken", want))
				}
			}
			if code, out, errs = runDeclare(t, bin, vars, "status"); code != 0 {
				t.Errorf("rabbitdelay status after the repair: exit %d, want 0\nstdout:\n%s\nstderr:\n%s", code, out, errs)
			}
			t.Logf("lost the link for %s (%s); repaired at %s; then fired %d: first %s (late %d ms, missed %d)", next.Format(time.RFC3339),
				c.where, repaired.Format(time.RFC3339), len(after), after[0].id, after[0].late, after[0].missed)
		})
	}
}
