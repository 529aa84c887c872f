package revoke

import (
	"cmp"
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
	"github.com/delaykit/rabbitdelay/internal/amqpconn"
	"github.com/delaykit/rabbitdelay/internal/delayspec"
	"github.com/delaykit/rabbitdelay/internal/revlog"
)

// DefaultBound is the bound B of the guarantee: a revocation confirmed at least B before a
// copy's due time never lets that copy through.
const DefaultBound = 100 * time.Millisecond

// The reader's prefetch (basic.qos), how many records each of its acks covers, and how often it
// forgets revocations past their retention.
const (
	prefetch   = 2000
	ackEvery   = 100
	sweepEvery = time.Minute
)

// ErrClosed: the Revocations was closed (before or during the call).
var ErrClosed = errors.New("revoke: closed")

// ErrInvalidConfig: New refused its configuration or an Options field.
var ErrInvalidConfig = errors.New("revoke: invalid configuration")

// Options configure a [Revocations]; the zero value of each field means its default. New
// refuses a value out of its range with ErrInvalidConfig naming the field.
type Options struct {
	// Bound is the bound B of the guarantee. A smaller one lets later revocations count and
	// costs more fence records (at most one per B of due times), a larger one the reverse.
	// 0: DefaultBound; negative: B = 0; else at most 1 minute.
	Bound time.Duration
	// ConnectionName names the reader's connection. "": "rabbitdelay-revocations".
	ConnectionName string
	// Logger receives the reader's logs. The zero Logger logs nothing.
	Logger zerolog.Logger
}

// resolve returns opts with its defaults filled in (Bound 0: none).
func (opts Options) resolve() (Options, error) {
	switch b := opts.Bound; {
	case b == 0:
		opts.Bound = DefaultBound
	case b < 0:
		opts.Bound = 0
	case b > time.Minute:
		return opts, fmt.Errorf("%w: Options.Bound %v: want at most 1m (0: the default %v; negative: no bound)", ErrInvalidConfig, b, DefaultBound)
	}
	opts.ConnectionName = cmp.Or(opts.ConnectionName, "rabbitdelay-revocations")
	return opts, nil
}

// entry is one revocation: every copy of its id but keep ("" none) and those in more (allow
// records read since) is revoked until forget (Unix ms).
type entry struct {
	keep   string
	more   []string
	forget int64
}

func (e *entry) keeps(tag string) bool {
	return tag != "" && (tag == e.keep || slices.Contains(e.more, tag))
}

// Revocations reads the revocation stream and answers whether a delivery is revoked. Create it
// with [New]; it is safe for concurrent use.
type Revocations struct {
	cfg       amqpdelay.Config
	stream    string
	retention time.Duration
	o         Options // resolved

	mu  sync.RWMutex
	set map[string]entry

	// Fences: covered and sent are the send times (Unix ms) of the latest fence read back (any
	// reader's) and of ours on its way (0: none); our fences' numbers (seqGen the last given)
	// let a fence sent after a moment be awaited without comparing clocks. progress is closed
	// and replaced when covered or ownRead grows or a fence fails.
	self                     string // this reader's random id, in its fences' revlog.ReaderHeader
	fmu                      sync.Mutex
	covered, sent            int64
	seqGen, sentSeq, ownRead uint64
	progress                 chan struct{}
	fenceReq                 chan fenceReq
	fences, fencesFailed     atomic.Uint64
	fch                      atomic.Pointer[amqp.Channel] // the fence channel of the current connection
	trouble                  atomic.Pointer[error]        // why the stream cannot be read or written now
	records                  atomic.Uint64
	next                     int64  // the reader goroutine's: the next offset,
	last                     uint64 // the last record's fingerprint,
	verify, restart          bool   // a resumed consumer's first must be last; read from the start

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	conn   *amqp.Connection
	once   sync.Once
}

// New connects to the broker of cfg, reads the revocation stream "<prefix>.revoked" from its
// start and returns once it has read everything confirmed before the call. It then follows the
// stream until Close, reconnecting after a loss. ctx bounds the start only. Errors:
// ErrInvalidConfig, amqpdelay.ErrTopologyMissing naming the stream when it does not exist, a
// dial error, or ctx's error.
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

// Revoked reports whether d must not reach a handler: a revocation of its MessageId is known
// and does not keep its copy (amqpdelay.CopyHeader). It first reads every revocation confirmed
// up to the bound before d's due time (else the call), waiting for a fence's round trip at
// most. Errors: ErrClosed, or ctx's error (wrapped) when the stream is unreachable, naming
// the stream and why; the caller must then not settle d as handled.
func (r *Revocations) Revoked(ctx context.Context, d amqp.Delivery) (bool, error) {
	if ctx == nil {
		return false, fmt.Errorf("%w: nil context", ErrInvalidConfig)
	}
	if d.MessageId == "" {
		return false, nil
	}
	now := time.Now()
	need := now.Add(-r.o.Bound).UnixMilli() // a delivery without a due time is due at the call
	if due, ok := amqpdelay.Due(d); ok {
		need = min(due.Add(-r.o.Bound).UnixMilli(), now.UnixMilli())
	}
	// A rescheduled copy's allow record precedes a fence of this reader sent now.
	tag, _ := d.Headers[revlog.CopyHeader].(string)
	var after uint64
	if revlog.Rescheduled(tag) { // the number of a fence this reader sends after now
		r.fmu.Lock()
		after = r.seqGen + 1
		r.fmu.Unlock()
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
	// The copy's allow record may be unread yet: read up to that fence, and look again.
	if err := r.wait(ctx, need, after); err != nil {
		return false, err
	}
	return r.revoked(d.MessageId, tag, time.Now().UnixMilli()), nil
}

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
	// FencesFailed is the number of fences this reader could not write: at most one per
	// reconnect attempt and back-off step while the stream is unreachable.
	FencesFailed uint64
}

// Stats returns the counts.
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
			_ = amqpconn.Close(r.conn)
		}
	})
	return nil
}

// String describes r for logs.
func (r *Revocations) String() string {
	return "revocations of " + r.stream + " (" + strconv.Itoa(r.Stats().Known) + " known)"
}

// Wait returns once every revocation confirmed before the call has been read. Errors:
// ErrClosed, or ctx's error (wrapped).
func (r *Revocations) Wait(ctx context.Context) error {
	if ctx == nil {
		return fmt.Errorf("%w: nil context", ErrInvalidConfig)
	}
	return r.wait(ctx, time.Now().UnixMilli(), 0)
}
