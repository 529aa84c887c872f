package consumer

import (
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/rs/zerolog"

	"github.com/delaykit/rabbitdelay/amqpdelay"
	"github.com/delaykit/rabbitdelay/internal/amqpconn"
	"github.com/delaykit/rabbitdelay/internal/revlog"
)

// Options configure a Consumer; pass them to [New]. The zero value of each field means its
// default, so Options{} gives a Consumer with every default. New refuses a value out of its
// range with an error wrapping ErrInvalidConfig that names the field and the range, one error
// per field, joined.
type Options struct {
	// Concurrency is how many handlers run at once, and the channel's prefetch count
	// (basic.qos), so the broker never hands the Consumer a message no handler is free for.
	// 0: DefaultConcurrency; else 1 to 10,000.
	Concurrency int

	// Backoff is the retry policy; its zero fields take the values of DefaultBackoff, and a
	// field out of its range (see [Backoff]) is refused. The zero Backoff is DefaultBackoff
	// with Max lowered to fit a ladder shorter than it; a Backoff with any field set whose
	// longest wait the topology's ladder cannot carry makes Run fail with ErrInvalidConfig.
	Backoff Backoff

	// Store is the store of handled ids. nil: a [MemoryStore] of DefaultMemoryWindow keys,
	// private to the Consumer. Pass one [RedisStore] (or one MemoryStore) to every Consumer of
	// a queue that must not handle a message twice.
	Store Store
	// NoStore turns deduplication off: every delivery runs the handler. With a Store as well:
	// ErrInvalidConfig.
	NoStore bool

	// Lease is how long a claim on a message id lasts. 0: DefaultLease; else at least 100 ms.
	// The Consumer renews it every third of it while the handler runs, so a handler may take
	// longer; a Consumer that dies stops renewing, and its claim expires after at most Lease
	// (see the package documentation's Guarantees).
	Lease time.Duration
	// Keep is how long a handled id is remembered: a copy of a handled message that arrives
	// later runs the handler again. 0: DefaultKeep, or Lease when that is longer; else at
	// least Lease.
	Keep time.Duration
	// BusyDelay is how long a delivery waits in the delay topology, like a retry but without
	// counting as an attempt, when another handler holds its id (a copy being handled now, or
	// by a Consumer that died less than a lease ago) or when the store or the revocation
	// stream could not answer. 0: a quarter of the lease, at least 1 s and at most the
	// topology's ladder maximum; else 1 ms to that maximum (which Run checks).
	BusyDelay time.Duration

	// ShutdownTimeout is how long Run, once its context ends, lets running handlers finish;
	// then their contexts are cancelled and their messages given back to the queue (nack with
	// requeue). Run returns once every step that records a handler's outcome has ended, which
	// SettleTimeout bounds. 0: DefaultShutdownTimeout; negative: none, everything is given back
	// at once.
	ShutdownTimeout time.Duration
	// SettleTimeout bounds the settling of one delivery after its handler returned: the store
	// writes and the publish of its retry, deferred or parked copy, tried again with back-off
	// while the error may pass (a store or broker outage, a nack, a lost connection). When it
	// ends before a copy is published, the delivery is given back (Event kind Requeued); a
	// handled delivery whose done mark was not written is acked anyway, so as not to run it
	// again. The steps before the handler (revocation check, claim, deferred copy) have a
	// timeout of the same length of their own. 0: DefaultSettleTimeout; else at least 1 ms.
	SettleTimeout time.Duration
	// HandlerTimeout bounds each handler's context; a handler that returns its context's error
	// after it has failed, and is retried. 0: no bound but the shutdown's; negative:
	// ErrInvalidConfig.
	HandlerTimeout time.Duration

	// Logger receives the Consumer's logs: connection events, store failures, handler errors
	// at debug level; never a body or a password. The zero Logger logs nothing; the Consumer
	// never uses a global logger.
	Logger zerolog.Logger
	// Observer, when set, is called for every outcome of a delivery (see [Event]) and for
	// every connection change. It runs on the handler's goroutine, after the outcome is
	// settled with the broker: keep it quick.
	Observer func(Event)
	// Metrics, when set, is the Prometheus registry the Consumer records its metrics on (see
	// "Metrics" in the package documentation); the global registry is never touched.
	// Consumers may share one: they share the collectors. A registry that refuses the
	// collectors (names registered with other labels): ErrInvalidConfig.
	Metrics prometheus.Registerer

	// ConnectionName is the name of the Consumer's connection in the management UI; its retry
	// Publisher's connection gets the same name plus "-retry". "": "rabbitdelay-consumer".
	ConnectionName string
	// ReconnectMin and ReconnectMax bound the exponential back-off between reconnection
	// attempts, as for the amqpdelay Publisher: about ReconnectMin first, doubling to about
	// ReconnectMax, each wait randomized by ±50 %. 0: 100 ms and 5 s (ReconnectMax: at least
	// ReconnectMin); else 0 < ReconnectMin <= ReconnectMax <= MaxReconnectBackoff.
	ReconnectMin, ReconnectMax time.Duration

	// IDFunc returns a delivery's id for deduplication. nil: its MessageId (which the
	// amqpdelay Publisher always sets) and, for a copy that Publisher.Reschedule published,
	// "@" and that copy's tag (the header amqpdelay.CopyHeader), so that a message
	// rescheduled after it was handled is handled again, once. For an id "" the Consumer
	// derives one from the delivery's content, and it replaces an id longer than MaxIDLen by
	// its hash: see the Event kind IDDerived.
	IDFunc func(amqp.Delivery) string

	// NoRetryBinding stops Run from binding the queue to the retry exchange itself (by
	// default it does, with the binding `rabbitdelay apply` declares for ready queues:
	// idempotent). Set it when the Consumer's user may not bind (RabbitMQ's write permission
	// on the queue, read on the exchange) and the queue is a ready queue of the topology.
	NoRetryBinding bool
	// NoRevocations stops the Consumer from reading the revocation stream (package revoke):
	// every delivery runs the handler, revoked or not, so amqpdelay's Publisher.Revoke and
	// Reschedule have no effect on this queue. By default revoked deliveries are acked
	// without calling the handler.
	NoRevocations bool
}

