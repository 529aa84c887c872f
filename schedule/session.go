package schedule

import (
	"context"
	"crypto/rand"
	"encoding/hex"
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
	conn *amqp.Connection
	ch   *amqp.Channel
	log  zerolog.Logger
	unit time.Duration // the ladder's unit, from the spec record

	mu      sync.Mutex
	st      *state
	markers map[string]chan struct{}
	readErr error

	dead     chan struct{}
	deadOnce sync.Once
}

func (s *session) kill(err error) {
	s.deadOnce.Do(func() {
		s.mu.Lock()
		s.readErr = err
		s.mu.Unlock()
		close(s.dead)
		_ = s.conn.Close()
	})
}

func (s *session) alive() bool {
	select {
	case <-s.dead:
		return false
	default:
		return true
	}
}

// streamArgs are the schedules stream's arguments.
func streamArgs(maxAge string) amqp.Table {
	return amqp.Table{"x-queue-type": "stream", "x-max-age": maxAge}
}

// declareObjects declares the stream, the fire exchange and its binding to the stream, and the
// links exchange, queue and bindings (the dispatch exchange's binding to the links exchange, as
// `rabbitdelay apply` makes it for a target), all idempotent.
func declareObjects(conn *amqp.Connection, spec delayspec.Spec, n objectNames, maxAge string) error {
	ch, err := conn.Channel()
	if err != nil {
		return err
	}
	defer ch.Close()
	tn := spec.Names()
	steps := []struct {
		what string
		do   func() error
	}{
		{"stream " + n.stream(), func() error {
			_, err := ch.QueueDeclare(n.stream(), true, false, false, false, streamArgs(maxAge))
			return err
		}},
		{"exchange " + n.fire(), func() error {
			return ch.ExchangeDeclare(n.fire(), amqp.ExchangeHeaders, true, false, false, false, nil)
		}},
		{"binding " + n.fire() + " -> " + n.stream(), func() error { return ch.QueueBind(n.stream(), "", n.fire(), false, nil) }},
		{"exchange " + n.links(), func() error {
			return ch.ExchangeDeclare(n.links(), amqp.ExchangeFanout, true, false, false, false, nil)
		}},
		{"queue " + n.links(), func() error {
			_, err := ch.QueueDeclare(n.links(), true, false, false, false, linksArgs())
			return err
		}},
		{"binding " + n.links() + " -> queue " + n.links(), func() error { return ch.QueueBind(n.links(), "", n.links(), false, nil) }},
		{"binding " + tn.Dispatch() + " -> " + n.links(), func() error {
			return ch.ExchangeBind(n.links(), "", tn.Dispatch(), false, amqp.Table{"x-match": "all", route.TargetHeader: n.links()})
		}},
	}
	for _, s := range steps {
		if err := s.do(); err != nil {
			if amqpconn.IsNotFound(err) {
				return fmt.Errorf("schedule: declare %s: %w (run `rabbitdelay apply` for prefix %q first)", s.what, err, spec.WithDefaults().Prefix)
			}
			return fmt.Errorf("schedule: declare %s: %w", s.what, err)
		}
	}
	return nil
}

// linksArgs are the links queue's arguments: a quorum queue (replicated) read by a single
// active consumer, so one instance at a time handles links. Its delivery limit is far above
// what connection losses cause: RabbitMQ 4.x would otherwise drop a link after 20 returns.
func linksArgs() amqp.Table {
	return amqp.Table{"x-queue-type": "quorum", "x-single-active-consumer": true, "x-delivery-limit": int64(1_000_000)}
}

// errNoStream: dialSession without declare found no schedules stream.
var errNoStream = errors.New("schedule: no schedules stream")

// dialSession connects, declares the schedule objects (declare) or checks that the stream
// exists, and starts reading the stream. The ladder's unit, from the spec record, is the
// session's rounding of occurrences.
func dialSession(ctx context.Context, cfg amqpdelay.Config, name string, n objectNames, declare bool, maxAge string, log zerolog.Logger) (*session, error) {
	conn, err := amqpdelay.Dial(ctx, cfg, name)
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
	unit := spec.Ladder.Unit
	if declare {
		if err := declareObjects(conn, spec, n, maxAge); err != nil {
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
	s := &session{conn: conn, ch: ch, log: log, st: newState(unit), markers: map[string]chan struct{}{}, dead: make(chan struct{})}
	closed := conn.NotifyClose(make(chan *amqp.Error, 1))
	chClosed := ch.NotifyClose(make(chan *amqp.Error, 1))
	go func() {
		select {
		case e := <-closed:
			s.kill(fmt.Errorf("%w: %v", ErrConnectionLost, e))
		case e := <-chClosed:
			s.kill(fmt.Errorf("%w: channel: %v", ErrConnectionLost, e))
		case <-s.dead:
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
		if ok {
			if r.kind == recMarker {
				if c := s.markers[r.marker]; c != nil {
					close(c)
					delete(s.markers, r.marker)
				}
			} else {
				s.st.apply(r)
			}
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
	select {
	case <-dc.Done():
	case <-ctx.Done():
		return ctx.Err()
	case <-s.dead:
		return s.err()
	}
	if !dc.Acked() {
		if !s.alive() {
			return s.err()
		}
		return errors.New("schedule: the broker nacked a publish")
	}
	return nil
}

func (s *session) err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.readErr != nil {
		return s.readErr
	}
	return ErrConnectionLost
}

// record publishes a record to the stream (through the default exchange).
func (s *session) record(ctx context.Context, stream string, msg amqp.Publishing) error {
	return s.publish(ctx, "", stream, msg)
}

// sync returns once every record the broker confirmed before the call is in st: it publishes a
// marker record and waits until the reader has read it (a stream keeps publish order).
func (s *session) sync(ctx context.Context, stream, instance string) error {
	var b [12]byte
	_, _ = rand.Read(b[:])
	id := hex.EncodeToString(b[:])
	seen := make(chan struct{})
	s.mu.Lock()
	s.markers[id] = seen
	s.mu.Unlock()
	m := plainRecord(recMarker, "", "", time.Time{}, time.Time{}, 0, instance, time.Now())
	m.Headers[markerHeader] = id
	if err := s.record(ctx, stream, m); err != nil {
		s.mu.Lock()
		delete(s.markers, id)
		s.mu.Unlock()
		return err
	}
	select {
	case <-seen:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-s.dead:
		return s.err()
	}
}

// queued returns the ready messages of queue (a passive declare on a channel of its own): 0 when
// the queue does not exist, -1 when the broker did not answer.
func (s *session) queued(queue string) int {
	ch, err := s.conn.Channel()
	if err != nil {
		return -1
	}
	q, err := ch.QueueDeclarePassive(queue, true, false, false, false, nil)
	switch {
	case amqpconn.IsNotFound(err):
		return 0
	case err != nil:
		_ = ch.Close()
		return -1
	}
	_ = ch.Close()
	return q.Messages
}

// view runs f on the state, under the session's lock.
func (s *session) view(f func(*state)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f(s.st)
}
