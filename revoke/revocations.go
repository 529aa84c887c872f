package revoke

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

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
	return tag != "" && (tag == e.keep || slices.Contains(e.more, tag))
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
// retention (its longest delay plus a day), and returns once it has read everything confirmed
// before the call (a fence record read back). It then follows the stream until Close,
// reconnecting after a loss and resuming where it stopped (from the start when the stream was
// declared again meanwhile; the revocations read stay known). ctx bounds the start only.
// Errors: ErrInvalidConfig, amqpdelay.ErrTopologyMissing naming the stream when it does not
// exist (run `rabbitdelay apply`), a dial error (no password in it), or ctx's error.
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
	r.wg.Go(func() { r.read(deliveries, closed) })
	r.wg.Go(r.fencer)
	if err := r.wait(ctx, time.Now().UnixMilli(), 0); err != nil {
		_ = r.Close()
		return nil, fmt.Errorf("revoke: catch up with %q: %w", r.stream, err)
	}
	return r, nil
}

// Revoked reports whether d must not reach a handler: a revocation of its id (d.MessageId) is
// known and does not keep d's copy (the header amqpdelay.CopyHeader). It first makes sure every
// revocation confirmed up to the bound before d's due time (amqpdelay.Due; else the time of
// the call) has been read, waiting at most a fence's round trip when no fence read back covers
// that time. A delivery without a MessageId is never revoked. Errors: ErrClosed, or ctx's
// error (wrapped) when the stream is unreachable longer than ctx allows, naming the stream and
// why it cannot be read (amqpdelay.ErrTopologyMissing when it does not exist); the caller must
// then not settle d as handled, as it cannot know that d is not revoked.
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
