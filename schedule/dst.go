package schedule

import (
	"time"

	"github.com/robfig/cron/v3"
)

// Daylight-saving time: robfig/cron/v3 walks wall-clock fields hour by hour, so for an
// expression with particular hours it drops an occurrence in a skipped hour and fires one in a
// repeated hour twice. nextCron fires both once, as Vixie cron and cronie do: a skipped wall
// time at the end of the gap, a repeated one at its first instance. An expression matching
// every hour follows elapsed time, as robfig/cron does (docs/schedules.md has the table).

const (
	starBit   = 1 << 63   // robfig/cron's marker of a field written as "*"
	everyHour = 1<<24 - 1 // the mask of the 24 hours
)

// nextCron returns the first occurrence of spec strictly after t, with the rules above.
func nextCron(spec *cron.SpecSchedule, loc *time.Location, t time.Time) time.Time {
	fixed := spec.Hour&everyHour != everyHour
	for range 1000 {
		n := spec.Next(t.In(loc))
		if n.IsZero() || !fixed {
			return n
		}
		if g := gapOccurrence(spec, loc, t, n); !g.IsZero() {
			return g
		}
		if !repeatedWallTime(n.In(loc)) {
			return n
		}
		t = n
	}
	return time.Time{}
}

// gapOccurrence returns the end of the first forward transition in (t, n) during whose skipped
// wall times spec matches, or the zero time.
func gapOccurrence(spec *cron.SpecSchedule, loc *time.Location, t, n time.Time) time.Time {
	cur := t.In(loc)
	for range 100 {
		_, end := cur.ZoneBounds()
		if end.IsZero() || !end.Before(n) {
			return time.Time{}
		}
		_, before := cur.Zone()
		_, after := end.In(loc).Zone()
		if after > before && end.After(t) {
			old := time.FixedZone("", before)
			for s := 0; s < after-before; s++ {
				if matches(spec, end.Add(time.Duration(s)*time.Second).In(old)) {
					return end.In(loc)
				}
			}
		}
		cur = end.In(loc)
	}
	return time.Time{}
}

// repeatedWallTime reports whether t's wall-clock time already happened earlier, at another
// offset (the second pass through a repeated hour).
func repeatedWallTime(t time.Time) bool {
	start, _ := t.ZoneBounds()
	if start.IsZero() {
		return false
	}
	_, now := t.Zone()
	_, prev := start.Add(-time.Nanosecond).In(t.Location()).Zone()
	return prev > now && t.Sub(start) < time.Duration(prev-now)*time.Second
}

// matches reports whether wall-clock time w matches every field of spec.
func matches(spec *cron.SpecSchedule, w time.Time) bool {
	bit := func(mask uint64, v int) bool { return mask&(1<<uint(v)) != 0 }
	if !bit(spec.Second, w.Second()) || !bit(spec.Minute, w.Minute()) || !bit(spec.Hour, w.Hour()) || !bit(spec.Month, int(w.Month())) {
		return false
	}
	dom, dow := bit(spec.Dom, w.Day()), bit(spec.Dow, int(w.Weekday()))
	if spec.Dom&starBit != 0 || spec.Dow&starBit != 0 {
		return dom && dow
	}
	return dom || dow
}
