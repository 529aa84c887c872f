package revoke

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/google/uuid"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/rs/zerolog"

	"github.com/delaykit/rabbitdelay/amqpdelay"
	"github.com/delaykit/rabbitdelay/internal/delayspec"
	"github.com/delaykit/rabbitdelay/internal/revlog"
)

// DefaultBound is the bound B of the guarantee (see the package documentation): a revocation
// confirmed at least B before a copy's due time never lets that copy through.
const DefaultBound = 100 * time.Millisecond

// prefetch is how many stream records the broker sends ahead of the reader's acks (basic.qos);
// the reader acks every ackEvery (multiple).
const (
	prefetch = 2000
	ackEvery = 100
)

// sweepEvery is how often the reader forgets revocations past their retention.
const sweepEvery = time.Minute

// ErrClosed: the Revocations was closed (before or during the call).
var ErrClosed = errors.New("revoke: closed")

// ErrInvalidConfig: New refused its configuration or an Options field.
var ErrInvalidConfig = errors.New("revoke: invalid configuration")

// Options configure a [Revocations]; pass them to [New]. The zero value of each field means its
// default, so Options{} gives a Revocations with every default. New refuses a value out of its
// range with an error wrapping ErrInvalidConfig that names the field and the range.
type Options struct {
	// Bound is the bound B of the guarantee (see the package documentation). Every B is
	// correct: a smaller one lets later revocations count and costs more fence records (at
	// most one per B of due times while messages fall due), a larger one the reverse.
	// 0: DefaultBound; negative: B = 0; else at most 1 minute.
	Bound time.Duration

	// ConnectionName is the name of the reader's connection in the management UI. "":
	// "rabbitdelay-revocations".
	ConnectionName string

	// Logger receives the reader's logs (connection events, records that do not decode). The
	// zero Logger logs nothing; the package never uses a global logger.
	Logger zerolog.Logger
}

// options are Options resolved: defaults filled in, ranges checked.
type options struct {
	bound  time.Duration
	logger zerolog.Logger
	name   string
}

// resolve fills in the defaults of the zero fields of opts and checks the others; the error
// joins one error per unusable field, each wrapping ErrInvalidConfig.
func (opts Options) resolve() (options, error) {
	o := options{bound: DefaultBound, logger: opts.Logger, name: "rabbitdelay-revocations"}
	var errs []error
	switch b := opts.Bound; {
	case b < 0:
		o.bound = 0
	case b > time.Minute:
		errs = append(errs, fmt.Errorf("%w: Options.Bound %v: want at most 1m (0: the default %v; negative: no bound)", ErrInvalidConfig, b, DefaultBound))
	case b > 0:
		o.bound = b
	}
	if opts.ConnectionName != "" {
		o.name = opts.ConnectionName
	}
	return o, errors.Join(errs...)
}

// entry is one remembered revocation: every copy of its id but keep ("" none) and those in
// more (allow records read since) is revoked until forget (Unix ms).
type entry struct {
	keep   string
	more   []string
	forget int64
}

// keeps reports whether the copy with this tag is kept.
func (e *entry) keeps(tag string) bool {
	if tag == "" {
		return false
	}
	if tag == e.keep {
		return true
	}
	for _, t := range e.more {
		if t == tag {
			return true
		}
	}
	return false
}

// fenceReq asks the fencer for a fence with this time (Unix ms) and number.
type fenceReq struct {
	at  int64
	seq uint64
}

