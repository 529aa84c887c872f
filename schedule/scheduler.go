package schedule

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/cenkalti/backoff/v4"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/rs/zerolog"

	"github.com/delaykit/rabbitdelay/amqpdelay"
	"github.com/delaykit/rabbitdelay/internal/amqpconn"
	"github.com/delaykit/rabbitdelay/internal/pubhook"
)

// ErrUnknownSchedule: no schedule of that name was ever declared under the prefix.
var ErrUnknownSchedule = errors.New("schedule: unknown schedule")

// Scheduler declares schedules and, in [Scheduler.Run], takes its turn at firing their
// occurrences; every instance of a service may run one. Safe for concurrent use.
type Scheduler struct {
	cfg   amqpdelay.Config
	names objectNames
	unit  time.Duration
	opts  options
	pub   *amqpdelay.Publisher

	opMu sync.Mutex // one sync-decide-write at a time in this instance

	sessMu sync.Mutex
	sess   *session
}

// New declares the schedule objects under cfg.Prefix (idempotent), starts a Publisher for links
// (the delay topology must exist: `rabbitdelay apply`), and reads the stream; ctx bounds it.
// Errors: ErrInvalidConfig (one per bad Options field, joined), the Publisher's
// (amqpdelay.ErrTopologyMissing, ...), the connection's.
func New(ctx context.Context, cfg amqpdelay.Config, opts Options) (*Scheduler, error) {
	o, err := opts.resolve(true)
	if err != nil {
		return nil, err
	}
	s := &Scheduler{cfg: cfg, names: namesOf(cfg.Prefix), opts: o}
	sess, err := s.session(ctx)
	if err != nil {
		return nil, err
	}
	s.unit = sess.st.unit // the ladder's, from the spec record
	// The links exchange is a target the spec record does not list; the session declared it.
	pcfg := amqpdelay.Config{URL: cfg.URL, TLSCA: cfg.TLSCA, TLSCert: cfg.TLSCert, TLSKey: cfg.TLSKey, Prefix: cfg.Prefix,
		ConnectionName: o.name + "-links", Logger: o.log, Channels: 1}
	pubhook.ExtraTargets(s.names.links()).(func(*amqpdelay.Config))(&pcfg)
	s.pub, err = amqpdelay.NewPublisher(ctx, pcfg)
	if err != nil {
		sess.kill(errors.New("closed"))
		return nil, fmt.Errorf("schedule: links publisher: %w", err)
	}
	return s, nil
}

func defaultInstance() string {
	h, _ := os.Hostname()
	var b [2]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("%s-%d-%s", h, os.Getpid(), hex.EncodeToString(b[:]))
}

// Instance returns this instance's id (Options.Instance, or the default made by New).
func (s *Scheduler) Instance() string { return s.opts.instance }

// session returns a live session, dialling a new one when the last one died.
func (s *Scheduler) session(ctx context.Context) (*session, error) {
	s.sessMu.Lock()
	defer s.sessMu.Unlock()
	if s.sess != nil && s.sess.alive() {
		return s.sess, nil
	}
	sess, err := dialSession(ctx, s.cfg, s.names, s.opts, true)
	if err != nil {
		return nil, err
	}
	s.sess = sess
	return sess, nil
}

// Close closes the Scheduler's connections. A link being handled is given back to the queue.
// The error is the links Publisher's, from closing it.
func (s *Scheduler) Close() error {
	s.sessMu.Lock()
	if s.sess != nil {
		s.sess.kill(errors.New("schedule: closed"))
	}
	s.sessMu.Unlock()
	return s.pub.Close()
}

