package schedule

import (
	"testing"
	"time"
)

func testEntry(t *testing.T, s Schedule) *entry {
	t.Helper()
	c := mustCompile(t, s)
	st := newState(0)
	st.apply(record{kind: recDefinition, name: c.Name, hash: c.hash, state: stateActive, def: &c.Schedule})
	return st.entries[c.Name]
}

func TestDecide(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	sec := time.Second
	base := Schedule{Name: "s", Interval: sec, Exchange: "x"}
	e := testEntry(t, base)
	h := e.hash

	v := decide(e, link{Name: "s", At: t0, Hash: h}, t0.Add(10*time.Millisecond))
	if v.drop != "" || !v.fire.Equal(t0) || !v.next.Equal(t0.Add(sec)) || v.late != 10*time.Millisecond {
		t.Errorf("on time: %+v", v)
	}
	if v := decide(e, link{Name: "s", At: t0, Hash: "other"}, t0); v.drop == "" {
		t.Errorf("an earlier definition's link: %+v", v)
	}
	// Fired, next link pending: a duplicate is dropped.
	st := newState(0)
	st.entries["s"] = e
	st.apply(record{kind: recFired, name: "s", hash: h, at: t0, next: t0.Add(sec)})
	if v := decide(e, link{Name: "s", At: t0, Hash: h}, t0); v.drop != "already fired" {
		t.Errorf("duplicate: %+v", v)
	}
	// Fired by a chain of another definition: carry the chain on without firing.
	e2 := testEntry(t, base)
	st2 := newState(0)
	st2.entries["s"] = e2
	st2.apply(record{kind: recFired, name: "s", hash: "old", at: t0, next: t0.Add(sec)})
	if v := decide(e2, link{Name: "s", At: t0, Hash: h}, t0); v.drop != "" || !v.fire.IsZero() || !v.next.Equal(t0.Add(sec)) {
		t.Errorf("fired under another definition: %+v", v)
	}
	// Missed: 5 s down.
	now := t0.Add(5*sec + 300*time.Millisecond)
	latest := e
	latest = testEntry(t, base)
	if v := decide(latest, link{Name: "s", At: t0, Hash: h}, now); !v.fire.Equal(t0.Add(5*sec)) || v.missed != 5 || !v.next.Equal(t0.Add(6*sec)) {
		t.Errorf("latest: %+v", v)
	}
	all := base
	all.Missed = MissedAll
	ea := testEntry(t, all)
	if v := decide(ea, link{Name: "s", At: t0, Hash: ea.hash}, now); !v.fire.Equal(t0) || v.missed != 0 || !v.next.Equal(t0.Add(sec)) || v.late < 5*sec {
		t.Errorf("all: %+v", v)
	}
	skip := base
	skip.Missed = MissedSkip
	es := testEntry(t, skip)
	if v := decide(es, link{Name: "s", At: t0, Hash: es.hash}, now); !v.fire.IsZero() || !v.skip.Equal(t0) || v.missed != 6 || !v.next.Equal(t0.Add(6*sec)) {
		t.Errorf("skip: %+v", v)
	}
	// Paused and removed drop.
	for _, s := range []string{statePaused, stateRemoved} {
		x := testEntry(t, base)
		x.state = s
		if v := decide(x, link{Name: "s", At: t0, Hash: h}, t0); v.drop != s {
			t.Errorf("%s: %+v", s, v)
		}
	}
	// pending / broken
	x := testEntry(t, base)
	if x.pending() {
		t.Errorf("pending without a link")
	}
	stx := newState(0)
	stx.entries["s"] = x
	stx.apply(record{kind: recLink, name: "s", hash: h, at: t0})
	if !x.pending() {
		t.Errorf("not pending after a link record")
	}
	stx.apply(record{kind: recFired, name: "s", hash: h, at: t0})
	if x.pending() {
		t.Errorf("pending after its occurrence fired without a next link")
	}
}