// Revocations reads the revocation stream and answers whether a delivery is revoked. Create it
// with [New], ask it with [Revocations.Revoked], end it with [Revocations.Close]. It is safe for
// concurrent use.
type Revocations struct {
	cfg       amqpdelay.Config
	stream    string
	retention time.Duration
	o         options

	mu  sync.RWMutex
	set map[string]entry

	// Fences: covered is the send time (Unix ms) of the latest fence read back, any reader's;
	// sent is that of the fence this reader has on its way (0: none). Own fences are numbered
	// too: seqGen is the last number given, sentSeq that of the fence on its way (0: none),
	// ownRead that of the latest own fence read back, so that a fence sent after a moment can
	// be awaited without comparing clocks. progress is closed and replaced whenever covered or
	// ownRead grows or a fence fails.
	self     string // this reader's random id, in its fences' revlog.ReaderHeader
	fmu      sync.Mutex
	covered  int64
	sent     int64
	seqGen   uint64
	sentSeq  uint64
	ownRead  uint64
	progress chan struct{}
	fenceReq chan fenceReq
	fences   atomic.Uint64
	// fencesFailed counts the fences asked for that could not be written.
	fencesFailed atomic.Uint64

	// The reader goroutine's: the next stream offset to read, a fingerprint of the last
	// record read (at offset next-1), whether the first record of a resumed consumer must be
	// that one (verify), and whether to read the stream from its start at the next connection
	// (restart: it was deleted and declared again).
	next    int64
	last    uint64
	verify  bool
	restart bool
	records atomic.Uint64

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	fch    atomic.Pointer[amqp.Channel] // the fence channel of the current connection
	// trouble is why the stream cannot be read or written now (nil while it can): the error that
	// ended the reading, of the last reconnect, or of the last fence; wait names it.
	trouble atomic.Pointer[error]
	conn    *amqp.Connection
	once    sync.Once
}

// New connects to the broker of cfg (amqpdelay.Dial), reads the revocation stream of cfg.Prefix
// ("<prefix>.revoked") from its start, keeping each revocation for the applied topology's
// retention (its longest delay plus a day), and returns once it has read
// everything confirmed before the call (it writes a fence record and waits until it reads it
// back). It then follows the stream until Close, reconnecting after a connection loss and
// resuming where it stopped (from the stream's start when the stream was deleted and declared again
// meanwhile; the revocations read before stay known). ctx bounds the start only.
//
// Errors: ErrInvalidConfig (a bad Options field; cfg's connection settings), an error wrapping
// amqpdelay.ErrTopologyMissing that names the stream when it does not exist (run `declare
// apply`), a dial error (no password in it), or ctx's error.
func New(ctx context.Context, cfg amqpdelay.Config, opts Options) (*Revocations, error) {
	if ctx == nil {
		return nil, fmt.Errorf("%w: nil context (use context.Background())", ErrInvalidConfig)
	}
	o, err := opts.resolve()
	if err != nil {
		return nil, err
	}
	r := &Revocations{
		cfg: cfg, stream: delayspec.Names{Prefix: cfg.Prefix}.Revoked(), o: o,
		set: map[string]entry{}, progress: make(chan struct{}), fenceReq: make(chan fenceReq, 1),
		self: uuid.NewString(),
	}
	r.ctx, r.cancel = context.WithCancel(context.Background())
	deliveries, closed, err := r.open(ctx, "first")
	if err != nil {
		r.cancel()
		return nil, err
	}
	r.wg.Add(2)
	go r.read(deliveries, closed)
	go r.fencer()
	if err := r.wait(ctx, time.Now().UnixMilli(), 0); err != nil {
		_ = r.Close()
		return nil, fmt.Errorf("revoke: catch up with %q: %w", r.stream, err)
	}
	return r, nil
}