// Declare makes sch exist as given, once the broker confirmed what it wrote; every instance may
// call it at start. The same definition with a pending link (or paused) writes nothing; with
// none ([Info.Broken]) a link for the occurrence after the last handled repairs it. A new,
// changed or removed one writes a definition record and a link for the first occurrence after
// now; the earlier definition's links, and duplicates, are dropped when they arrive. Errors:
// ErrInvalidSchedule (every problem, joined), amqpdelay.ErrExchangeNotFound (no target
// exchange), ErrConnectionLost, the links Publisher's, ctx's.
func (s *Scheduler) Declare(ctx context.Context, sch Schedule) error {
	c, err := sch.compile(s.unit)
	if err != nil {
		return err
	}
	s.opMu.Lock()
	defer s.opMu.Unlock()
	sess, err := s.session(ctx)
	if err != nil {
		return err
	}
	if err := s.bindTarget(sess, c.Exchange); err != nil {
		return err
	}
	queued := sess.queued() // before the sync: a link handled in between is then known
	if err := sess.sync(ctx); err != nil {
		return err
	}
	s.opts.metrics.init(c.Name)
	var same, paused, pending, lost bool
	var from, next time.Time
	now := time.Now()
	sess.view(func(st *state) {
		e := st.entries[c.Name]
		if e == nil || e.def == nil || e.hash != c.hash || e.state == stateRemoved {
			return
		}
		same, paused, pending = true, e.state == statePaused, e.pending()
		if lost = e.lost(now, s.opts.grace, queued); lost {
			next = e.link
		}
		if e.linkHash == e.hash { // else the links recorded are an earlier definition's: start after now
			from = e.link
			if e.lastFired.After(from) {
				from = e.lastFired
			}
		}
	})
	if same && (paused || pending && !lost) {
		return nil
	}
	switch {
	case !same:
		if err := sess.record(ctx, definitionRecord(c.Schedule, c.hash, stateActive, s.opts.instance, now)); err != nil {
			return err
		}
		next = c.Next(now)
	case lost:
		s.opts.log.Warn().Str("schedule", c.Name).Time("link", next).Msg("schedule: pending link lost; publishing it again")
	case from.IsZero():
		next = c.Next(now)
	default:
		next = c.Next(from)
	}
	if next.IsZero() {
		return nil // no occurrence left
	}
	return s.startChain(ctx, sess, c, next)
}

// startChain publishes the link for occurrence at of c, then its link record.
func (s *Scheduler) startChain(ctx context.Context, sess *session, c *compiled, at time.Time) error {
	if err := s.publishLink(ctx, c, at); err != nil {
		return err
	}
	return sess.record(ctx, plainRecord(recLink, c.Name, c.hash, at, time.Time{}, 0, s.opts.instance, time.Now()))
}

// publishLink publishes the link for occurrence at of c, due when it fires.
func (s *Scheduler) publishLink(ctx context.Context, c *compiled, at time.Time) error {
	body, _ := json.Marshal(link{Name: c.Name, At: at.UTC(), Hash: c.hash})
	msg := amqp.Publishing{MessageId: linkID(c.Name, at, c.hash), ContentType: "application/json", Body: body}
	if _, err := s.pub.PublishAt(ctx, s.names.links(), c.Name, msg, c.due(at)); err != nil {
		return fmt.Errorf("schedule: publish the link of %s: %w", OccurrenceID(c.Name, at), err)
	}
	return nil
}

// bindTarget binds exchange to the fire exchange on a channel of its own (a 404 closes it).
func (s *Scheduler) bindTarget(sess *session, exchange string) error {
	ch, err := sess.conn.Channel()
	if err != nil {
		return fmt.Errorf("%w: %v", ErrConnectionLost, err)
	}
	err = ch.ExchangeBind(exchange, "", s.names.fire(), false, amqp.Table{"x-match": "all", TargetHeader: exchange})
	if err != nil {
		if amqpconn.IsNotFound(err) {
			return fmt.Errorf("%w: target exchange %q does not exist: declare it (or correct Schedule.Exchange)", amqpdelay.ErrExchangeNotFound, exchange)
		}
		return fmt.Errorf("schedule: bind %q to %q: %w", s.names.fire(), exchange, err)
	}
	_ = ch.Close()
	return nil
}