// options are Options resolved: defaults filled in, ranges checked.
type options struct {
	concurrency     int
	backoff         Backoff
	backoffSet      bool
	store           Store
	storeSet        bool
	lease           time.Duration
	keep            time.Duration
	busyDelay       time.Duration
	maxDelay        time.Duration // the topology's ladder maximum (Run)
	shutdownTimeout time.Duration
	handlerTimeout  time.Duration
	settleTimeout   time.Duration
	logger          zerolog.Logger
	observer        func(Event)
	name            string
	reconnectMin    time.Duration
	reconnectMax    time.Duration
	idFunc          func(amqp.Delivery) string
	bind            bool
	revocations     bool
	metricsReg      prometheus.Registerer
}

// Defaults.
const (
	// DefaultConcurrency is how many handlers run at once (and the prefetch count).
	DefaultConcurrency = 8
	// DefaultLease is how long a claim on a message id lasts before it expires on its own;
	// the Consumer renews it every third of it while the handler runs.
	DefaultLease = time.Minute
	// DefaultKeep is how long a handled id is remembered.
	DefaultKeep = 24 * time.Hour
	// DefaultShutdownTimeout is how long Run's shutdown lets running handlers finish.
	DefaultShutdownTimeout = 30 * time.Second
	// DefaultSettleTimeout bounds the settling of one delivery: its store writes and the
	// publishes of its retry, deferred or parked copy, tried again with back-off.
	DefaultSettleTimeout = 30 * time.Second
)

// MaxReconnectBackoff is the largest Options.ReconnectMax: a consumer that waits longer is as
// good as stopped, and a wait near the largest time.Duration would overflow with its ±50 %
// randomization into no wait at all.
const MaxReconnectBackoff = amqpconn.MaxReconnect

// defaultOptions are the options of Options{}.
func defaultOptions() options {
	return options{
		concurrency:     DefaultConcurrency,
		backoff:         DefaultBackoff,
		lease:           DefaultLease,
		keep:            DefaultKeep,
		shutdownTimeout: DefaultShutdownTimeout,
		settleTimeout:   DefaultSettleTimeout,
		logger:          zerolog.Nop(),
		name:            "rabbitdelay-consumer",
		reconnectMin:    amqpconn.DefaultReconnectMin,
		reconnectMax:    amqpconn.DefaultReconnectMax,
		idFunc:          defaultID,
		bind:            true,
		revocations:     true,
	}
}

// resolve fills in the defaults of the zero fields of opts and checks the others; the error
// joins one error per unusable field, each wrapping ErrInvalidConfig.
func (opts Options) resolve() (options, error) {
	o := defaultOptions()
	var errs []error
	bad := func(format string, a ...any) {
		errs = append(errs, fmt.Errorf("%w: "+format, append([]any{ErrInvalidConfig}, a...)...))
	}

	switch n := opts.Concurrency; {
	case n == 0:
	case n < 1 || n > 10_000:
		bad("Options.Concurrency %d: want 1 to 10,000 (0: the default %d)", n, DefaultConcurrency)
	default:
		o.concurrency = n
	}

	if opts.Backoff != (Backoff{}) {
		b := opts.Backoff.withDefaults()
		if err := b.validate(); err != nil {
			errs = append(errs, err)
		}
		o.backoff, o.backoffSet = b, true
	}

	switch {
	case opts.NoStore && opts.Store != nil:
		bad("Options.NoStore with a Store: set one or the other (NoStore turns deduplication off)")
	case opts.NoStore:
		o.store, o.storeSet = nil, true
	case opts.Store != nil:
		o.store, o.storeSet = opts.Store, true
	}

	opts.resolveTimes(&o, bad)
	o.logger, o.observer, o.metricsReg = opts.Logger, opts.Observer, opts.Metrics
	if opts.ConnectionName != "" {
		o.name = opts.ConnectionName
	}

	if rmin, rmax, err := amqpconn.ReconnectRange("Options", opts.ReconnectMin, opts.ReconnectMax); err != nil {
		bad("%w", err)
	} else {
		o.reconnectMin, o.reconnectMax = rmin, rmax
	}

	if opts.IDFunc != nil {
		o.idFunc = opts.IDFunc
	}
	o.bind, o.revocations = !opts.NoRetryBinding, !opts.NoRevocations
	return o, errors.Join(errs...)
}