// open dials, checks the stream, starts consuming it at offset and opens the fence channel.
func (r *Revocations) open(ctx context.Context, offset any) (<-chan amqp.Delivery, chan *amqp.Error, error) {
	conn, err := amqpdelay.Dial(ctx, r.cfg, r.o.name)
	if err != nil {
		return nil, nil, err
	}
	fail := func(err error) (<-chan amqp.Delivery, chan *amqp.Error, error) {
		_ = conn.CloseDeadline(time.Now().Add(5 * time.Second))
		return nil, nil, err
	}
	if r.retention == 0 { // the first open, before the reader starts: the retention of the applied topology
		spec, err := delayspec.ReadRecord(ctx, conn, r.cfg.Prefix)
		if errors.Is(err, delayspec.ErrNoRecord) {
			err = fmt.Errorf("%w: %w", amqpdelay.ErrTopologyMissing, err)
		}
		if err != nil {
			return fail(fmt.Errorf("revoke: %w", err))
		}
		r.retention = spec.RevocationRetention()
	}
	ch, err := conn.Channel()
	if err != nil {
		return fail(fmt.Errorf("revoke: open a channel: %w", err))
	}
	if _, err := ch.QueueDeclarePassive(r.stream, true, false, false, false, nil); err != nil {
		var ae *amqp.Error
		if errors.As(err, &ae) && ae.Code == amqp.NotFound {
			return fail(fmt.Errorf("%w: the revocation stream %q does not exist: run `rabbitdelay apply` for this prefix "+
				"(RabbitMQ 3.9 or later, feature flag stream_queue): %w", amqpdelay.ErrTopologyMissing, r.stream, err))
		}
		return fail(fmt.Errorf("revoke: check stream %q: %w", r.stream, err))
	}
	if last, resume := offset.(int64); resume {
		// Resuming at the last record read, to check it is the same record (read): the stream
		// may have been deleted and declared again since (a consumer cancelled by the broker,
		// or a connection lost meanwhile). A new stream starts at offset 0, and RabbitMQ holds
		// a consumer at an offset past the end until the stream reaches it, so first make sure
		// the stream reaches that offset.
		end, err := r.probeEnd(ctx, conn)
		if err != nil {
			return fail(err)
		}
		if end < last {
			r.o.logger.Warn().Str("stream", r.stream).Int64("end", end).Int64("last_read", last).
				Msg("revoke: the revocation stream ends before the last record read: it was deleted and declared again; " +
					"reading it from its start (the revocations read before are kept)")
			offset = "first"
		} else {
			r.verify = true
		}
	}
	if err := ch.Qos(prefetch, 0, false); err != nil {
		return fail(fmt.Errorf("revoke: set prefetch: %w", err))
	}
	// A stream is read with manual acks and a prefetch; x-stream-offset says where to start
	// (https://www.rabbitmq.com/docs/streams#consuming).
	deliveries, err := ch.Consume(r.stream, "", false, false, false, false, amqp.Table{"x-stream-offset": offset})
	if err != nil {
		return fail(fmt.Errorf("revoke: read stream %q: %w", r.stream, err))
	}
	fch, err := conn.Channel()
	if err == nil {
		err = fch.Confirm(false)
	}
	if err != nil {
		return fail(fmt.Errorf("revoke: open the fence channel: %w", err))
	}
	r.conn = conn
	r.fch.Store(fch)
	return deliveries, conn.NotifyClose(make(chan *amqp.Error, 1)), nil
}

// fingerprint identifies a record of the stream by its content: type, headers of the format
// (revlog), message id and body.
func fingerprint(d *amqp.Delivery) uint64 {
	h := fnv.New64a()
	at, _ := d.Headers[revlog.AtHeader].(int64)
	seq, _ := d.Headers[revlog.SeqHeader].(int64)
	reader, _ := d.Headers[revlog.ReaderHeader].(string)
	fmt.Fprintf(h, "%q %d %d %q %q ", d.Type, at, seq, reader, d.MessageId)
	h.Write(d.Body)
	return h.Sum64()
}

