package schedule

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"maps"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/robfig/cron/v3"

	"github.com/delaykit/rabbitdelay/internal/route"
)

// Schedule is one periodic schedule: when its occurrences are due (Cron or Interval, in Zone,
// between Start and End, each delayed by up to Jitter) and the message each occurrence
// publishes to Exchange with RoutingKey.
type Schedule struct {
	// Name identifies the schedule in its prefix: 1 to [MaxNameLen] bytes of letters, digits
	// and . _ - (it is part of every occurrence's message id, "<name>@<time>").
	Name string
	// Cron is a cron expression, seconds field optional ("0 1 28 * *"), or a descriptor (@daily;
	// not @every: use Interval), read by robfig/cron/v3 in Zone. Exactly one of Cron and Interval.
	Cron string
	// Interval is a fixed period, at least the ladder's unit: occurrences at Start + k*Interval
	// (Start zero: the Unix epoch). Exactly one of Cron and Interval.
	Interval time.Duration
	// Zone is the IANA time zone Cron is read in ("Europe/Berlin"); empty means UTC.
	Zone string
	// Exchange is the target exchange of each occurrence (it must exist; not "").
	Exchange string
	// RoutingKey is each occurrence's routing key (at most 255 bytes).
	RoutingKey string
	// Message is each occurrence's body, headers and properties (MessageId and Timestamp set per
	// occurrence; DeliveryMode 0: persistent; header names rabbitdelay-schedule* and
	// rabbitdelay-occurrence* refused, they are the package's own).
	Message amqp.Publishing
	// Jitter delays each occurrence by [0, Jitter), the same on every instance; the id keeps its time.
	Jitter time.Duration
	// Start and End bound the occurrences (inclusive); zero means unbounded.
	Start, End time.Time
	// Missed is what fires of the occurrences missed while no instance ran; zero: [MissedLatest].
	Missed MissedPolicy
}

// MaxNameLen is the longest schedule name, in bytes.
const MaxNameLen = 100

// MissedPolicy says which occurrences fire when the chain resumes after its next occurrence's
// time has passed too (every instance was down).
type MissedPolicy int

const (
	// MissedLatest (the default) fires the latest missed occurrence once, late; the earlier
	// ones are counted as missed.
	MissedLatest MissedPolicy = iota
	// MissedAll fires every missed occurrence, oldest first, each late.
	MissedAll
	// MissedSkip fires none; the chain resumes with the first occurrence after now.
	MissedSkip
)

var missedNames = [...]string{MissedLatest: "latest", MissedAll: "all", MissedSkip: "skip"}

func (p MissedPolicy) valid() bool { return p >= MissedLatest && p <= MissedSkip }

// String returns "latest", "all" or "skip".
func (p MissedPolicy) String() string {
	if !p.valid() {
		return fmt.Sprintf("MissedPolicy(%d)", int(p))
	}
	return missedNames[p]
}

// ParseMissedPolicy reads "latest", "all" or "skip"; "" gives [MissedLatest]. Other text
// returns an error wrapping [ErrInvalidSchedule] that quotes it.
func ParseMissedPolicy(s string) (MissedPolicy, error) {
	if i := slices.Index(missedNames[:], cmp.Or(s, "latest")); i >= 0 {
		return MissedPolicy(i), nil
	}
	return 0, fmt.Errorf("%w: missed policy %q: want latest, all or skip", ErrInvalidSchedule, s)
}

// ErrInvalidSchedule is wrapped by every error about a Schedule's fields.
var ErrInvalidSchedule = errors.New("schedule: invalid schedule")

var nameRE = regexp.MustCompile(`^[A-Za-z0-9._-]+$`)