// resolveTimes is resolve's part for the leases and timeouts.
func (opts Options) resolveTimes(o *options, bad func(format string, a ...any)) {
	lease, keep := opts.Lease, opts.Keep
	if lease == 0 {
		lease = DefaultLease
	}
	if keep == 0 {
		keep = max(DefaultKeep, lease)
	}
	if lease < 100*time.Millisecond || keep < lease {
		bad("Options.Lease %v, Options.Keep %v: want Lease 100ms or more and Keep at least Lease (0: the defaults %v and %v)",
			opts.Lease, opts.Keep, DefaultLease, DefaultKeep)
	} else {
		o.lease, o.keep = lease, keep
	}

	if d := opts.BusyDelay; d != 0 && d < time.Millisecond {
		bad("Options.BusyDelay %v: want 1ms or more (at most the topology's ladder maximum; 0: a quarter of the lease)", d)
	} else {
		o.busyDelay = d
	}

	switch d := opts.ShutdownTimeout; {
	case d < 0:
		o.shutdownTimeout = 0
	case d > 0:
		o.shutdownTimeout = d
	}
	if d := opts.SettleTimeout; d != 0 && d < time.Millisecond {
		bad("Options.SettleTimeout %v: want 1ms or more (0: the default %v)", d, DefaultSettleTimeout)
	} else if d != 0 {
		o.settleTimeout = d
	}
	if d := opts.HandlerTimeout; d < 0 {
		bad("Options.HandlerTimeout %v: want 0 (none) or more", d)
	} else {
		o.handlerTimeout = d
	}
}

// defaultID is a delivery's MessageId, and for a copy Reschedule published (revlog.Rescheduled)
// its copy tag after an "@": each Reschedule of an id is a new message to handle, while its
// redeliveries and retries (which keep the tag) and a publisher's resend of the same id are not.
func defaultID(d amqp.Delivery) string {
	if d.MessageId == "" {
		return ""
	}
	if tag, _ := d.Headers[amqpdelay.CopyHeader].(string); revlog.Rescheduled(tag) {
		return d.MessageId + "@" + tag
	}
	return d.MessageId
}

// fitWaits fits o's waits to m, the longest delay the topology carries: every wait the
// Consumer asks for (a retry, a deferred or an early copy) goes through the ladder, and a wait
// beyond its maximum could never be published, so the delivery would be given back to the queue
// again and again. A default backoff is shortened to fit; one the caller set is refused.
func (o *options) fitWaits(m time.Duration) error {
	var errs []error
	if fit := time.Duration(float64(m) / (1 + o.backoff.Jitter)); o.backoff.longest() > float64(m) && !o.backoffSet {
		o.backoff.Max = max(fit, time.Millisecond)
		o.backoff.Initial = min(o.backoff.Initial, o.backoff.Max)
	} else if o.backoff.longest() > float64(m) {
		errs = append(errs, fmt.Errorf("%w: Options.Backoff.Max %v with Jitter %v waits up to %s, beyond %v, the longest delay "+
			"the topology's ladder carries (retries wait in it): want Backoff.Max from Backoff.Initial (%v) to %v",
			ErrInvalidConfig, o.backoff.Max, o.backoff.Jitter, floatDuration(o.backoff.longest()), m, o.backoff.Initial, fit))
	}
	if o.busyDelay > m {
		errs = append(errs, fmt.Errorf("%w: Options.BusyDelay %v: want 1ms to %v, the longest delay the topology's ladder carries",
			ErrInvalidConfig, o.busyDelay, m))
	}
	o.maxDelay = m
	if o.busyDelay == 0 {
		o.busyDelay = min(max(o.lease/4, time.Second), m)
	}
	return errors.Join(errs...)
}

// floatDuration formats d nanoseconds, also beyond the largest time.Duration.
func floatDuration(d float64) string {
	if d >= math.MaxInt64 {
		return fmt.Sprintf("%.0f years", d/float64(365*24*time.Hour))
	}
	return time.Duration(d).String()
}
