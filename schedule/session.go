package schedule

import (
	"cmp"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/rs/zerolog"

	"github.com/delaykit/rabbitdelay/amqpdelay"
	"github.com/delaykit/rabbitdelay/internal/amqpconn"
	"github.com/delaykit/rabbitdelay/internal/delayspec"
	"github.com/delaykit/rabbitdelay/internal/route"
)

// ErrConnectionLost: the connection that reads the stream and publishes records closed; the
// operation's outcome is unknown and a new connection is made on the next call.
var ErrConnectionLost = errors.New("schedule: connection lost")

// session is one connection: a channel in confirm mode that publishes records and occurrences
// and consumes links, and a channel that reads the stream from its first record into st.
type session struct {
	conn     *amqp.Connection
	ch       *amqp.Channel
	log      zerolog.Logger
	n        objectNames
	instance string // in the marker records

	mu      sync.Mutex
	st      *state
	markers map[string]chan struct{}

	life context.Context         // done when the session died, its cause why
	die  context.CancelCauseFunc // the first cause wins
}

func (s *session) kill(err error) {
	s.die(err)
	_ = s.conn.Close()
}

func (s *session) alive() bool { return s.life.Err() == nil }

// declareObjects declares, idempotently, the stream, the fire exchange bound to it, and the links
// exchange (bound to the dispatch exchange as `rabbitdelay apply` binds a target) and queue.
func declareObjects(conn *amqp.Connection, spec delayspec.Spec, n objectNames, maxAge string) error {
	ch, err := conn.Channel()
	if err != nil {
		return err
	}
	defer ch.Close()
	queue := func(name string, args amqp.Table) func() error {
		return func() error { _, err := ch.QueueDeclare(name, true, false, false, false, args); return err }
	}
	exchange := func(name, kind string) func() error {
		return func() error { return ch.ExchangeDeclare(name, kind, true, false, false, false, nil) }
	}
	dispatch := spec.Names().Dispatch()
	// The links queue: quorum (replicated), a single active consumer so one instance at a time
	// handles links, and a delivery limit far above what connection losses cause (RabbitMQ 4.x
	// would otherwise drop a link after 20 returns).
	linksArgs := amqp.Table{"x-queue-type": "quorum", "x-single-active-consumer": true, "x-delivery-limit": int64(1_000_000)}
	for _, s := range []struct {
		what string
		do   func() error
	}{
		{"stream " + n.stream(), queue(n.stream(), amqp.Table{"x-queue-type": "stream", "x-max-age": maxAge})},
		{"exchange " + n.fire(), exchange(n.fire(), amqp.ExchangeHeaders)},
		{"binding " + n.fire() + " -> " + n.stream(), func() error { return ch.QueueBind(n.stream(), "", n.fire(), false, nil) }},
		{"exchange " + n.links(), exchange(n.links(), amqp.ExchangeFanout)},
		{"queue " + n.links(), queue(n.links(), linksArgs)},
		{"binding " + n.links() + " -> queue " + n.links(), func() error { return ch.QueueBind(n.links(), "", n.links(), false, nil) }},
		{"binding " + dispatch + " -> " + n.links(), func() error {
			return ch.ExchangeBind(n.links(), "", dispatch, false, amqp.Table{"x-match": "all", route.TargetHeader: n.links()})
		}},
	} {
		if err := s.do(); err != nil {
			if amqpconn.IsNotFound(err) {
				return fmt.Errorf("schedule: declare %s: %w (run `rabbitdelay apply` for prefix %q first)", s.what, err, spec.WithDefaults().Prefix)
			}
			return fmt.Errorf("schedule: declare %s: %w", s.what, err)
		}
	}
	return nil
}

// errNoStream: dialSession without declare found no schedules stream.
var errNoStream = errors.New("schedule: no schedules stream")

