package amqpdelay

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"maps"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/delaykit/rabbitdelay/internal/amqpconn"
	"github.com/delaykit/rabbitdelay/internal/delayspec"
	"github.com/delaykit/rabbitdelay/internal/route"
	"github.com/delaykit/rabbitdelay/ttlbuckets"
)

// Receipt tells how a confirmed message travels. With an error it is the zero Receipt.
type Receipt struct {
	// Path is the way the message was sent.
	Path Path
	// Due is when the message is due, truncated to the ms as in the rabbitdelay-due header.
	Due time.Time
	// Delay is the effective delay: Requested, rounded up when Rounded; 0 on PathDirect.
	Delay time.Duration
	// Requested is the delay asked for.
	Requested time.Duration
	// Rounded reports that Delay is longer than Requested (never shorter).
	Rounded bool
	// Hops is the number of delay queues passed (PathDirect 0, PathBucket and PathPlugin 1).
	Hops int
	// MessageID is the caller's MessageId or the UUID the Publisher generated ([Receipt.ID]).
	MessageID string
	// Exchange is the exchange published to: the target (direct), the ladder's entry exchange
	// of the first queue, the bucket exchange or the plugin exchange.
	Exchange string
}

// Publisher publishes delayed messages with publisher confirms over its own connection,
// re-established after a loss. Safe for concurrent use; [NewPublisher], [Publisher.Close].
type Publisher struct {
	cfg      Config
	spec     delayspec.Spec // with Config.extraTargets
	names    delayspec.Names
	targets  map[string]struct{}
	ladder   ttlbuckets.Ladder
	buckets  ttlbuckets.Buckets
	park     string // parkQueue
	rr       atomic.Uint32
	pluginOK atomic.Bool
	// pluginLost: a publish found the plugin exchange gone (404); publishes re-probe at most
	// every pluginReprobe (nextProbe: Unix ns).
	pluginLost atomic.Bool
	nextProbe  atomic.Int64

	checkSem chan struct{} // one check on the check channel at a time
	permSem  chan struct{} // one first permission check at a time
	refusals refusals
	user     string // the URL's user: another UserId goes on the serial channel

	sess    atomic.Pointer[session]
	mu      sync.Mutex
	changed chan struct{} // closed and replaced whenever sess or one of its channels changes

	// closeCtx is cancelled (under mu) by Close: it ends waits, reconnects and probes.
	closeCtx  context.Context
	cancel    context.CancelFunc
	active    publishes     // publishes in progress, which Close waits for
	inFlight  chan struct{} // one slot per deferred publish (Config.MaxInFlight)
	closeOnce sync.Once
	closeErr  error
	wg        sync.WaitGroup // the supervisor and background probes
	metrics   *pubMetrics    // nil records nothing
}

// publishes counts the publishes in progress; drained is closed once closing and n is 0.
type publishes struct {
	mu      sync.Mutex
	n       int
	closing bool
	drained chan struct{}
}

// enter counts a publish in; false once Close has begun.
func (c *publishes) enter() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closing {
		return false
	}
	c.n++
	return true
}

func (c *publishes) leave() {
	c.mu.Lock()
	c.n--
	if c.closing && c.n == 0 {
		close(c.drained)
	}
	c.mu.Unlock()
}

func (c *publishes) close() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closing = true
	if c.n == 0 {
		close(c.drained)
	}
	return c.drained
}

func (p *Publisher) isClosed() bool { return p.closeCtx.Err() != nil }