// Pause stops schedule name's occurrences until [Scheduler.Resume]: links that arrive while it
// is paused are dropped. Errors: ErrUnknownSchedule (also for a removed schedule),
// ErrConnectionLost, ctx's.
func (s *Scheduler) Pause(ctx context.Context, name string) error {
	_, err := s.setState(ctx, name, statePaused)
	return err
}

// Resume restarts a paused schedule from its first occurrence after now; an active one is left
// as is, a removed one must be declared again. Errors: as [Scheduler.Pause]'s.
func (s *Scheduler) Resume(ctx context.Context, name string) error {
	_, err := s.setState(ctx, name, stateActive)
	return err
}

// Remove ends schedule name: no occurrence fires after it returns, and its pending link is
// revoked (amqpdelay.Publisher.Revoke). Declaring it again starts it anew. Errors:
// ErrUnknownSchedule, ErrConnectionLost, ctx's.
func (s *Scheduler) Remove(ctx context.Context, name string) error {
	e, err := s.setState(ctx, name, stateRemoved)
	if err != nil || e.link.IsZero() {
		return err
	}
	if err := s.pub.Revoke(ctx, linkID(name, e.link, e.linkHash)); err != nil {
		return fmt.Errorf("schedule: %q is removed, but its pending link was not revoked (it will be dropped when it arrives): %w", name, err)
	}
	return nil
}

func (s *Scheduler) setState(ctx context.Context, name, st string) (entry, error) {
	s.opMu.Lock()
	defer s.opMu.Unlock()
	sess, err := s.session(ctx)
	if err != nil {
		return entry{}, err
	}
	if err := sess.sync(ctx); err != nil {
		return entry{}, err
	}
	var e entry // e.def stays nil when name is unknown
	sess.view(func(stt *state) {
		if x := stt.entries[name]; x != nil && x.def != nil {
			e = *x
		}
	})
	switch {
	case e.def == nil:
		return e, fmt.Errorf("%w: %q under prefix %q (`rabbitdelay schedules` lists them)", ErrUnknownSchedule, name, s.names.Prefix)
	case e.state == st:
		return e, nil
	case e.state == stateRemoved: // a pause would make Resume bring it back
		return e, fmt.Errorf("%w: %q was removed: declare it again to restart it", ErrUnknownSchedule, name)
	}
	if err := sess.record(ctx, definitionRecord(*e.def, e.hash, st, s.opts.instance, time.Now())); err != nil {
		return e, err
	}
	if st == stateActive && e.comp != nil {
		if next := e.comp.Next(time.Now()); !next.IsZero() {
			return e, s.startChain(ctx, sess, e.comp, next)
		}
	}
	return e, nil
}

// Info is what the stream says about one schedule.
type Info struct {
	Schedule Schedule // the latest definition
	Hash     string   // the definition's digest ([HashHeader])
	State    string   // active, paused or removed
	// Next is the pending link's occurrence, the next to fire (zero: none pending).
	Next time.Time
	// LastFired is the latest occurrence fired, by LastBy (an instance id) at LastAt.
	LastFired time.Time
	LastBy    string
	LastAt    time.Time
	// Fired counts the occurrences fired that the stream still holds.
	Fired int64
	// Broken reports an active schedule with occurrences left but no pending link: none
	// recorded, or the one recorded more than Options.LinkGrace past due while the links queue
	// holds no message. Nothing fires until the schedule is declared again, which repairs it.
	Broken  bool
	Problem string // why Broken is set
	Ended   bool   // an active schedule with no occurrence left (past End)
}

