package amqpdelay

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/rs/zerolog"

	"github.com/delaykit/rabbitdelay/internal/amqpconn"
	"github.com/delaykit/rabbitdelay/internal/delayspec"
	"github.com/delaykit/rabbitdelay/internal/route"
	"github.com/delaykit/rabbitdelay/ttlbuckets"
)

// Receipt tells how a published message travels; Publish returns it with a nil error once
// the broker has confirmed the message. With an error it is the zero Receipt, whose Path
// reads PathDirect: check the error first.
type Receipt struct {
	// Path is the way the message was sent.
	Path Path
	// Due is when the message becomes due (publish time plus Delay), truncated to the
	// millisecond as in the rabbitdelay-due header that [Due] reads.
	Due time.Time
	// Delay is the effective delay: the requested one, rounded up when Rounded, 0 on the
	// direct path.
	Delay time.Duration
	// Requested is the delay asked for.
	Requested time.Duration
	// Rounded reports that Delay is longer than Requested: the ladder's unit (or the plugin's
	// millisecond) is coarser than the request. Never shorter: a message is never early.
	Rounded bool
	// Hops is the number of ladder queues the message passes through (PathLadder), 1 for
	// PathBucket and PathPlugin, 0 for PathDirect.
	Hops int
	// MessageID is the message's ID: the caller's, or a UUID the Publisher generated ([Receipt.ID]).
	MessageID string
	// Exchange is the exchange the message was published to: the target itself (direct); for
	// a ladder message its first queue's entry exchange (<queue>.entry);
	// the bucket exchange; the plugin exchange.
	Exchange string
}

// Publisher publishes delayed messages with publisher confirms over its own connection,
// which it re-establishes after a loss. It is safe for concurrent use; create it with
// [NewPublisher] and end it with [Publisher.Close].
type Publisher struct {
	cfg      Config
	spec     delayspec.Spec // the spec record read at start, with Config.extraTargets
	names    delayspec.Names
	targets  map[string]struct{}
	ladder   ttlbuckets.Ladder
	buckets  ttlbuckets.Buckets
	park     parkRoute // the dead-lettering that can park a message after its path
	opts     options
	log      zerolog.Logger
	rr       atomic.Uint32
	pluginOK atomic.Bool
	// pluginLost is set when a publish found the plugin exchange gone (404); while it is set,
	// publishes re-probe for the exchange at most every pluginReprobe (nextProbe: Unix ns).
	pluginLost atomic.Bool
	nextProbe  atomic.Int64

	checkSem chan struct{} // capacity 1: one check on the check channel at a time (askOnCheckChannel)
	permSem  chan struct{} // capacity 1: one first permission check at a time (permission.go)
	// refusals holds what the broker has refused by closing a channel (refusal.go).
	refusals refusals
	// user is the user name of the connection's URL: a UserId property that differs goes
	// on the serial channel (RabbitMQ refuses it unless the user has the impersonator tag).
	user string

	sess    atomic.Pointer[session]
	mu      sync.Mutex
	changed chan struct{} // closed and replaced whenever sess or one of its channels changes

	// closeCtx is the one notion of "closed": Close cancels it (under mu), which ends waits for
	// a connection, reconnection attempts and probes, and makes new publishes fail.
	closeCtx  context.Context
	cancel    context.CancelFunc
	active    publishes     // publishes in progress, which Close waits for
	inFlight  chan struct{} // one slot per deferred publish in progress (Config.MaxInFlight)
	closeOnce sync.Once
	closeErr  error
	wg        sync.WaitGroup // the supervisor and background probes
	metrics   *pubMetrics    // Config.Metrics (metrics.go); nil records nothing
}

// publishes counts the publishes in progress; Close waits for them on a signal (drained).
type publishes struct {
	mu      sync.Mutex
	n       int
	closing bool
	drained chan struct{} // closed once closing and n is 0
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

// leave counts a publish out.
func (c *publishes) leave() {
	c.mu.Lock()
	c.n--
	if c.closing && c.n == 0 {
		close(c.drained)
	}
	c.mu.Unlock()
}

// close refuses new publishes and returns a channel closed once the last one has left.
func (c *publishes) close() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closing = true
	if c.n == 0 {
		close(c.drained)
	}
	return c.drained
}