// NewPublisher connects, reads the topology recorded for cfg.Prefix, checks that its objects
// exist (passive declares), probes for the plugin exchange and opens its channels; ctx bounds
// only that. Errors: ErrInvalidConfig (every problem at once; or channel_max below
// Config.Channels+2), ErrTopologyMissing, ErrPluginUnavailable (PluginOnly without the plugin),
// or the connection's error (never holding the password; *amqp091.Error reachable).
func NewPublisher(ctx context.Context, cfg Config) (*Publisher, error) {
	if ctx == nil {
		return nil, fmt.Errorf("%w: nil context (use context.Background())", ErrInvalidInput)
	}
	cfg, err := cfg.resolve()
	if err != nil {
		return nil, err
	}
	conn, err := amqpconn.Dial(ctx, cfg.conn(), cfg.ConnectionName)
	if err != nil {
		return nil, err
	}
	fail := func(err error) (*Publisher, error) { _ = conn.Close(); return nil, err }
	spec, err := cfg.readSpec(ctx, conn)
	if err != nil {
		return fail(err)
	}
	spec.Targets = append(spec.Targets, cfg.extraTargets...)
	if cfg.Strategy == PluginOnly && spec.Plugin == delayspec.PluginOff {
		return fail(fmt.Errorf("%w: strategy PluginOnly, and prefix %q was applied with AMQPDELAY_PLUGIN=off: the topology has no plugin exchange",
			ErrInvalidConfig, spec.Prefix))
	}
	ladder, buckets, err := spec.LadderOrBuckets()
	if err != nil {
		return fail(fmt.Errorf("%w: %w", ErrInvalidConfig, err))
	}
	cfg.Prefix = spec.Prefix
	p := &Publisher{
		cfg:      cfg,
		spec:     spec,
		names:    spec.Names(),
		targets:  make(map[string]struct{}, len(spec.Targets)+1),
		ladder:   ladder,
		buckets:  buckets,
		park:     parkQueue(spec),
		changed:  make(chan struct{}),
		active:   publishes{drained: make(chan struct{})},
		checkSem: make(chan struct{}, 1),
		permSem:  make(chan struct{}, 1),
		inFlight: make(chan struct{}, cfg.MaxInFlight),
		user:     cfg.uri().Username,
	}
	// The retry exchange (package consumer's retries) is a target of every topology.
	p.targets[p.names.Retry()] = struct{}{}
	for _, t := range spec.Targets {
		p.targets[t.Name] = struct{}{}
	}
	// Room for every exchange of the topology (per shard: levels, last-hop and entry
	// exchanges; the bucket exchange) beside maxNames direct targets.
	p.refusals.trusted.limit = maxNames + max(spec.Shards, 1)*3*(len(route.Queues(ladder))+ladder.Levels()) + 1
	if p.metrics, err = newPubMetrics(cfg.Metrics, p); err != nil {
		return fail(err)
	}
	p.closeCtx, p.cancel = context.WithCancel(context.Background())
	s, err := p.setUp(ctx, conn)
	if err == nil && cfg.Strategy == PluginOnly && !p.pluginOK.Load() {
		_ = s.conn.Close()
		err = errPluginMissing(s.brokerVersion)
	}
	if err != nil {
		p.cancel()
		p.metrics.close()
		return nil, err
	}
	p.sess.Store(s)
	p.wg.Add(1)
	go p.supervise(s)
	return p, nil
}

// MaxDelay returns the longest delay the ladder carries; a longer one takes the plugin or
// fails with ErrDelayTooLong.
func (p *Publisher) MaxDelay() time.Duration { return p.ladder.WithDefaults().Max }

// Publish sends msg to exchange with routingKey, due after delay, and returns once the broker
// has confirmed it. A delay <= 0 publishes at once (PathDirect); a positive one needs a target
// exchange. msg is not modified: the copy sent gets the delay headers, a random MessageId when
// it has none, a copy tag (CopyHeader) and persistent delivery mode when DeliveryMode is 0.
//
// Errors: ErrInvalidInput, ErrUnknownTarget, ErrDelayTooLong, ErrPluginUnavailable (nothing
// sent), ErrExchangeNotFound, ErrAccessRefused (nothing stored), ErrUnroutable, ErrNacked,
// ErrConnectionLost (outcome unknown), ErrClosed, or ctx's error, wrapped.
func (p *Publisher) Publish(ctx context.Context, exchange, routingKey string, msg amqp.Publishing, delay time.Duration) (Receipt, error) {
	if ctx == nil {
		err := fmt.Errorf("%w: nil context (use context.Background(), or a context with a deadline)", ErrInvalidInput)
		p.metrics.begin()(pathNone, err)
		return Receipt{}, err
	}
	if !p.active.enter() {
		p.metrics.begin()(pathNone, ErrClosed)
		return Receipt{}, ErrClosed
	}
	defer p.active.leave()
	return p.publish(ctx, exchange, routingKey, msg, delay)
}

