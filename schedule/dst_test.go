package schedule

import (
	"testing"
	"time"
)

func mustCompile(t *testing.T, s Schedule) *compiled {
	t.Helper()
	if s.Exchange == "" {
		s.Exchange = "x"
	}
	if s.Name == "" {
		s.Name = "n"
	}
	c, err := s.compile(0)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// occurrences lists the occurrences in (from, to].
func occurrences(c *compiled, from, to time.Time) []time.Time {
	var out []time.Time
	for t := c.Next(from); !t.IsZero() && !t.After(to); t = c.Next(t) {
		out = append(out, t)
	}
	return out
}

func wall(ts []time.Time, loc *time.Location) []string {
	var out []string
	for _, t := range ts {
		out = append(out, t.In(loc).Format("2006-01-02 15:04:05 MST"))
	}
	return out
}

func equal(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestDSTFixedTimeJobs(t *testing.T) {
	ny, _ := time.LoadLocation("America/New_York")
	berlin, _ := time.LoadLocation("Europe/Berlin")
	cases := []struct {
		name     string
		cron     string
		loc      *time.Location
		from, to time.Time
		want     []string
	}{
		{"skipped hour fires once at the gap's end (NY, 2026-03-08)", "30 2 * * *", ny,
			time.Date(2026, 3, 7, 0, 0, 0, 0, ny), time.Date(2026, 3, 9, 12, 0, 0, 0, ny),
			[]string{"2026-03-07 02:30:00 EST", "2026-03-08 03:00:00 EDT", "2026-03-09 02:30:00 EDT"}},
		{"repeated hour fires once (NY, 2026-11-01)", "30 1 * * *", ny,
			time.Date(2026, 10, 31, 0, 0, 0, 0, ny), time.Date(2026, 11, 2, 12, 0, 0, 0, ny),
			[]string{"2026-10-31 01:30:00 EDT", "2026-11-01 01:30:00 EDT", "2026-11-02 01:30:00 EST"}},
		{"skipped hour, seconds field (Berlin, 2026-03-29)", "15 45 2 * * *", berlin,
			time.Date(2026, 3, 28, 12, 0, 0, 0, berlin), time.Date(2026, 3, 30, 12, 0, 0, 0, berlin),
			[]string{"2026-03-29 03:00:00 CEST", "2026-03-30 02:45:15 CEST"}},
		{"repeated hour (Berlin, 2026-10-25)", "0 2 * * *", berlin,
			time.Date(2026, 10, 24, 12, 0, 0, 0, berlin), time.Date(2026, 10, 26, 12, 0, 0, 0, berlin),
			[]string{"2026-10-25 02:00:00 CEST", "2026-10-26 02:00:00 CET"}},
		{"an hour outside the change is untouched", "0 9 * * *", berlin,
			time.Date(2026, 3, 28, 12, 0, 0, 0, berlin), time.Date(2026, 3, 30, 12, 0, 0, 0, berlin),
			[]string{"2026-03-29 09:00:00 CEST", "2026-03-30 09:00:00 CEST"}},
		{"wildcard hour follows real time across the gap", "0 */30 * * * *", ny,
			time.Date(2026, 3, 8, 1, 0, 0, 0, ny), time.Date(2026, 3, 8, 3, 30, 0, 0, ny),
			[]string{"2026-03-08 01:30:00 EST", "2026-03-08 03:00:00 EDT", "2026-03-08 03:30:00 EDT"}},
		{"wildcard hour follows real time across the repeat", "0 0 * * * *", ny,
			time.Date(2026, 11, 1, 0, 30, 0, 0, ny), time.Date(2026, 11, 1, 2, 30, 0, 0, ny),
			[]string{"2026-11-01 01:00:00 EDT", "2026-11-01 01:00:00 EST", "2026-11-01 02:00:00 EST"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := mustCompile(t, Schedule{Cron: tc.cron, Zone: tc.loc.String()})
			got := wall(occurrences(c, tc.from, tc.to), tc.loc)
			if !equal(got, tc.want) {
				t.Errorf("%s in %s:\n got %q\nwant %q", tc.cron, tc.loc, got, tc.want)
			}
		})
	}
}

// TestRobfigDSTAsIs records what robfig/cron/v3 gives without nextCron's rules, so a change of
// the library's behaviour shows here: the skipped 02:30 is dropped, the repeated 01:30 fires twice.
func TestRobfigDSTAsIs(t *testing.T) {
	ny, _ := time.LoadLocation("America/New_York")
	sched, err := cronParser.Parse("30 2 * * *")
	if err != nil {
		t.Fatal(err)
	}
	n := sched.Next(time.Date(2026, 3, 8, 0, 0, 0, 0, ny))
	if got := n.In(ny).Format("2006-01-02 15:04 MST"); got != "2026-03-09 02:30 EDT" {
		t.Errorf("robfig/cron next 02:30 after the spring-forward midnight: %s (nextCron's gap rule assumes it skips the day)", got)
	}
	sched, _ = cronParser.Parse("30 1 * * *")
	first := sched.Next(time.Date(2026, 11, 1, 0, 0, 0, 0, ny))
	second := sched.Next(first)
	if got := wall([]time.Time{first, second}, ny); !equal(got, []string{"2026-11-01 01:30:00 EDT", "2026-11-01 01:30:00 EST"}) {
		t.Errorf("robfig/cron 01:30 on the fall-back day: %q (nextCron's repeat rule assumes twice)", got)
	}
}