func infos(st *state, now time.Time, grace time.Duration, queued int) []Info {
	var out []Info
	for name, e := range st.entries {
		if e.def == nil {
			continue
		}
		i := Info{Schedule: *e.def, Hash: e.hash, State: e.state, LastFired: e.lastFired, LastBy: e.lastBy, LastAt: e.lastAt, Fired: e.fired}
		i.Schedule.Name = name
		switch {
		case e.state != stateActive:
		case e.lost(now, grace, queued):
			i.Broken, i.Problem = true, fmt.Sprintf("its link for %s is %v past due and not in the links queue (purged, deleted or revoked)",
				fmtTime(e.link), now.Sub(e.comp.due(e.link)).Round(time.Second))
		case e.pending():
			i.Next = e.link
		default:
			if i.Ended = e.ended(now); !i.Ended {
				i.Broken, i.Problem = true, "no link is pending"
			}
		}
		out = append(out, i)
	}
	slices.SortFunc(out, func(a, b Info) int { return strings.Compare(a.Schedule.Name, b.Schedule.Name) })
	return out
}

// List returns every schedule of the prefix, sorted by name, as the stream says once read up to
// every record confirmed before the call. Errors: reconnecting's (as [New]'s), the sync's, ctx's.
func (s *Scheduler) List(ctx context.Context) ([]Info, error) {
	sess, err := s.session(ctx)
	if err != nil {
		return nil, err
	}
	return list(ctx, sess, s.opts.grace)
}

func list(ctx context.Context, sess *session, grace time.Duration) ([]Info, error) {
	queued := sess.queued() // before the sync: a link handled in between is then known
	if err := sess.sync(ctx); err != nil {
		return nil, err
	}
	var out []Info
	sess.view(func(st *state) { out = infos(st, time.Now(), grace, queued) })
	return out, nil
}

// Inspect lists the schedules of cfg.Prefix from the stream alone (it writes one marker record,
// declares nothing). No stream: none, no error. Of opts only LinkGrace counts (bad:
// ErrInvalidConfig). Other errors: the connection's, the broker's, ctx's.
func Inspect(ctx context.Context, cfg amqpdelay.Config, opts Options) ([]Info, error) {
	o, err := opts.resolve(false)
	if err != nil {
		return nil, err
	}
	o = options{name: "rabbitdelay-schedules-inspect", maxAge: DefaultRetention, log: zerolog.Nop(), instance: "inspect", grace: o.grace}
	sess, err := dialSession(ctx, cfg, namesOf(cfg.Prefix), o, false)
	if errors.Is(err, errNoStream) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer sess.kill(errors.New("done"))
	return list(ctx, sess, o.grace)
}

// Run handles links until ctx ends, then returns nil (never an error): as the links queue's
// active consumer when its turn comes, it fires each link's occurrence at its time. After a
// connection loss it connects again, with back-off, and logs why (Options.Logger).
func (s *Scheduler) Run(ctx context.Context) error {
	b := backoff.NewExponentialBackOff(backoff.WithInitialInterval(200*time.Millisecond), backoff.WithMaxInterval(5*time.Second), backoff.WithMaxElapsedTime(0))
	for ctx.Err() == nil {
		sess, err := s.session(ctx)
		if err == nil {
			err = s.consume(ctx, sess)
		}
		if ctx.Err() != nil {
			return nil
		}
		wait := b.NextBackOff()
		s.opts.log.Warn().Err(err).Dur("retry_in", wait).Msg("schedule: links consumer stopped")
		amqpconn.Sleep(ctx, wait)
	}
	return nil
}

func (s *Scheduler) consume(ctx context.Context, sess *session) error {
	if err := sess.ch.Qos(1, 0, false); err != nil {
		return err
	}
	tag := "schedule-" + s.opts.instance
	deliveries, err := sess.ch.ConsumeWithContext(ctx, s.names.links(), tag, false, false, false, false, nil)
	if err != nil {
		return fmt.Errorf("schedule: consume %q: %w", s.names.links(), err)
	}
	defer func() { _ = sess.ch.Cancel(tag, false) }()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-sess.life.Done():
			return sess.err()
		case d, ok := <-deliveries:
			if !ok {
				return sess.err()
			}
			if err := s.handle(ctx, sess, d); err != nil {
				if ctx.Err() != nil {
					_ = d.Nack(false, true)
					return nil
				}
				s.opts.log.Warn().Err(err).Msg("schedule: link given back")
				if sess.alive() {
					amqpconn.Sleep(ctx, time.Second)
					_ = d.Nack(false, true)
				}
				return err
			}
		}
	}
}