// probeEnd returns the offset of a fence it writes at the stream's end (a fence record like
// any: every reader may take it as one), read back through a consumer starting at "last" (the
// last chunk). Errors: the broker's, or ctx's.
func (r *Revocations) probeEnd(ctx context.Context, conn *amqp.Connection) (int64, error) {
	pch, err := conn.Channel()
	if err != nil {
		return 0, fmt.Errorf("revoke: open the probe channel: %w", err)
	}
	defer pch.Close()
	if err := pch.Confirm(false); err != nil {
		return 0, fmt.Errorf("revoke: probe the end of %q: %w", r.stream, err)
	}
	returns := pch.NotifyReturn(make(chan amqp.Return, 1))
	id := uuid.NewString()
	dc, err := pch.PublishWithDeferredConfirmWithContext(ctx, "", r.stream, true, false, amqp.Publishing{
		Type: revlog.TypeFence, DeliveryMode: amqp.Persistent, MessageId: id,
		Headers: amqp.Table{revlog.AtHeader: time.Now().UnixMilli(), revlog.ReaderHeader: r.self},
	})
	if err == nil {
		var ok bool
		if ok, err = dc.WaitContext(ctx); err == nil && !ok {
			err = errors.New("the broker nacked it")
		}
	}
	if err != nil {
		return 0, fmt.Errorf("revoke: probe the end of %q (a fence record): %w", r.stream, err)
	}
	select {
	case <-returns:
		return 0, fmt.Errorf("%w: the revocation stream %q does not exist (a record sent to it was returned): run `rabbitdelay apply`",
			amqpdelay.ErrTopologyMissing, r.stream)
	default:
	}
	if err := pch.Qos(prefetch, 0, false); err != nil {
		return 0, fmt.Errorf("revoke: probe the end of %q: %w", r.stream, err)
	}
	deliveries, err := pch.Consume(r.stream, "", false, false, false, false, amqp.Table{"x-stream-offset": "last"})
	if err != nil {
		return 0, fmt.Errorf("revoke: probe the end of %q: %w", r.stream, err)
	}
	for {
		select {
		case d, ok := <-deliveries:
			if !ok {
				return 0, fmt.Errorf("revoke: probe the end of %q: the broker ended the consumer", r.stream)
			}
			if off, isInt := d.Headers["x-stream-offset"].(int64); isInt && d.MessageId == id {
				return off, nil
			}
		case <-ctx.Done():
			return 0, fmt.Errorf("revoke: probe the end of %q: %w", r.stream, ctx.Err())
		}
	}
}

// read applies the stream's records until Close, reconnecting after a loss.
func (r *Revocations) read(deliveries <-chan amqp.Delivery, closed chan *amqp.Error) {
	defer r.wg.Done()
	sweep := time.NewTicker(sweepEvery)
	defer sweep.Stop()
	n := 0
	for {
		select {
		case <-r.ctx.Done():
			return
		case <-sweep.C:
			r.sweep(time.Now().UnixMilli())
		case d, ok := <-deliveries:
			if !ok {
				var err error = amqp.ErrClosed
				select { // the connection's close reason, when it was the connection that closed
				case e := <-closed:
					if e != nil {
						err = e
					}
				case <-time.After(time.Second):
				}
				r.o.logger.Warn().Err(err).Str("stream", r.stream).Msg("revoke: reading the revocation stream ended; reconnecting")
				r.setTrouble(fmt.Errorf("reading it ended: %w", err))
				r.fch.Store(nil)
				r.fenceFailed()
				if deliveries, closed = r.reconnect(); deliveries == nil {
					return
				}
				n = 0
				continue
			}
			if r.verify {
				r.verify = false
				if off, _ := d.Headers["x-stream-offset"].(int64); off == r.next-1 && fingerprint(&d) == r.last {
					n++ // the last record read before: the same stream, read on from here
					continue
				}
				r.o.logger.Warn().Str("stream", r.stream).Int64("offset", r.next-1).
					Msg("revoke: the revocation stream no longer has the last record read at its offset: it was deleted and " +
						"declared again; reading it from its start (the revocations read before are kept)")
				r.restart = true
				if r.conn != nil {
					_ = r.conn.CloseDeadline(time.Now().Add(time.Second)) // ends deliveries: the loop reconnects
				}
				continue
			}
			r.apply(&d)
			if n++; n%ackEvery == 0 {
				_ = d.Ack(true) // a stream's acks only make room in the prefetch window
			}
		}
	}
}