// publish is Publish for a caller counted in p.active.
func (p *Publisher) publish(ctx context.Context, exchange, routingKey string, msg amqp.Publishing, delay time.Duration) (_ Receipt, err error) {
	metricPath := pathNone
	defer func(done func(string, error)) { done(metricPath, err) }(p.metrics.begin())
	c, err := p.prepare(ctx, exchange, routingKey, &msg, delay)
	if err != nil {
		return Receipt{}, err
	}
	out := msg
	if out.MessageId == "" {
		out.MessageId = newMessageID()
	}
	if out.DeliveryMode == 0 {
		out.DeliveryMode = amqp.Persistent
	}
	tag := copyTag(msg.Headers)
	shard := shardOf(out.MessageId, p.spec.Shards)
	dest, hops, mandatory := p.destination(c, exchange, shard)
	alone := false // sent again alone: a refusal closed the shared channel (closedByRefusal)
	for {
		if c.path == PathPlugin && !p.pluginOK.Load() {
			// The plugin exchange is gone (pluginGone): choose again without it.
			if c, err = p.withoutPlugin(delay, dest); err != nil {
				return Receipt{}, err
			}
			dest, hops, mandatory = p.destination(c, exchange, shard)
		}
		kind := p.slotFor(c.path, dest, &out, alone)
		pc, err := p.acquire(ctx, kind)
		if err != nil {
			return Receipt{}, err
		}
		if kind == serialSlot {
			// Once the first publish to a new exchange is confirmed, the rest go shared.
			if err := pc.serialTurn(ctx); errors.Is(err, errNotSent) {
				continue
			} else if err != nil {
				return Receipt{}, err
			}
			if !alone && !p.mayBeRefused(c.path, dest, &out) {
				continue
			}
		}
		due := time.Now().Add(c.effective)
		out.Headers = buildHeaders(msg.Headers, &c, p.ladder, exchange, due)
		out.Headers[CopyHeader] = tag
		size := contentHeaderSize(&out)
		reserve := p.deadLetterReserve(&c, &out, size, routingKey, dest, shard)
		metricPath = c.path.String()
		sent := time.Now()
		err = pc.publish(ctx, dest, routingKey, mandatory, &out, size, reserve)
		if errors.Is(err, errNotSent) {
			continue // the channel died before the write; the supervisor replaces it
		}
		if err != nil && c.path == PathPlugin && p.pluginGone(err) {
			continue // chosen again at the top, without the plugin
		}
		if err != nil {
			err = p.learn(err, kind == serialSlot, c.path, dest, routingKey, &out)
			if kind != serialSlot && closedByRefusal(err) {
				// Maybe another's refusal: send this one again alone.
				alone = true
				continue
			}
			return Receipt{}, err
		}
		p.accepted(dest, len(out.Body))
		p.metrics.confirmed(c.path, time.Since(sent))
		return Receipt{
			Path: c.path, Due: time.UnixMilli(due.UnixMilli()), Delay: c.effective, Requested: delay,
			Rounded: c.rounded, Hops: hops, MessageID: out.MessageId, Exchange: dest,
		}, nil
	}
}

// prepare makes every check before a publish and chooses its path; on error nothing is sent.
func (p *Publisher) prepare(ctx context.Context, exchange, routingKey string, msg *amqp.Publishing, delay time.Duration) (choice, error) {
	if err := ctx.Err(); err != nil {
		return choice{}, fmt.Errorf("amqpdelay: context ended before publishing: %w", err)
	}
	if err := p.precheck(exchange, routingKey, msg, delay); err != nil {
		return choice{}, err
	}
	if p.pluginLost.Load() {
		p.reprobePlugin()
	}
	c, err := chooser{ladder: p.ladder, buckets: p.buckets, strategy: p.cfg.Strategy, pluginOK: p.pluginOK.Load(), brokerVersion: p.brokerVersion()}.choose(delay)
	if err != nil {
		return choice{}, err
	}
	switch {
	case c.path == PathDirect:
		// A 404 or 403 answers the serial channel's publish alone (mayBeRefused).
		err = p.intoForeignTopology(ctx, exchange, routingKey, msg.Headers) // stays: a stalled foreign topology
	case !p.names.Reserved(exchange):
		// Stays: the broker does not check dead-lettering into the target (checkPermitted).
		err = p.checkPermitted(ctx, exchange, routingKey, msg.Headers)
	}
	return c, err
}

func (p *Publisher) slotFor(path Path, dest string, out *amqp.Publishing, alone bool) slotKind {
	switch {
	case alone || p.mayBeRefused(path, dest, out):
		return serialSlot
	case path == PathPlugin:
		return pluginSlot
	case path == PathDirect:
		return directSlot
	}
	return generalSlots
}