// handle handles one link as the package documentation describes.
func (s *Scheduler) handle(ctx context.Context, sess *session, d amqp.Delivery) error {
	var l link
	if err := json.Unmarshal(d.Body, &l); err != nil || l.Name == "" {
		s.opts.log.Warn().Str("message_id", d.MessageId).Msg("schedule: unreadable link dropped")
		return d.Ack(false)
	}
	// Wait for the occurrence's due time (its time plus its jitter): nothing fires early.
	due := l.At
	sess.view(func(st *state) {
		if e := st.entries[l.Name]; e != nil && e.comp != nil {
			due = e.comp.due(l.At)
		}
	})
	if left := time.Until(due); left > 0 {
		t := time.NewTimer(left)
		defer t.Stop()
		if err := wait(ctx, sess, t.C); err != nil {
			return err
		}
	}
	s.opMu.Lock()
	defer s.opMu.Unlock()
	if err := sess.sync(ctx); err != nil {
		return err
	}
	v, e := verdict{}, entry{}
	now := time.Now()
	sess.view(func(st *state) {
		x := st.entries[l.Name]
		if v = decide(x, l, now); x != nil {
			e = *x
		}
	})
	if v.drop != "" {
		s.opts.log.Debug().Str("schedule", l.Name).Time("at", l.At).Str("why", v.drop).Msg("schedule: link dropped")
		return d.Ack(false)
	}
	c := e.comp
	if e.def != nil && now.Sub(e.defAt) > s.opts.retention/2 {
		if err := sess.record(ctx, definitionRecord(*e.def, e.hash, e.state, s.opts.instance, now)); err != nil {
			return err
		}
	}
	// 1. The next link, confirmed, first: a crash from here on leaves at most a duplicate link.
	if !v.next.IsZero() {
		if err := s.publishLink(ctx, c, v.next); err != nil {
			return err
		}
	}
	// 2. The occurrence, or the record of what was skipped, on the channel that holds the link:
	// if this connection dies the link is requeued and nothing more is published on it.
	if err := s.fire(ctx, sess, c, v); err != nil {
		return err
	}
	return d.Ack(false) // 3. done with the link
}

// fire publishes what verdict v says: the occurrence, a skipped record, or a link record.
func (s *Scheduler) fire(ctx context.Context, sess *session, c *compiled, v verdict) error {
	switch {
	case !v.fire.IsZero():
		m := occurrenceMessage(c, v.fire, v.next, v.late, v.missed, s.opts.instance, time.Now())
		if err := sess.publish(ctx, s.names.fire(), c.RoutingKey, m); err != nil {
			return err
		}
		s.opts.metrics.fired(c.Name, v.late, v.missed)
		s.opts.log.Debug().Str("occurrence", m.MessageId).Dur("late", v.late).Int64("missed", v.missed).Time("next", v.next).Msg("schedule: fired")
	case !v.skip.IsZero():
		if err := sess.record(ctx, plainRecord(recSkipped, c.Name, c.hash, v.skip, v.next, v.missed, s.opts.instance, time.Now())); err != nil {
			return err
		}
		s.opts.metrics.fired(c.Name, -1, v.missed)
	case !v.next.IsZero():
		return sess.record(ctx, plainRecord(recLink, c.Name, c.hash, v.next, time.Time{}, 0, s.opts.instance, time.Now()))
	}
	return nil
}