// TestDecideCopyAfterMissedLatest: the latest missed occurrence fired (the first missed ones
// were never handled one by one); a copy of the link for the first missed occurrence (published
// again by a repair, or by instances declaring at the same moment) is dropped, not fired, not
// skipped again.
func TestDecideCopyAfterMissedLatest(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	sec := time.Second
	e := testEntry(t, Schedule{Name: "s", Interval: sec, Exchange: "x"})
	st := newState(0)
	st.entries["s"] = e
	now := t0.Add(5*sec + 300*time.Millisecond)
	v := decide(e, link{Name: "s", At: t0, Hash: e.hash}, now)
	if !v.fire.Equal(t0.Add(5 * sec)) {
		t.Fatalf("latest: %+v", v)
	}
	st.apply(record{kind: recFired, name: "s", hash: e.hash, at: v.fire, next: v.next})
	later := now.Add(2 * sec) // t0+7.3 s: t0+6 s, the pending link, has passed too
	for _, at := range []time.Time{t0, t0.Add(3 * sec), t0.Add(5 * sec)} {
		if v := decide(e, link{Name: "s", At: at, Hash: e.hash}, later); v.drop != "already fired" {
			t.Errorf("copy of the link for %s: %+v", at.Format(time.TimeOnly), v)
		}
	}
	if v := decide(e, link{Name: "s", At: t0.Add(6 * sec), Hash: e.hash}, t0.Add(6*sec)); v.drop != "" || !v.fire.Equal(t0.Add(6*sec)) {
		t.Errorf("the pending link: %+v", v)
	}
}

// TestLost: a pending link counts as lost only when active, more than the grace past due, and
// the links queue holds no ready message (0, not unknown).
func TestLost(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	g := 10 * time.Second
	e := testEntry(t, Schedule{Name: "s", Interval: time.Second, Exchange: "x"})
	st := newState(0)
	st.entries["s"] = e
	if e.lost(t0.Add(time.Hour), g, 0) {
		t.Errorf("lost without a pending link")
	}
	st.apply(record{kind: recLink, name: "s", hash: e.hash, at: t0})
	for _, c := range []struct {
		now    time.Time
		queued int
		want   bool
	}{
		{t0.Add(g + time.Millisecond), 0, true},
		{t0.Add(g), 0, false},
		{t0.Add(time.Hour), 1, false},
		{t0.Add(time.Hour), -1, false},
	} {
		if got := e.lost(c.now, g, c.queued); got != c.want {
			t.Errorf("lost(%v past due, queued %d) = %v, want %v", c.now.Sub(t0), c.queued, got, c.want)
		}
	}
	e.state = statePaused
	if e.lost(t0.Add(time.Hour), g, 0) {
		t.Errorf("a paused schedule's link counted as lost")
	}
	e.state = stateActive
	st.apply(record{kind: recFired, name: "s", hash: e.hash, at: t0, next: t0.Add(time.Second)})
	if e.lost(t0.Add(time.Second+g/2), g, 0) {
		t.Errorf("lost within the grace of the next link")
	}
	infosNow := infos(st, t0.Add(time.Hour), g, 0)
	if len(infosNow) != 1 || !infosNow[0].Broken || infosNow[0].Problem == "" || !infosNow[0].Next.IsZero() {
		t.Errorf("infos of a lost link: %+v", infosNow)
	}
}

// TestLateLinkRecord: the link record of a copy, written after the occurrence fired and the next
// link was recorded, leaves the chain pending on the next link.
func TestLateLinkRecord(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	e := testEntry(t, Schedule{Name: "s", Interval: time.Second, Exchange: "x"})
	st := newState(0)
	st.entries["s"] = e
	st.apply(record{kind: recLink, name: "s", hash: e.hash, at: t0})
	st.apply(record{kind: recFired, name: "s", hash: e.hash, at: t0, next: t0.Add(time.Second)})
	st.apply(record{kind: recLink, name: "s", hash: e.hash, at: t0}) // the copy's, late
	if !e.pending() || !e.link.Equal(t0.Add(time.Second)) {
		t.Errorf("after a late link record: pending %v, link %s", e.pending(), e.link)
	}
	// A late record of an earlier definition's chain (its fired record with its next link)
	// leaves the current definition's chain pending.
	st.apply(record{kind: recFired, name: "s", hash: "earlier", at: t0.Add(-time.Second), next: t0.Add(2 * time.Second)})
	if !e.pending() || !e.link.Equal(t0.Add(time.Second)) || e.linkHash != e.hash {
		t.Errorf("after an earlier definition's record: pending %v, link %s of %q", e.pending(), e.link, e.linkHash)
	}
}