// apply takes one record into the set, or a fence into covered.
func (r *Revocations) apply(d *amqp.Delivery) {
	if off, ok := d.Headers["x-stream-offset"].(int64); ok {
		r.next, r.last = off+1, fingerprint(d)
	}
	at, ok := d.Headers[revlog.AtHeader].(int64)
	if !ok {
		at = time.Now().UnixMilli()
	}
	switch d.Type {
	case revlog.TypeFence:
		r.fmu.Lock()
		grew := false
		if at > r.covered {
			r.covered, grew = at, true
		}
		if who, _ := d.Headers[revlog.ReaderHeader].(string); who == r.self {
			if seq, ok := d.Headers[revlog.SeqHeader].(int64); ok && seq > 0 && uint64(seq) > r.ownRead {
				r.ownRead, grew = uint64(seq), true
			}
		}
		if grew {
			close(r.progress)
			r.progress = make(chan struct{})
		}
		r.fmu.Unlock()
	case revlog.TypeAllow:
		// Reschedule's first record: the new copy's tag is kept by the revocation in force, if
		// any (an id without one revokes nothing). Its retention is that revocation's.
		r.mu.Lock()
		err := revlog.Decode(d.Body, func(id, keep []byte) {
			e, ok := r.set[string(id)]
			if !ok || len(keep) == 0 || e.keeps(string(keep)) {
				return
			}
			if e.keep == "" {
				e.keep = string(keep)
			} else {
				e.more = append(e.more, string(keep))
			}
			r.set[string(id)] = e
		})
		r.mu.Unlock()
		r.records.Add(1)
		if err != nil {
			r.o.logger.Warn().Err(err).Msg("revoke: an allow record of the revocation stream does not decode; its readable entries were taken")
		}
	case revlog.TypeRevocation:
		forget := at + r.retention.Milliseconds()
		if forget < time.Now().UnixMilli() {
			return
		}
		r.mu.Lock()
		err := revlog.Decode(d.Body, func(id, keep []byte) {
			r.set[string(id)] = entry{keep: string(keep), forget: forget}
		})
		r.mu.Unlock()
		r.records.Add(1)
		if err != nil {
			r.o.logger.Warn().Err(err).Msg("revoke: a record of the revocation stream does not decode; its readable entries were taken")
		}
	}
}

// sweep forgets the revocations past their retention.
func (r *Revocations) sweep(now int64) {
	r.mu.Lock()
	for id, e := range r.set {
		if e.forget < now {
			delete(r.set, id)
		}
	}
	r.mu.Unlock()
}

// reconnect opens the stream again at the next offset, with exponential back-off and jitter;
// nil once closed.
func (r *Revocations) reconnect() (<-chan amqp.Delivery, chan *amqp.Error) {
	if r.conn != nil {
		_ = r.conn.CloseDeadline(time.Now().Add(time.Second))
	}
	b := backoff.NewExponentialBackOff()
	b.InitialInterval, b.MaxInterval, b.RandomizationFactor, b.MaxElapsedTime = 100*time.Millisecond, 5*time.Second, 0.5, 0
	b.Reset()
	for {
		t := time.NewTimer(b.NextBackOff())
		select {
		case <-r.ctx.Done():
			t.Stop()
			return nil, nil
		case <-t.C:
		}
		var offset any = "first"
		if r.next > 0 && !r.restart {
			offset = r.next - 1 // the last record read: open checks it is still there
		}
		ctx, cancel := context.WithTimeout(r.ctx, 30*time.Second)
		r.verify = false
		d, c, err := r.open(ctx, offset)
		cancel()
		if err == nil {
			r.restart = false
			r.o.logger.Info().Str("stream", r.stream).Any("offset", offset).Msg("revoke: reading the revocation stream again")
			r.trouble.Store(nil)
			r.fenceFailed() // wake the waiters: they send a fence on the new connection
			return d, c
		}
		r.setTrouble(fmt.Errorf("reconnect failed: %w", err))
		r.o.logger.Warn().Err(err).Msg("revoke: reconnect failed")
	}
}

// setTrouble records why the stream cannot be read or written now.
func (r *Revocations) setTrouble(err error) { r.trouble.Store(&err) }

// fenceFailed forgets the fence in flight and wakes the waiters, which send another.
func (r *Revocations) fenceFailed() {
	r.fmu.Lock()
	r.sent, r.sentSeq = 0, 0
	close(r.progress)
	r.progress = make(chan struct{})
	r.fmu.Unlock()
}