// deadLetterReserve is the header room for what dead-lettering adds on path c (deadletter.go).
func (p *Publisher) deadLetterReserve(c *choice, out *amqp.Publishing, size int, routingKey, dest string, shard int) int {
	hops, last := deadLetterHops(p.names, p.ladder, c, dest, shard)
	var park *deadLetterHop
	if p.park != "" {
		park = &deadLetterHop{queue: p.park, exchange: last, reason: parkReason}
	}
	return deadLetterReserve(out, size, routingKey, hops, park)
}

// precheck makes the checks of publish that need no channel. An error means nothing may be sent.
func (p *Publisher) precheck(exchange, routingKey string, msg *amqp.Publishing, delay time.Duration) error {
	if delay > 0 {
		if exchange == "" {
			return fmt.Errorf("%w: %w: a delayed message needs a target exchange; the default exchange \"\" cannot be one "+
				"(it cannot be bound to the dispatch exchange): publish to a named target exchange", ErrInvalidInput, ErrUnknownTarget)
		}
		if _, ok := p.targets[exchange]; !ok {
			return fmt.Errorf("%w: %q is not among the topology's targets (%s): add it to AMQPDELAY_TARGETS and run `rabbitdelay apply`",
				ErrUnknownTarget, exchange, p.targetList())
		}
		if msg.Expiration != "" {
			return fmt.Errorf("%w: msg.Expiration %q: a per-message TTL would expire the message inside the delay topology, early; "+
				"set a message TTL on the ready queue instead", ErrInvalidInput, msg.Expiration)
		}
	} else if err := p.intoTopology(exchange, routingKey, msg.Headers); err != nil {
		return err
	}
	if err := p.checkBodySize(len(msg.Body)); err != nil {
		return err
	}
	if len(msg.Headers) > 0 {
		if err := msg.Headers.Validate(); err != nil {
			return fmt.Errorf("%w: msg.Headers: %v", ErrInvalidInput, err)
		}
	}
	return validateMessage(exchange, routingKey, msg)
}

// destination returns the exchange a publish on path c goes to, its hops, and mandatory.
func (p *Publisher) destination(c choice, target string, shard int) (dest string, hops int, mandatory bool) {
	switch c.path {
	case PathBucket:
		return p.names.BucketExchange(), 1, true
	case PathLadder:
		first, _ := hopQueue(p.names, p.ladder, &c.plan, 0, shard)
		return p.names.LadderEntryExchange(first), len(c.plan.Hops), true
	case PathPlugin:
		// The plugin answers every mandatory publish with NO_ROUTE.
		return p.names.PluginExchange(), 1, false
	}
	return target, 0, true
}

// shardOf returns the ladder shard of a message id: FNV-1a modulo shards (0 when shards <= 1).
func shardOf(id string, shards int) int {
	if shards <= 1 {
		return 0
	}
	h := fnv.New32a()
	_, _ = h.Write([]byte(id))
	return int(h.Sum32() % uint32(shards))
}

// PublishAt is Publish with the delay until at (time.Until(at)); a time not in the future
// publishes at once (PathDirect). An ErrDelayTooLong names at.
func (p *Publisher) PublishAt(ctx context.Context, exchange, routingKey string, msg amqp.Publishing, at time.Time) (Receipt, error) {
	r, err := p.Publish(ctx, exchange, routingKey, msg, time.Until(at))
	return r, atError(err, at)
}

// atError names at in an ErrDelayTooLong (time.Until saturates at about 292 years).
func atError(err error, at time.Time) error {
	if !errors.Is(err, ErrDelayTooLong) {
		return err
	}
	return fmt.Errorf("publish at %s: %w", at.Format(time.RFC3339Nano), err)
}

// Close stops the Publisher: new publishes and those waiting for a connection fail with
// ErrClosed; those waiting for a confirm get up to 5 s (then ErrConnectionLost). It then closes
// the connection, giving the broker up to 5 s to answer (the socket is closed either way, and
// the error returned). Idempotent: later calls return the first call's result.
func (p *Publisher) Close() error {
	p.closeOnce.Do(func() {
		p.mu.Lock()
		p.cancel()
		p.mu.Unlock()
		select {
		case <-p.active.close():
		case <-time.After(5 * time.Second):
		}
		p.wg.Wait()
		if s := p.sess.Load(); s != nil {
			// amqp091's Close waits for the broker's close-ok without a bound.
			if err := amqpconn.Close(s.conn); err != nil && !errors.Is(err, amqp.ErrClosed) {
				p.closeErr = fmt.Errorf("amqpdelay: close connection (the socket is closed either way): %w", err)
			}
		}
		p.metrics.close()
		p.cfg.Logger.Info().Msg("amqpdelay: publisher closed")
	})
	return p.closeErr
}