var cronParser = cron.NewParser(cron.SecondOptional | cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// Validate checks s without touching the network; unit is the ladder's unit, the smallest
// Interval (0: 1 ms). It returns every problem, joined, each wrapping ErrInvalidSchedule and
// naming the field and the fix.
func (s Schedule) Validate(unit time.Duration) error {
	_, err := s.compile(unit)
	return err
}

// compiled is a validated Schedule with its parsed cron expression and zone.
type compiled struct {
	Schedule
	loc  *time.Location
	spec *cron.SpecSchedule // nil for Interval
	hash string
}

func (s Schedule) compile(unit time.Duration) (*compiled, error) {
	if unit <= 0 {
		unit = time.Millisecond
	}
	var errs []error
	add := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("%w: "+format, append([]any{ErrInvalidSchedule}, args...)...))
	}
	c := &compiled{Schedule: s}
	switch {
	case s.Name == "":
		add("Name is empty: give the schedule a name of letters, digits and . _ -")
	case len(s.Name) > MaxNameLen:
		add("Name %q is %d bytes: at most %d (it is part of each occurrence's message id)", short(s.Name), len(s.Name), MaxNameLen)
	case !nameRE.MatchString(s.Name):
		add("Name %q: use only letters, digits and . _ - (it is part of each occurrence's message id, <name>@<time>)", short(s.Name))
	}
	c.loc, c.spec = s.checkTiming(unit, add)
	// Target and message are checked here: an occurrence refused when it fires, long after
	// Declare, would stall the chain.
	switch {
	case s.Exchange == "":
		add("Exchange is empty: name the target exchange each occurrence is published to (the default exchange cannot be bound)")
	case len(s.Exchange) > 255:
		add("Exchange is %d bytes: at most 255 (an AMQP short string)", len(s.Exchange))
	}
	if len(s.RoutingKey) > 255 {
		add("RoutingKey is %d bytes: at most 255 (an AMQP short string)", len(s.RoutingKey))
	}
	if s.Message.DeliveryMode > 2 {
		add("Message.DeliveryMode %d: want 0 (persistent), 1 (transient) or 2 (persistent)", s.Message.DeliveryMode)
	}
	for k := range s.Message.Headers {
		if isOwnHeader(k) {
			add("Message.Headers[%q]: header names starting with %q or %q are the schedule package's own; rename it", k, ScheduleHeader, OccurrenceHeader)
		}
	}
	if err := s.Message.Headers.Validate(); err != nil {
		add("Message.Headers: %v", err)
	} else {
		// Stays: Declare writes the headers to the schedules stream, and a NaN closes the connection.
		for _, p := range route.TableProblems("Message.Headers", s.Message.Headers) {
			add("%s", p)
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	c.hash = s.hash()
	return c, nil
}

// checkTiming reports s's timing problems through add; it returns the zone and cron expression.
func (s Schedule) checkTiming(unit time.Duration, add func(format string, args ...any)) (loc *time.Location, cs *cron.SpecSchedule) {
	loc, err := time.LoadLocation(s.Zone) // "" is UTC
	if err != nil {
		add("Zone %q is not a known IANA time zone (like Europe/Berlin or America/New_York): %v", s.Zone, err)
		loc = time.UTC
	}
	switch {
	case s.Cron == "" && s.Interval == 0:
		add("neither Cron nor Interval is set: give a cron expression (\"0 1 28 * *\") or an interval")
	case s.Cron != "" && s.Interval != 0:
		add("both Cron %q and Interval %v are set: keep one", s.Cron, s.Interval)
	case strings.HasPrefix(strings.TrimSpace(s.Cron), "@every"):
		add("Cron %q: @every counts from each instance's start, so instances would disagree on the times; use Interval instead", s.Cron)
	case strings.Contains(s.Cron, "TZ="):
		add("Cron %q names a zone: put it in Zone instead", s.Cron)
	case s.Cron != "":
		sched, err := cronParser.Parse(s.Cron)
		spec, ok := sched.(*cron.SpecSchedule)
		switch {
		case err != nil:
			add("Cron %q is not a valid cron expression (fields: [second] minute hour day-of-month month day-of-week, or a descriptor like @daily): %v", s.Cron, err)
		case !ok:
			add("Cron %q: only fixed expressions and @yearly/@monthly/@weekly/@daily/@hourly are supported", s.Cron)
		default:
			spec.Location = loc
			cs = spec
		}
	case s.Interval < 0:
		add("Interval %v is negative: give a positive period", s.Interval)
	case s.Interval < unit:
		add("Interval %v is under the delay ladder's unit %v: use at least %v", s.Interval, unit, unit)
	case s.Interval%unit != 0:
		add("Interval %v is not a whole number of the ladder's unit %v: round it to one", s.Interval, unit)
	}
	if s.Jitter < 0 {
		add("Jitter %v is negative: give 0 (none) or a positive duration", s.Jitter)
	} else if s.Interval > 0 && s.Jitter >= s.Interval {
		add("Jitter %v is not under Interval %v: occurrences would swap order; make it shorter", s.Jitter, s.Interval)
	}
	if !s.Start.IsZero() && !s.End.IsZero() && s.End.Before(s.Start) {
		add("End %s is before Start %s: swap them or move End later", s.End.Format(time.RFC3339), s.Start.Format(time.RFC3339))
	}
	if !s.Missed.valid() {
		add("Missed %d: want MissedLatest, MissedAll or MissedSkip", int(s.Missed))
	}
	return loc, cs
}

func short(s string) string {
	if len(s) > 40 {
		return s[:40] + "..."
	}
	return s
}

// definition is the part of a Schedule stored as JSON in a definition record (times in UTC,
// RFC 3339); the message is the record's own body, headers and properties.
type definition struct {
	Cron       string    `json:"cron,omitempty"`
	IntervalMs int64     `json:"interval_ms,omitempty"`
	IntervalNs int64     `json:"interval_ns,omitempty"`
	Zone       string    `json:"zone,omitempty"`
	Exchange   string    `json:"exchange"`
	RoutingKey string    `json:"routing_key"`
	JitterNs   int64     `json:"jitter_ns,omitempty"`
	Start      time.Time `json:"start,omitzero"`
	End        time.Time `json:"end,omitzero"`
	Missed     string    `json:"missed"`
}

func (s Schedule) definition() definition {
	return definition{Cron: s.Cron, IntervalNs: int64(s.Interval), IntervalMs: s.Interval.Milliseconds(), Zone: s.Zone,
		Exchange: s.Exchange, RoutingKey: s.RoutingKey, JitterNs: int64(s.Jitter), Start: s.Start.UTC(), End: s.End.UTC(),
		Missed: s.Missed.String()}
}

func (d definition) schedule(name string, msg amqp.Publishing) (Schedule, error) {
	missed, err := ParseMissedPolicy(d.Missed)
	return Schedule{Name: name, Cron: d.Cron, Interval: time.Duration(d.IntervalNs), Zone: d.Zone, Exchange: d.Exchange,
		RoutingKey: d.RoutingKey, Jitter: time.Duration(d.JitterNs), Start: d.Start, End: d.End, Message: msg, Missed: missed}, err
}

// String describes the schedule's timing in one line: "cron 0 1 28 * * (Europe/Berlin)" or
// "every 2s", with jitter, start, end and the missed policy when set.
func (s Schedule) String() string {
	var b strings.Builder
	if s.Cron != "" {
		fmt.Fprintf(&b, "cron %q (%s)", s.Cron, cmp.Or(s.Zone, "UTC"))
	} else {
		fmt.Fprintf(&b, "every %v", s.Interval)
	}
	if s.Jitter > 0 {
		fmt.Fprintf(&b, ", jitter %v", s.Jitter)
	}
	if !s.Start.IsZero() {
		fmt.Fprintf(&b, ", from %s", s.Start.UTC().Format(time.RFC3339))
	}
	if !s.End.IsZero() {
		fmt.Fprintf(&b, ", until %s", s.End.UTC().Format(time.RFC3339))
	}
	fmt.Fprintf(&b, ", missed: %s, to %q key %q", s.Missed, s.Exchange, s.RoutingKey)
	return b.String()
}

// hash is a digest of everything that defines the schedule: its timing, target and message.
func (s Schedule) hash() string {
	h := sha256.New()
	js, _ := json.Marshal(s.definition())
	h.Write(js)
	m := s.Message
	fmt.Fprintf(h, "\x00%q|%q|%d|%d|%q|%q|%q|%q|%q|%q|%q\x00", m.ContentType, m.ContentEncoding, normMode(m.DeliveryMode), m.Priority,
		m.CorrelationId, m.ReplyTo, m.Expiration, m.Type, m.UserId, m.AppId, s.Name)
	writeCanonical(h, map[string]any(m.Headers))
	h.Write([]byte{0})
	h.Write(m.Body)
	return hex.EncodeToString(h.Sum(nil))[:16]
}

func normMode(m uint8) uint8 {
	if m == 0 {
		return amqp.Persistent
	}
	return m
}

// writeCanonical writes v in a form that does not depend on map order or integer width.
func writeCanonical(w interface{ Write([]byte) (int, error) }, v any) {
	switch x := v.(type) {
	case nil:
		fmt.Fprint(w, "n")
	case map[string]any:
		fmt.Fprint(w, "{")
		for _, k := range slices.Sorted(maps.Keys(x)) {
			fmt.Fprintf(w, "%q:", k)
			writeCanonical(w, x[k])
			fmt.Fprint(w, ",")
		}
		fmt.Fprint(w, "}")
	case amqp.Table:
		writeCanonical(w, map[string]any(x))
	case []any:
		fmt.Fprint(w, "[")
		for _, e := range x {
			writeCanonical(w, e)
			fmt.Fprint(w, ",")
		}
		fmt.Fprint(w, "]")
	case []byte:
		fmt.Fprintf(w, "b%x", x)
	case string:
		fmt.Fprintf(w, "s%q", x)
	case time.Time:
		fmt.Fprintf(w, "t%d", x.Unix())
	case bool:
		fmt.Fprintf(w, "B%v", x)
	case float32, float64:
		fmt.Fprintf(w, "f%v", x)
	default:
		switch rv := reflect.ValueOf(v); {
		case rv.CanInt():
			fmt.Fprintf(w, "i%d", rv.Int())
		case rv.CanUint() && rv.Kind() != reflect.Uintptr:
			fmt.Fprintf(w, "i%d", rv.Uint())
		default:
			fmt.Fprintf(w, "?%T%v", v, v)
		}
	}
}

// Next returns the first occurrence time strictly after t, or the zero time when there is none
// (past End, or no time matches the cron expression within five years).
func (c *compiled) Next(t time.Time) time.Time {
	if !c.Start.IsZero() && t.Before(c.Start) {
		// the first occurrence at or after Start
		t = c.Start.Add(-time.Nanosecond)
	}
	var n time.Time
	if c.spec != nil {
		n = nextCron(c.spec, c.loc, t)
	} else {
		anchor := c.Start
		if anchor.IsZero() {
			anchor = time.Unix(0, 0)
		}
		d := t.Sub(anchor)
		k := int64(0)
		if d >= 0 {
			k = int64(d/c.Interval) + 1
		}
		n = anchor.Add(time.Duration(k) * c.Interval)
	}
	if n.IsZero() || (!c.End.IsZero() && n.After(c.End)) {
		return time.Time{}
	}
	return n.UTC()
}

// jitter returns the occurrence at's delay within [0, Jitter): FNV-1a of the name and the time.
func (c *compiled) jitter(at time.Time) time.Duration {
	if c.Jitter <= 0 {
		return 0
	}
	h := fnv.New64a()
	fmt.Fprintf(h, "%s@%d", c.Name, at.UnixNano())
	return time.Duration(h.Sum64() % uint64(c.Jitter))
}

// due is when occurrence at fires: at plus its jitter.
func (c *compiled) due(at time.Time) time.Time { return at.Add(c.jitter(at)) }

// OccurrenceID returns the message id of schedule name's occurrence at: "<name>@<time>", the
// time in UTC as RFC 3339 with as many fractional digits as it needs.
func OccurrenceID(name string, at time.Time) string {
	return name + "@" + fmtTime(at)
}

// ParseOccurrenceID splits an [OccurrenceID] into the schedule's name and the occurrence's time.
// An id without '@', or whose time is not RFC 3339, returns an error that quotes it.
func ParseOccurrenceID(id string) (name string, at time.Time, err error) {
	i := strings.LastIndexByte(id, '@')
	if i <= 0 {
		return "", time.Time{}, fmt.Errorf("schedule: %q is not an occurrence id (<name>@<RFC 3339 time>)", id)
	}
	at, err = time.Parse(time.RFC3339Nano, id[i+1:])
	if err != nil {
		return "", time.Time{}, fmt.Errorf("schedule: %q is not an occurrence id: %w", id, err)
	}
	return id[:i], at, nil
}

// linkID is the message id of the link for occurrence at of the definition with hash h.
func linkID(name string, at time.Time, h string) string {
	return "schedule-link:" + OccurrenceID(name, at) + "#" + h
}

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