// fencer publishes the fences asked for (their send time), one at a time. Without a fence
// channel (the connection lost, a reconnect under way) it drops the request: the waiters wait
// until reconnect wakes them. After a failed fence it waits (exponential back-off, 100 ms
// doubling to 5 s) before it wakes the waiters to ask again, so that a stream that refuses
// fences does not make them ask in a busy loop.
func (r *Revocations) fencer() {
	defer r.wg.Done()
	b := backoff.NewExponentialBackOff()
	b.InitialInterval, b.MaxInterval, b.RandomizationFactor, b.MaxElapsedTime = 100*time.Millisecond, 5*time.Second, 0.5, 0
	b.Reset()
	for {
		var req fenceReq
		select {
		case <-r.ctx.Done():
			return
		case req = <-r.fenceReq:
		}
		ch := r.fch.Load()
		if ch == nil {
			r.fencesFailed.Add(1)
			continue // reconnect wakes the waiters once it has a channel again
		}
		ctx, cancel := context.WithTimeout(r.ctx, 10*time.Second)
		dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, "", r.stream, false, false, amqp.Publishing{
			Type: revlog.TypeFence, DeliveryMode: amqp.Persistent,
			Headers: amqp.Table{revlog.AtHeader: req.at, revlog.ReaderHeader: r.self, revlog.SeqHeader: int64(req.seq)},
		})
		if err == nil {
			var ok bool
			if ok, err = dc.WaitContext(ctx); err == nil && !ok {
				err = errors.New("the broker nacked the fence")
			}
		}
		cancel()
		if err != nil {
			r.o.logger.Warn().Err(err).Msg("revoke: fence not written")
			r.fencesFailed.Add(1)
			r.setTrouble(fmt.Errorf("a fence was not written: %w", err))
			t := time.NewTimer(b.NextBackOff())
			select {
			case <-r.ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
			r.fenceFailed()
			continue
		}
		b.Reset()
		r.trouble.Store(nil)
		r.fences.Add(1)
	}
}

// wait returns once a fence sent at or after need (Unix ms, any reader's) and this reader's
// fence number seq (0: none needed) have been read back, sending a fence when none that would
// do is on its way; ctx bounds it.
func (r *Revocations) wait(ctx context.Context, need int64, seq uint64) error {
	for {
		r.fmu.Lock()
		if r.covered >= need && r.ownRead >= seq {
			r.fmu.Unlock()
			return nil
		}
		if r.sent < need || r.sentSeq < seq {
			// The fence's time is taken before it is sent: every record confirmed before that
			// time precedes it in the stream. Its number is given now, so it is sent after
			// every moment at which a waiter took seqGen + 1 as the number it needs.
			req := fenceReq{at: max(time.Now().UnixMilli(), need), seq: r.seqGen + 1}
			select {
			case r.fenceReq <- req:
				r.sent, r.sentSeq, r.seqGen = req.at, req.seq, req.seq
			default: // the fencer is busy with another: wait for its outcome and look again
			}
		}
		progress := r.progress
		r.fmu.Unlock()
		select {
		case <-progress:
		case <-r.ctx.Done():
			return ErrClosed
		case <-ctx.Done():
			if t := r.trouble.Load(); t != nil {
				return fmt.Errorf("revoke: context ended while waiting for the revocation stream %q, which cannot be read "+
					"now (%w): %w", r.stream, *t, ctx.Err())
			}
			return fmt.Errorf("revoke: context ended while waiting for the revocation stream %q: %w", r.stream, ctx.Err())
		}
	}
}

// nextFence returns the number of the next fence this reader will send: one sent after the call.
func (r *Revocations) nextFence() uint64 {
	r.fmu.Lock()
	defer r.fmu.Unlock()
	return r.seqGen + 1
}

