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
	// OccurrenceHeader (string) is the occurrence's MessageId, "<name>@<RFC 3339 UTC time>"
	// ([OccurrenceID]).
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
	// RecordHeader (string) is a stream record's kind: definition, fired (an occurrence),
	// skipped, link or marker.
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

// stream is the stream of schedule records.
func (n objectNames) stream() string { return n.Prefix + ".schedules" }

// links is the links exchange (fanout, a delay topology target) and quorum queue.
func (n objectNames) links() string { return n.Prefix + ".schedules.links" }

// fire is the headers exchange of occurrences, bound to the stream and every target exchange.
func (n objectNames) fire() string { return n.Prefix + ".schedules.fire" }

// link is the body of a link message (JSON: the Publisher replaces rabbitdelay-* headers on
// the delay paths, so a link carries its data in its body).
type link struct {
	Name string    `json:"name"`
	At   time.Time `json:"at"`
	Hash string    `json:"hash"`
}

// fmtTime formats an occurrence time as in OccurrenceID.
func fmtTime(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }

// record is one parsed record of the schedules stream.
type record struct {
	kind, name, hash, instance string
	at                         time.Time // occurrence (fired, skipped, link)
	next                       time.Time // fired, skipped: the link published before
	written                    time.Time // the record's Timestamp
	marker                     string
	state                      string    // definition records
	def                        *Schedule // definition records
}

// parseRecord reads a delivery of the schedules stream. Messages that are no record of this
// package give ok false.
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
		s, _ := h[OccurrenceHeader].(string)
		_, at, err := ParseOccurrenceID(s)
		if err != nil {
			return r, false, err
		}
		r.at = at
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

// userMessage returns the user's message a definition record carries: its body, properties
// and headers without the package's own.
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

// withHeaders returns m at now, persistent unless DeliveryMode says transient, with a copy of its
// headers plus own.
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
		headers[ScheduleHeader] = name
		headers[HashHeader] = h
		headers[OccurrenceHeader] = OccurrenceID(name, at)
	}
	if !next.IsZero() {
		headers[NextHeader] = fmtTime(next)
	}
	if missed > 0 {
		headers[MissedHeader] = missed
	}
	return amqp.Publishing{Headers: headers, DeliveryMode: amqp.Persistent, Timestamp: now}
}
