package schedule

import (
	"encoding/json"
	"fmt"
	"maps"
	"strings"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/delaykit/rabbitdelay/internal/delayspec"
)

// Header names. None begins with "x-": a headers exchange ignores binding arguments whose names
// do (https://www.rabbitmq.com/docs/exchanges#headers), and the fire exchange binds on
// TargetHeader. Integer values are int64.
const (
	// ScheduleHeader (string) names the schedule, on every occurrence and record.
	ScheduleHeader = "rabbitdelay-schedule"
	// OccurrenceHeader (string) is the occurrence's MessageId ([OccurrenceID]).
	OccurrenceHeader = "rabbitdelay-occurrence"
	// LateHeader (int64) is how late the occurrence was published, in ms after its due time
	// (its time plus its jitter); 0 when on time.
	LateHeader = "rabbitdelay-schedule-late-ms"
	// MissedHeader (int64) is how many earlier occurrences the missed policy dropped just before
	// this one (MissedLatest) or in its place (a skipped record).
	MissedHeader = "rabbitdelay-schedule-missed"
	// InstanceHeader (string) is the instance that published the occurrence or record.
	InstanceHeader = "rabbitdelay-schedule-instance"
	// TargetHeader (string) is the target exchange, matched by the fire exchange's binding to it.
	TargetHeader = "rabbitdelay-schedule-target"
	// RecordHeader (string) is a record's kind: definition, fired, skipped, link or marker.
	RecordHeader = "rabbitdelay-schedule-record"
	// HashHeader (string) is the digest of the definition an occurrence or record belongs to.
	HashHeader = "rabbitdelay-schedule-hash"
	// NextHeader (string, RFC 3339 UTC) is the occurrence whose link was published before this
	// one fired; absent when there is no later occurrence.
	NextHeader = "rabbitdelay-schedule-next"

	definitionHeader = "rabbitdelay-schedule-definition" // JSON: definition
	stateHeader      = "rabbitdelay-schedule-state"      // active, paused or removed
	markerHeader     = "rabbitdelay-schedule-marker"     // a sync marker's id
)

// Record kinds (RecordHeader) and definition states.
const (
	recDefinition = "definition"
	recFired      = "fired"
	recSkipped    = "skipped"
	recLink       = "link"
	recMarker     = "marker"

	stateActive  = "active"
	statePaused  = "paused"
	stateRemoved = "removed"
)

func isOwnHeader(k string) bool {
	return strings.HasPrefix(k, ScheduleHeader) || strings.HasPrefix(k, OccurrenceHeader)
}

// objectNames are the broker objects of the schedules of one prefix (default prefix when empty).
type objectNames struct{ Prefix string }

func namesOf(prefix string) objectNames {
	return objectNames{Prefix: delayspec.Spec{Prefix: prefix}.WithDefaults().Prefix}
}

func (n objectNames) stream() string { return n.Prefix + ".schedules" }

// links is the links exchange (fanout, a delay topology target) and quorum queue.
func (n objectNames) links() string { return n.Prefix + ".schedules.links" }

// fire is the headers exchange of occurrences, bound to the stream and every target exchange.
func (n objectNames) fire() string { return n.Prefix + ".schedules.fire" }

// link is a link message's JSON body (the Publisher replaces rabbitdelay-* headers on delay paths).
type link struct {
	Name string    `json:"name"`
	At   time.Time `json:"at"`
	Hash string    `json:"hash"`
}

// fmtTime formats an occurrence time as in OccurrenceID.
func fmtTime(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }

type record struct {
	kind, name, hash, instance string
	at                         time.Time // occurrence (fired, skipped, link)
	next                       time.Time // fired, skipped: the link published before
	written                    time.Time // the record's Timestamp
	marker                     string
	state                      string    // definition records
	def                        *Schedule // definition records
}

