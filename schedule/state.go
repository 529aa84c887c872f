package schedule

import "time"

// entry is what the stream says about one schedule.
type entry struct {
	def     *Schedule // the latest definition record's
	comp    *compiled // def compiled (nil when it does not compile here, e.g. an unknown zone)
	hash    string
	state   string
	defAt   time.Time // the latest definition record's Timestamp
	handled map[int64]bool
	// lastFired is the latest occurrence fired (by occurrence time), by lastBy at lastAt.
	lastFired time.Time
	lastBy    string
	lastAt    time.Time
	// link is the latest link recorded of the current definition (a link record, or the next
	// of a fired or skipped record), linkHash then its digest; zero and "" when there is none.
	link     time.Time
	linkHash string
	// links is the latest link recorded per definition digest: records of instances writing at
	// the same moment may arrive in any order.
	links map[string]time.Time
	fired int64
	// lastHandled is the latest occurrence fired or skipped under definition lastHandledHash.
	lastHandled     time.Time
	lastHandledHash string
}

// handle records occurrence at of definition h as handled.
func (e *entry) handle(at time.Time, h string) {
	e.handled[at.UnixNano()] = true
	if h != e.lastHandledHash || at.After(e.lastHandled) {
		e.lastHandled, e.lastHandledHash = at, h
	}
}

// state is the schedules of one prefix as read from the stream.
type state struct {
	entries map[string]*entry
	unit    time.Duration
}

func newState(unit time.Duration) *state { return &state{entries: map[string]*entry{}, unit: unit} }

// apply adds one record to s.
func (s *state) apply(r record) {
	if r.name == "" {
		return
	}
	e := s.entries[r.name]
	if e == nil {
		e = &entry{handled: map[int64]bool{}, links: map[string]time.Time{}}
		s.entries[r.name] = e
	}
	switch r.kind {
	case recDefinition:
		e.def, e.hash, e.state, e.defAt = r.def, r.hash, r.state, r.written
		e.comp, _ = r.def.compile(s.unit)
		if e.comp != nil {
			e.comp.hash = r.hash // the declarer's digest (a header's integer width may differ after the round trip)
		}
	case recFired, recSkipped:
		e.handle(r.at, r.hash)
		if r.kind == recFired {
			e.fired++
			if !r.at.Before(e.lastFired) {
				e.lastFired, e.lastBy, e.lastAt = r.at, r.instance, r.written
			}
		}
		if !r.next.IsZero() {
			e.setLink(r.hash, r.next)
		}
	case recLink:
		e.setLink(r.hash, r.at)
	}
	e.link, e.linkHash = time.Time{}, ""
	if at, ok := e.links[e.hash]; ok {
		e.link, e.linkHash = at, e.hash
	}
}

// setLink records link at of definition h, unless a later one of h is known (a late record of
// a copy from an instance declaring at the same moment changes nothing).
func (e *entry) setLink(h string, at time.Time) {
	if cur, ok := e.links[h]; !ok || at.After(cur) {
		e.links[h] = at
	}
}

// pending reports whether e has a link that will still fire under its current definition: the
// latest link recorded is of the current definition and its occurrence has not been handled.
func (e *entry) pending() bool {
	return e.linkHash == e.hash && !e.link.IsZero() && !e.handled[e.link.UnixNano()]
}

// ended reports whether e's definition has no occurrence after its last handled one.
func (e *entry) ended(now time.Time) bool {
	if e.comp == nil {
		return false
	}
	from := now
	if !e.link.IsZero() {
		from = e.link
	}
	return e.comp.Next(from).IsZero() && (e.link.IsZero() || e.handled[e.link.UnixNano()])
}

// verdict is what to do with a link.
type verdict struct {
	drop   string    // non-empty: ack and publish nothing; the reason
	fire   time.Time // the occurrence to fire (zero: none)
	late   time.Duration
	missed int64     // occurrences the missed policy dropped
	next   time.Time // the link to publish before firing (zero: none)
	skip   time.Time // with fire zero and drop empty: record this occurrence as skipped
}

// maxCatchUp bounds how many missed occurrences decide walks.
const maxCatchUp = 1_000_000

// decide says what to do with link l of e at now (after the sync).
func decide(e *entry, l link, now time.Time) verdict {
	switch {
	case e == nil || e.def == nil:
		return verdict{drop: "no definition"}
	case e.state == stateRemoved:
		return verdict{drop: "removed"}
	case e.state == statePaused:
		return verdict{drop: "paused"}
	case l.Hash != e.hash:
		return verdict{drop: "an earlier definition's link"}
	case e.comp == nil:
		return verdict{drop: "definition does not compile here"}
	}
	c := e.comp
	if e.pending() && (e.handled[l.At.UnixNano()] || e.lastHandledHash == e.hash && !l.At.After(e.lastHandled)) {
		// A copy of a link handled already, or of one whose time the missed policy covered (a
		// link published again by a repair, or by instances declaring at the same moment).
		return verdict{drop: "already fired"}
	}
	if e.handled[l.At.UnixNano()] {
		// Fired under another definition, or by a link whose chain was cut: carry the chain on.
		return verdict{next: c.Next(l.At)}
	}
	next := c.Next(l.At)
	if next.IsZero() || next.After(now) || c.Missed == MissedAll {
		return verdict{fire: l.At, late: max(now.Sub(c.due(l.At)), 0), next: next}
	}
	// Missed: later occurrences' times have passed too.
	latest, n := l.At, int64(1)
	for t := c.Next(latest); n < maxCatchUp && !t.IsZero() && !t.After(now); t = c.Next(latest) {
		latest, n = t, n+1
	}
	following := c.Next(latest)
	if c.Missed == MissedSkip {
		return verdict{skip: l.At, missed: n, next: following}
	}
	if e.handled[latest.UnixNano()] {
		return verdict{skip: l.At, missed: n - 1, next: following}
	}
	return verdict{fire: latest, late: max(now.Sub(c.due(latest)), 0), missed: n - 1, next: following}
}

// lost reports whether e's pending link is lost: e is active and pending, the link is more than
// grace past due, and queued (the links queue's ready messages; negative: unknown) is 0. A link
// past due is in the links queue or handled; grace covers the delay topology's lateness.
func (e *entry) lost(now time.Time, grace time.Duration, queued int) bool {
	if queued != 0 || e.state != stateActive || e.comp == nil || !e.pending() {
		return false
	}
	return now.Sub(e.comp.due(e.link)) > grace
}