// isClosed reports whether Close has begun.
func (p *Publisher) isClosed() bool { return p.closeCtx.Err() != nil }

// NewPublisher connects to the broker of cfg, reads the delay topology that `rabbitdelay apply`
// recorded for cfg.Prefix (the stream <prefix>.spec), checks that its dispatch exchange, targets
// and bucket queues exist (passive declares), probes for the delayed-message plugin's exchange,
// and opens its publishing channels. ctx bounds all of that; the Publisher keeps running after
// ctx ends.
//
// Errors: ErrInvalidConfig (a Config field it cannot use: every problem at once, each naming
// its field; or a broker whose channel_max is below Config.Channels + 2), ErrTopologyMissing (no record or a
// missing object: run `rabbitdelay apply`), ErrPluginUnavailable (strategy PluginOnly and no
// plugin exchange), or the connection's error (never containing the password; a broker refusal
// reachable as *amqp091.Error).
func NewPublisher(ctx context.Context, cfg Config) (*Publisher, error) {
	if ctx == nil {
		return nil, fmt.Errorf("%w: nil context (use context.Background())", ErrInvalidInput)
	}
	o, err := cfg.check()
	if err != nil {
		return nil, err
	}
	conn, err := amqpconn.Dial(ctx, cfg.conn(), o.name)
	if err != nil {
		return nil, err
	}
	spec, err := cfg.readSpec(ctx, conn)
	if err != nil {
		_ = conn.Close()
		return nil, err
	}
	spec.Targets = append(spec.Targets, o.extraTargets...)
	if o.strategy == PluginOnly && spec.Plugin == delayspec.PluginOff {
		_ = conn.Close()
		return nil, fmt.Errorf("%w: strategy PluginOnly, and prefix %q was applied with AMQPDELAY_PLUGIN=off: the topology has no plugin exchange",
			ErrInvalidConfig, spec.Prefix)
	}
	ladder, buckets, err := spec.LadderOrBuckets()
	if err != nil {
		_ = conn.Close()
		return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	cfg.Prefix = spec.Prefix
	p := &Publisher{
		cfg:      cfg,
		spec:     spec,
		names:    spec.Names(),
		targets:  make(map[string]struct{}, len(spec.Targets)+1),
		ladder:   ladder,
		buckets:  buckets,
		park:     newParkRoute(spec),
		opts:     o,
		log:      o.logger,
		changed:  make(chan struct{}),
		active:   publishes{drained: make(chan struct{})},
		checkSem: make(chan struct{}, 1),
		permSem:  make(chan struct{}, 1),
		inFlight: make(chan struct{}, o.maxInFlight),
		user:     urlUser(cfg.conn().URLOrDefault()),
	}
	// The retry exchange is a target of every topology: the consumer package's retries go
	// through it (its binding to the dispatch exchange is part of the applied topology).
	p.targets[p.names.Retry()] = struct{}{}
	for _, t := range spec.Targets {
		p.targets[t.Name] = struct{}{}
	}
	// Room among the exchanges trusted after a confirm for every exchange of the delay topology
	// (per shard: the ladder's levels and last-hop exchanges, an entry exchange per ladder,
	// last-hop and first-hop queue; the buckets' exchange), beside maxNames targets of direct
	// publishes. A name beyond the limit is only checked again, never refused.
	p.refusals.trusted.limit = maxNames + max(spec.Shards, 1)*3*(len(route.Queues(ladder))+ladder.Levels()) + 1
	if p.metrics, err = newPubMetrics(o.metricsReg, p); err != nil {
		_ = conn.Close()
		return nil, err
	}
	p.closeCtx, p.cancel = context.WithCancel(context.Background())
	s, err := p.setUp(ctx, conn)
	if err != nil {
		p.cancel()
		p.metrics.close()
		return nil, err
	}
	if o.strategy == PluginOnly && !p.pluginOK.Load() {
		_ = s.conn.Close()
		p.cancel()
		p.metrics.close()
		return nil, errPluginMissing(s.brokerVersion)
	}
	p.sess.Store(s)
	p.wg.Add(1)
	go p.supervise(s)
	return p, nil
}

// MaxDelay returns the longest delay the topology's ladder carries (AMQPDELAY_LADDER_MAX as
// applied). A longer delay takes the plugin when the broker has it, and otherwise fails with
// ErrDelayTooLong.
func (p *Publisher) MaxDelay() time.Duration { return p.ladder.WithDefaults().Max }

// Publish sends msg to exchange with routingKey, due after delay, by the path the strategy
// chooses (see the package documentation), and returns once the broker has confirmed it.
//
// A delay <= 0 publishes to exchange at once (PathDirect); a positive delay needs exchange to
// be one of the topology's targets. msg is not modified: the Publisher sends a copy with its
// own delay headers, a random MessageId when msg has none, its copy tag (CopyHeader) and
// persistent delivery mode when msg.DeliveryMode is 0.
//
// Errors: ErrInvalidInput (input that amqp091 or RabbitMQ would answer by closing the
// connection or channel, such as a short string over 255 bytes, a NaN header, headers over the
// frame_max, a body over Config.MaxMessageSize, msg.Expiration on a delayed message, a direct
// publish into the delay topology), ErrUnknownTarget, ErrDelayTooLong, ErrPluginUnavailable
// (nothing sent for any of these), ErrExchangeNotFound, ErrAccessRefused (nothing stored; see
// refusal.go and permission.go), ErrUnroutable, ErrNacked, ErrConnectionLost (outcome unknown), ErrClosed, or
// ctx's error, wrapped, when ctx ends first.
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

// publish is Publish for a caller that has counted itself in p.active.
func (p *Publisher) publish(ctx context.Context, exchange, routingKey string, msg amqp.Publishing, delay time.Duration) (_ Receipt, err error) {
	metricPath := pathNone // metrics.go: the path label, once a path is chosen
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
	tag := copyTag(msg.Headers)                    // revoke.go
	shard := shardOf(out.MessageId, p.spec.Shards) // the shard of the ladder (PathLadder)
	dest, hops, mandatory := p.destination(c, exchange, shard)
	// alone: sent again on the serial channel because a refusal closed the shared channel it
	// was in flight on (closedByRefusal).
	alone := false
	for {
		if c.path == PathPlugin && !p.pluginOK.Load() {
			// A publish found the plugin exchange gone (404) since this path was chosen; this
			// message was not stored (pluginGone): choose again without the plugin.
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
			// Many publishes to a new exchange may queue here at once: the first one's confirm
			// makes the exchange trusted, and the rest then go on the shared channels.
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
				// The broker closed a shared channel because of one publish in flight there,
				// maybe another's: send this one again alone, where a refusal is its own answer.
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

// prepare makes the checks of a publish before it is sent (precheck, then the ones that ask
// the broker) and chooses its path. An error means nothing may be sent.
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
	c, err := chooser{ladder: p.ladder, buckets: p.buckets, strategy: p.opts.strategy, pluginOK: p.pluginOK.Load(), brokerVersion: p.brokerVersion()}.choose(delay)
	if err != nil {
		return choice{}, err
	}
	switch {
	case c.path == PathDirect:
		// A missing or forbidden exchange needs no check here: the first publish to an
		// exchange goes alone on the serial channel (mayBeRefused), where the broker's 404 or
		// 403 is the answer to that publish only (refusal.go).
		err = p.intoForeignTopology(ctx, exchange, routingKey, msg.Headers) // stays: a stalled foreign topology
	case !p.names.Reserved(exchange):
		// Stays: dead-lettering into the target is not checked by the broker (permission.go).
		// A target of the topology's own (the consumer's retry exchange) is covered by the
		// write permission on the topology's exchanges.
		err = p.checkPermitted(ctx, exchange, routingKey, msg.Headers)
	}
	return c, err
}

// slotFor returns the kind of channel a publish on path to dest goes on: the serial channel
// when it is sent again alone or may be refused (mayBeRefused), else its path's own.
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

// deadLetterReserve is the room to leave in out's content header (its size) for the
// dead-letter headers RabbitMQ adds on path c through dest in shard, and when a ready queue
// parks it (deadletter.go).
func (p *Publisher) deadLetterReserve(c *choice, out *amqp.Publishing, size int, routingKey, dest string, shard int) int {
	hops, last := deadLetterHops(p.names, p.ladder, c, dest, shard) // none on the plugin and direct paths
	var park *deadLetterHop
	if h, ok := p.park.hop(last); ok {
		park = &h
	}
	return deadLetterReserve(out, size, routingKey, hops, park)
}

// precheck makes the checks of publish that need no channel: the target, a TTL on a delayed
// message, the body size and the headers and properties (validateMessage). An error means
// nothing may be sent.
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
	if err := validateMessage(exchange, routingKey, msg); err != nil {
		return err
	}
	return nil
}

// destination returns the exchange a publish on path c goes to, its hops, and whether it is
// mandatory; a ladder publish enters shard of the ladder (AMQPDELAY_SHARDS as applied) through
// its first queue's entry exchange.
func (p *Publisher) destination(c choice, target string, shard int) (dest string, hops int, mandatory bool) {
	switch c.path {
	case PathBucket:
		return p.names.BucketExchange(), 1, true
	case PathLadder:
		first, _ := hopQueue(p.names, p.ladder, &c.plan, 0, shard)
		return p.names.LadderEntryExchange(first), len(c.plan.Hops), true
	case PathPlugin:
		// The plugin answers every delayed publish with NO_ROUTE when mandatory is set.
		return p.names.PluginExchange(), 1, false
	}
	return target, 0, true
}

// shardOf returns the shard of the ladder (0 to shards-1) a message with this id travels
// through: the FNV-1a hash of the id modulo shards, so that messages spread evenly over the
// shards (ids are random UUIDs unless the caller sets them) and a message published again
// with the same id takes the same shard. 0 when shards <= 1.
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

// atError names at in an ErrDelayTooLong of a publish at that time: the delay it states is
// time.Until(at), which saturates at about 292 years.
func atError(err error, at time.Time) error {
	if !errors.Is(err, ErrDelayTooLong) {
		return err
	}
	return fmt.Errorf("publish at %s: %w", at.Format(time.RFC3339Nano), err)
}

// Close stops the Publisher: new publishes fail with ErrClosed at once, publishes waiting
// for a connection end with ErrClosed, and publishes waiting for their confirmation get up to
// 5 s to receive it before the connection is closed (they then fail with ErrConnectionLost).
// It then waits for its goroutines and closes the Publisher's connection, giving the broker up
// to 5 s more to answer (a broker that blocks the connection, in a memory or disk alarm, does
// not: the socket is then closed anyway and Close returns the error). Close is idempotent:
// later calls return the first call's result.
func (p *Publisher) Close() error {
	p.closeOnce.Do(func() {
		p.mu.Lock()
		p.cancel()
		p.mu.Unlock()
		drained := p.active.close()
		timer := time.NewTimer(5 * time.Second)
		select {
		case <-drained:
		case <-timer.C:
		}
		timer.Stop()
		p.wg.Wait()
		if s := p.sess.Load(); s != nil {
			// amqp091's Close waits for the broker's close-ok without a bound.
			if err := s.conn.CloseDeadline(time.Now().Add(5 * time.Second)); err != nil && !errors.Is(err, amqp.ErrClosed) {
				p.closeErr = fmt.Errorf("amqpdelay: close connection (the socket is closed either way): %w", err)
			}
		}
		p.metrics.close()
		p.log.Info().Msg("amqpdelay: publisher closed")
	})
	return p.closeErr
}

func (p *Publisher) targetList() string {
	s := ""
	for _, t := range p.spec.Targets {
		if s != "" {
			s += ", "
		}
		s += strconv.Quote(t.Name)
	}
	return s
}

// brokerVersion is the RabbitMQ version of the current connection's broker ("" when unknown).
func (p *Publisher) brokerVersion() string {
	if s := p.sess.Load(); s != nil {
		return s.brokerVersion
	}
	return ""
}