// parseRecord reads a delivery of the schedules stream; ok is false for other messages.
func parseRecord(d amqp.Delivery) (r record, ok bool, err error) {
	h := d.Headers
	r.kind, _ = h[RecordHeader].(string)
	if r.kind == "" {
		return r, false, nil
	}
	r.name, _ = h[ScheduleHeader].(string)
	r.hash, _ = h[HashHeader].(string)
	r.instance, _ = h[InstanceHeader].(string)
	r.written = d.Timestamp
	if s, _ := h[NextHeader].(string); s != "" {
		if r.next, err = time.Parse(time.RFC3339Nano, s); err != nil {
			return r, false, fmt.Errorf("schedule: record %s of %q: %s: %w", r.kind, r.name, NextHeader, err)
		}
	}
	switch r.kind {
	case recMarker:
		r.marker, _ = h[markerHeader].(string)
	case recFired, recSkipped, recLink:
		id, _ := h[OccurrenceHeader].(string)
		if _, r.at, err = ParseOccurrenceID(id); err != nil {
			return r, false, err
		}
	case recDefinition:
		r.state, _ = h[stateHeader].(string)
		var def definition
		js, _ := h[definitionHeader].(string)
		if err := json.Unmarshal([]byte(js), &def); err != nil {
			return r, false, fmt.Errorf("schedule: definition record of %q: %w", r.name, err)
		}
		s, err := def.schedule(r.name, userMessage(d))
		if err != nil {
			return r, false, fmt.Errorf("schedule: definition record of %q: %w", r.name, err)
		}
		r.def = &s
	default:
		return r, false, nil
	}
	return r, true, nil
}

// userMessage returns the user's message of a definition record, without the package's headers.
func userMessage(d amqp.Delivery) amqp.Publishing {
	h := maps.Clone(d.Headers)
	maps.DeleteFunc(h, func(k string, _ any) bool { return isOwnHeader(k) })
	if len(h) == 0 {
		h = nil
	}
	return amqp.Publishing{Headers: h, ContentType: d.ContentType, ContentEncoding: d.ContentEncoding, DeliveryMode: d.DeliveryMode,
		Priority: d.Priority, CorrelationId: d.CorrelationId, ReplyTo: d.ReplyTo, Expiration: d.Expiration, Type: d.Type,
		UserId: d.UserId, AppId: d.AppId, Body: d.Body}
}

// definitionRecord is the record of s (with hash h) in state st.
func definitionRecord(s Schedule, h, st, instance string, now time.Time) amqp.Publishing {
	js, _ := json.Marshal(s.definition())
	m := withHeaders(s.Message, now, amqp.Table{RecordHeader: recDefinition, ScheduleHeader: s.Name, HashHeader: h,
		definitionHeader: string(js), stateHeader: st, InstanceHeader: instance})
	m.MessageId = ""
	return m
}

// occurrenceMessage is the message of occurrence at of c, which also is its fired record.
func occurrenceMessage(c *compiled, at, next time.Time, late time.Duration, missed int64, instance string, now time.Time) amqp.Publishing {
	m := withHeaders(c.Message, now, amqp.Table{RecordHeader: recFired, ScheduleHeader: c.Name, OccurrenceHeader: OccurrenceID(c.Name, at),
		HashHeader: c.hash, InstanceHeader: instance, TargetHeader: c.Exchange, LateHeader: late.Milliseconds(), MissedHeader: missed})
	if !next.IsZero() {
		m.Headers[NextHeader] = fmtTime(next)
	}
	m.MessageId = OccurrenceID(c.Name, at)
	return m
}

// withHeaders returns m at now, persistent unless transient, with a copy of its headers plus own.
func withHeaders(m amqp.Publishing, now time.Time, own amqp.Table) amqp.Publishing {
	h := amqp.Table{}
	maps.Copy(h, m.Headers)
	maps.Copy(h, own)
	m.Headers, m.Timestamp, m.DeliveryMode = h, now, normMode(m.DeliveryMode)
	return m
}

// plainRecord is a link, skipped or marker record (no body).
func plainRecord(kind, name, h string, at, next time.Time, missed int64, instance string, now time.Time) amqp.Publishing {
	headers := amqp.Table{RecordHeader: kind, InstanceHeader: instance}
	if name != "" {
		maps.Copy(headers, amqp.Table{ScheduleHeader: name, HashHeader: h, OccurrenceHeader: OccurrenceID(name, at)})
	}
	if !next.IsZero() {
		headers[NextHeader] = fmtTime(next)
	}
	if missed > 0 {
		headers[MissedHeader] = missed
	}
	return amqp.Publishing{Headers: headers, DeliveryMode: amqp.Persistent, Timestamp: now}
}

// entry is what the stream says about one schedule.
type entry struct {
	def     *Schedule // the latest definition record's
	comp    *compiled // def compiled (nil when it does not compile here, e.g. an unknown zone)
	hash    string
	state   string    // active, paused or removed
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