// dialSession connects, declares the objects (or checks that the stream exists), reads the stream.
func dialSession(ctx context.Context, cfg amqpdelay.Config, n objectNames, o options, declare bool) (*session, error) {
	conn, err := amqpdelay.Dial(ctx, cfg, o.name)
	if err != nil {
		return nil, err
	}
	ok := false
	defer func() {
		if !ok {
			_ = conn.Close()
		}
	}()
	if !declare {
		probe, err := conn.Channel()
		if err != nil {
			return nil, err
		}
		if _, err := probe.QueueDeclarePassive(n.stream(), true, false, false, false, nil); amqpconn.IsNotFound(err) {
			return nil, fmt.Errorf("%w: stream %q: %w (no schedule was ever declared under prefix %q)", errNoStream, n.stream(), err, n.Prefix)
		} else if err != nil {
			return nil, fmt.Errorf("schedule: check stream %q: %w", n.stream(), err)
		}
		_ = probe.Close()
	}
	spec, err := delayspec.ReadRecord(ctx, conn, n.Prefix)
	if errors.Is(err, delayspec.ErrNoRecord) {
		err = fmt.Errorf("%w: %w", amqpdelay.ErrTopologyMissing, err)
	}
	if err != nil {
		return nil, fmt.Errorf("schedule: %w", err)
	}
	if declare {
		if err := declareObjects(conn, spec, n, o.maxAge); err != nil {
			return nil, err
		}
	}
	ch, err := conn.Channel()
	if err != nil {
		return nil, err
	}
	if err := ch.Confirm(false); err != nil {
		return nil, err
	}
	rd, err := conn.Channel()
	if err != nil {
		return nil, err
	}
	if err := rd.Qos(500, 0, false); err != nil {
		return nil, err
	}
	deliveries, err := rd.Consume(n.stream(), "", false, false, false, false, amqp.Table{"x-stream-offset": "first"})
	if err != nil {
		return nil, fmt.Errorf("schedule: read stream %q: %w", n.stream(), err)
	}
	s := &session{conn: conn, ch: ch, log: o.log, n: n, instance: o.instance, st: newState(spec.Ladder.Unit),
		markers: map[string]chan struct{}{}}
	s.life, s.die = context.WithCancelCause(context.Background())
	closed := conn.NotifyClose(make(chan *amqp.Error, 1))
	chClosed := ch.NotifyClose(make(chan *amqp.Error, 1))
	go func() {
		select {
		case e := <-closed:
			s.kill(fmt.Errorf("%w: %v", ErrConnectionLost, e))
		case e := <-chClosed:
			s.kill(fmt.Errorf("%w: channel: %v", ErrConnectionLost, e))
		case <-s.life.Done():
		}
	}()
	go s.read(deliveries)
	ok = true
	return s, nil
}

// read applies the stream's records to st until the channel closes.
func (s *session) read(deliveries <-chan amqp.Delivery) {
	for d := range deliveries {
		r, ok, err := parseRecord(d)
		if err != nil {
			s.log.Warn().Err(err).Msg("schedule: unreadable record in the schedules stream, skipped")
		}
		s.mu.Lock()
		if ok && r.kind != recMarker {
			s.st.apply(r)
		} else if c := s.markers[r.marker]; ok && c != nil {
			close(c)
			delete(s.markers, r.marker)
		}
		s.mu.Unlock()
		_ = d.Ack(false)
	}
	s.kill(fmt.Errorf("%w: stream consumer ended", ErrConnectionLost))
}

// publish publishes msg on the confirm channel and waits for the broker's confirm.
func (s *session) publish(ctx context.Context, exchange, key string, msg amqp.Publishing) error {
	dc, err := s.ch.PublishWithDeferredConfirmWithContext(ctx, exchange, key, false, false, msg)
	if err != nil {
		return fmt.Errorf("%w: publish: %v", ErrConnectionLost, err)
	}
	if err := wait(ctx, s, dc.Done()); err != nil {
		return err
	}
	if !dc.Acked() {
		if !s.alive() {
			return s.err()
		}
		return errors.New("schedule: the broker nacked a publish")
	}
	return nil
}

// wait returns nil when done delivers or is closed, or ctx's error, or s's loss.
func wait[T any](ctx context.Context, s *session, done <-chan T) error {
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-s.life.Done():
		return s.err()
	}
}

// err is why the session died, or ErrConnectionLost.
func (s *session) err() error { return cmp.Or(context.Cause(s.life), ErrConnectionLost) }

// record publishes a record to the stream (through the default exchange).
func (s *session) record(ctx context.Context, msg amqp.Publishing) error {
	return s.publish(ctx, "", s.n.stream(), msg)
}

// sync returns once every record the broker confirmed before the call is in st: it publishes a
// marker record and waits until the reader has read it (a stream keeps publish order).
func (s *session) sync(ctx context.Context) error {
	id := rand.Text()
	seen := make(chan struct{})
	s.mu.Lock()
	s.markers[id] = seen
	s.mu.Unlock()
	m := plainRecord(recMarker, "", "", time.Time{}, time.Time{}, 0, s.instance, time.Now())
	m.Headers[markerHeader] = id
	if err := s.record(ctx, m); err != nil {
		s.mu.Lock()
		delete(s.markers, id)
		s.mu.Unlock()
		return err
	}
	return wait(ctx, s, seen)
}

// queued returns the links queue's ready messages (a passive declare on a channel of its own):
// 0 when the queue does not exist, -1 when the broker did not answer.
func (s *session) queued() int {
	ch, err := s.conn.Channel()
	if err != nil {
		return -1
	}
	q, err := ch.QueueDeclarePassive(s.n.links(), true, false, false, false, nil)
	_ = ch.Close()
	switch {
	case amqpconn.IsNotFound(err):
		return 0
	case err != nil:
		return -1
	}
	return q.Messages
}

// view runs f on the state, under the session's lock.
func (s *session) view(f func(*state)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f(s.st)
}