// Revoked reports whether d must not reach a handler: a revocation of its id (d.MessageId) is
// known and does not keep d's copy (the header amqpdelay.CopyHeader). Before it answers, it makes
// sure every revocation confirmed up to the bound before d's due time (amqpdelay.Due; the time
// of the call for a delivery without one) has been read: it waits, at most a fence's round trip
// (publish, confirm, read back; a few ms), when no fence read back covers that time yet. A
// delivery without a MessageId is never revoked.
//
// Errors: ErrClosed, or ctx's error (wrapped) when the stream is unreachable longer than ctx
// allows; the error then names the stream and, when the reader knows it, why it cannot be read
// (it wraps amqpdelay.ErrTopologyMissing when the stream does not exist: run `rabbitdelay apply`).
// The caller must then not settle d as handled: it cannot know that d is not revoked.
func (r *Revocations) Revoked(ctx context.Context, d amqp.Delivery) (bool, error) {
	if ctx == nil {
		return false, fmt.Errorf("%w: nil context", ErrInvalidConfig)
	}
	if d.MessageId == "" {
		return false, nil
	}
	now := time.Now()
	need := now.Add(-r.o.bound).UnixMilli() // a delivery without a due time is due at the call
	if due, ok := amqpdelay.Due(d); ok {
		need = min(due.Add(-r.o.bound).UnixMilli(), now.UnixMilli())
	}
	// A copy Reschedule published was published after its allow record was confirmed, and so
	// arrived after it: a fence of this reader sent now follows that record in the stream.
	tag, _ := d.Headers[revlog.CopyHeader].(string)
	var after uint64
	if revlog.Rescheduled(tag) {
		after = r.nextFence()
	}
	if err := r.wait(ctx, need, 0); err != nil {
		return false, err
	}
	if !r.revoked(d.MessageId, tag, now.UnixMilli()) {
		return false, nil
	}
	if after == 0 {
		return true, nil
	}
	// The revocation known may precede the copy's allow record, which is then still unread:
	// read up to a fence sent after the copy arrived, and look again.
	if err := r.wait(ctx, need, after); err != nil {
		return false, err
	}
	return r.revoked(d.MessageId, tag, time.Now().UnixMilli()), nil
}

// revoked answers from the set: a revocation of id is known at now and does not keep tag.
func (r *Revocations) revoked(id, tag string, now int64) bool {
	r.mu.RLock()
	defer r.mu.RUnlock()
	e, ok := r.set[id]
	return ok && e.forget >= now && !e.keeps(tag)
}

// Stats are counts of a [Revocations], for metrics.
type Stats struct {
	// Known is the number of ids with a revocation in memory.
	Known int
	// Records is the number of revocation and allow records (Reschedule's) read since New;
	// fences are not counted.
	Records uint64
	// Fences is the number of fences this reader wrote.
	Fences uint64
	// FencesFailed is the number of fences asked for that this reader could not write (no
	// connection to write on, or the broker did not confirm): while the stream cannot be read
	// or written, at most one per reconnect attempt and per back-off step (100 ms doubling to
	// 5 s), however many calls wait.
	FencesFailed uint64
}

// Stats returns the current counts.
func (r *Revocations) Stats() Stats {
	r.mu.RLock()
	n := len(r.set)
	r.mu.RUnlock()
	return Stats{Known: n, Records: r.records.Load(), Fences: r.fences.Load(), FencesFailed: r.fencesFailed.Load()}
}

// Stream returns the name of the revocation stream read.
func (r *Revocations) Stream() string { return r.stream }

// Close stops reading and closes the connection; waiting Revoked calls return ErrClosed. It is
// idempotent and returns nil.
func (r *Revocations) Close() error {
	r.once.Do(func() {
		r.cancel()
		r.wg.Wait()
		if r.conn != nil {
			_ = r.conn.CloseDeadline(time.Now().Add(5 * time.Second))
		}
	})
	return nil
}

// String describes r for logs: the stream and how many ids it knows.
func (r *Revocations) String() string {
	return "revocations of " + r.stream + " (" + strconv.Itoa(r.Stats().Known) + " known)"
}

// Wait returns once every revocation confirmed before the call has been read (it writes a fence
// and waits until it reads it back, or for another reader's later fence). Errors: ErrClosed, or
// ctx's error (wrapped).
func (r *Revocations) Wait(ctx context.Context) error {
	if ctx == nil {
		return fmt.Errorf("%w: nil context", ErrInvalidConfig)
	}
	return r.wait(ctx, time.Now().UnixMilli(), 0)
}