func (p *Publisher) targetList() string {
	q := make([]string, len(p.spec.Targets))
	for i, t := range p.spec.Targets {
		q[i] = strconv.Quote(t.Name)
	}
	return strings.Join(q, ", ")
}

// brokerVersion is the current broker's RabbitMQ version ("" when unknown).
func (p *Publisher) brokerVersion() string {
	if s := p.sess.Load(); s != nil {
		return s.brokerVersion
	}
	return ""
}

// Deferred is a publish started by [Publisher.PublishDeferred]; its outcome is what
// [Publisher.Publish] would have returned. Safe for concurrent use.
type Deferred struct {
	done    chan struct{}
	receipt Receipt
	err     error
}

// Done returns a channel closed once the outcome is known.
func (d *Deferred) Done() <-chan struct{} { return d.done }

// Wait returns the outcome; ctx bounds only the waiting. Errors: [Publisher.Publish]'s, ctx's
// (wrapped; the publish goes on), or ErrInvalidInput for a nil ctx.
func (d *Deferred) Wait(ctx context.Context) (Receipt, error) {
	if ctx == nil {
		return Receipt{}, fmt.Errorf("%w: Deferred.Wait: nil context (use context.Background(), or a context with a deadline); "+
			"the publish goes on: Wait again with a context", ErrInvalidInput)
	}
	select {
	case <-d.done:
		return d.receipt, d.err
	case <-ctx.Done():
		return Receipt{}, fmt.Errorf("amqpdelay: context ended while waiting for a deferred publish's outcome: %w", ctx.Err())
	}
}

// PublishDeferred starts [Publisher.Publish] and returns at once; the Deferred tells the
// outcome. ctx bounds the publish after the return too. The top-level header table is copied;
// msg.Body and nested header values must not change until Done is closed. It waits while
// Config.MaxInFlight are outstanding, and returns an error only when it starts nothing:
// ErrInvalidInput (nil ctx), ErrClosed, or ctx's error (wrapped). Close waits for them.
func (p *Publisher) PublishDeferred(ctx context.Context, exchange, routingKey string, msg amqp.Publishing, delay time.Duration) (*Deferred, error) {
	return p.publishDeferred(ctx, exchange, routingKey, msg, delay, time.Time{})
}

// publishDeferred is PublishDeferred; a non-zero at is named in an ErrDelayTooLong.
func (p *Publisher) publishDeferred(ctx context.Context, exchange, routingKey string, msg amqp.Publishing, delay time.Duration, at time.Time) (*Deferred, error) {
	if ctx == nil {
		return nil, fmt.Errorf("%w: nil context (use context.Background(), or a context with a deadline)", ErrInvalidInput)
	}
	select {
	case p.inFlight <- struct{}{}:
	case <-ctx.Done():
		return nil, fmt.Errorf("amqpdelay: context ended while waiting for one of %d deferred publishes in flight to end (Config.MaxInFlight): %w",
			cap(p.inFlight), ctx.Err())
	case <-p.closeCtx.Done():
		return nil, ErrClosed
	}
	if !p.active.enter() {
		<-p.inFlight
		return nil, ErrClosed
	}
	msg.Headers = maps.Clone(msg.Headers) // nil stays nil
	d := &Deferred{done: make(chan struct{})}
	go func() {
		defer p.active.leave()
		d.receipt, d.err = p.publish(ctx, exchange, routingKey, msg, delay)
		if !at.IsZero() {
			d.err = atError(d.err, at)
		}
		<-p.inFlight
		close(d.done)
	}()
	return d, nil
}

// PublishAtDeferred is PublishDeferred with the delay time.Until(at), taken at the call.
func (p *Publisher) PublishAtDeferred(ctx context.Context, exchange, routingKey string, msg amqp.Publishing, at time.Time) (*Deferred, error) {
	return p.publishDeferred(ctx, exchange, routingKey, msg, time.Until(at), at)
}
