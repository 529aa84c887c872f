package consumer

import (
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/rs/zerolog"

	"github.com/delaykit/rabbitdelay/amqpdelay"
	"github.com/delaykit/rabbitdelay/internal/revlog"
)

// Option configures a Consumer; pass options to [New]. An option given a value it cannot use
// makes New fail with an error wrapping ErrInvalidConfig.
type Option func(*options) error

type options struct {
	concurrency     int
	backoff         Backoff
	backoffSet      bool
	store           Store
	storeSet        bool
	lease           time.Duration
	keep            time.Duration
	busyDelay       time.Duration
	maxDelay        time.Duration // the topology's ladder maximum (New)
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
	metricsReg      prometheus.Registerer // WithMetrics (metrics.go)
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

// MaxReconnectBackoff is the longest wait [WithReconnectBackoff] takes between reconnection
// attempts: a consumer that waits longer is as good as stopped, and a wait near the largest
// time.Duration would overflow with its ±50 % randomization into no wait at all.
const MaxReconnectBackoff = time.Hour

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
		reconnectMin:    100 * time.Millisecond,
		reconnectMax:    5 * time.Second,
		idFunc:          defaultID,
		bind:            true,
		revocations:     true,
	}
}

// WithConcurrency sets how many handlers run at once, 1 to 10,000 (default
// [DefaultConcurrency]); the channel's prefetch count (basic.qos) is the same number, so the
// broker never hands the Consumer a message no handler is free for.
func WithConcurrency(n int) Option {
	return func(o *options) error {
		if n < 1 || n > 10_000 {
			return fmt.Errorf("%w: concurrency %d: want 1 to 10,000", ErrInvalidConfig, n)
		}
		o.concurrency = n
		return nil
	}
}

// WithBackoff sets the retry policy (default [DefaultBackoff]: 5 attempts, 1 s doubling to
// 5 min, ±20 % jitter, with Max lowered to fit a ladder shorter than that); zero fields take the
// defaults. A field out of its range (see [Backoff]) is ErrInvalidConfig, naming the field
// and the range; New also fails when Max with its jitter exceeds the topology's ladder
// maximum.
func WithBackoff(b Backoff) Option {
	return func(o *options) error {
		b = b.withDefaults()
		if err := b.validate(); err != nil {
			return err
		}
		o.backoff, o.backoffSet = b, true
		return nil
	}
}

// WithStore sets the store of handled ids (default: a [MemoryStore] of [DefaultMemoryWindow]
// keys, private to the Consumer). Pass one [RedisStore] (or one MemoryStore) to every Consumer
// of a queue that must not handle a message twice. nil turns deduplication off: every delivery
// runs the handler.
func WithStore(s Store) Option {
	return func(o *options) error { o.store, o.storeSet = s, true; return nil }
}

// WithLease sets how long a claim on a message id lasts (default [DefaultLease]; at least
// 100 ms) and how long a handled id is remembered (default [DefaultKeep]; at least the lease).
// The Consumer renews the lease every third of it while the handler runs, so a handler may take
// longer than lease; a Consumer that dies stops renewing, and its claim expires after at most
// lease (see the package documentation's Guarantees). A copy of a handled message that arrives
// after keep runs the handler again.
func WithLease(lease, keep time.Duration) Option {
	return func(o *options) error {
		if lease < 100*time.Millisecond || keep < lease {
			return fmt.Errorf("%w: lease %v, keep %v: want lease >= 100ms and keep >= lease", ErrInvalidConfig, lease, keep)
		}
		o.lease, o.keep = lease, keep
		return nil
	}
}

// WithBusyDelay sets how long a message whose id another handler holds (a copy being handled
// now, or by a Consumer that died less than a lease ago) waits before it is looked at again
// (default: a quarter of the lease, at least 1 s), and a message deferred because the store or
// the revocation stream could not answer. It waits in the delay topology, like a retry,
// without counting as an attempt. Less than 1 ms, or more than the topology's ladder carries
// (49.7 days by default; checked by New): ErrInvalidConfig.
func WithBusyDelay(d time.Duration) Option {
	return func(o *options) error {
		if d < time.Millisecond {
			return fmt.Errorf("%w: WithBusyDelay %v: want 1ms or more (at most the topology's ladder maximum)", ErrInvalidConfig, d)
		}
		o.busyDelay = d
		return nil
	}
}

// WithShutdownTimeout sets how long Run, once its context ends, lets running handlers finish
// (default [DefaultShutdownTimeout]; 0: none, give everything back at once; negative:
// ErrInvalidConfig). Handlers still running then have their contexts cancelled and their
// messages given back to the queue (nack with requeue). Run returns once every step that
// records a handler's outcome has ended, which the settle timeout bounds
// ([WithSettleTimeout]).
func WithShutdownTimeout(d time.Duration) Option {
	return func(o *options) error {
		if d < 0 {
			return fmt.Errorf("%w: shutdown timeout %v: want 0 or more", ErrInvalidConfig, d)
		}
		o.shutdownTimeout = d
		return nil
	}
}

// WithSettleTimeout sets how long the Consumer may take to settle one delivery after its handler
// returned (default [DefaultSettleTimeout]; at least 1 ms, else ErrInvalidConfig): the store
// writes and the publish of the retry, deferred or parked copy are tried again with back-off
// while the error may pass (store or broker outage, a nack, a lost connection). When it ends
// before a copy is published, the delivery is given back (Event kind Requeued; see "Giving a
// delivery back" in the package documentation); a handled delivery whose done mark was not
// written is acked anyway, so as not to run it again. The steps before the handler (revocation
// check, claim, deferred copy) have a timeout of the same length of their own. A longer
// timeout rides out longer outages, holding the delivery meanwhile.
func WithSettleTimeout(d time.Duration) Option {
	return func(o *options) error {
		if d < time.Millisecond {
			return fmt.Errorf("%w: settle timeout %v: want 1ms or more", ErrInvalidConfig, d)
		}
		o.settleTimeout = d
		return nil
	}
}

// WithHandlerTimeout bounds each handler's context (default and 0: no bound but the
// shutdown's; negative: ErrInvalidConfig). A handler that returns its context's error after the
// timeout has failed, and is retried.
func WithHandlerTimeout(d time.Duration) Option {
	return func(o *options) error {
		if d < 0 {
			return fmt.Errorf("%w: handler timeout %v: want 0 (none) or more", ErrInvalidConfig, d)
		}
		o.handlerTimeout = d
		return nil
	}
}

// WithLogger makes the Consumer log through l (connection events, store failures, handler
// errors at debug level; never a body or a password). The default logs nothing; the Consumer
// never uses a global logger.
func WithLogger(l zerolog.Logger) Option {
	return func(o *options) error { o.logger = l; return nil }
}

// WithObserver makes the Consumer call f for every outcome of a delivery (see [Event]) and for
// every connection change. f runs on the handler's goroutine, after the outcome is settled with
// the broker: keep it quick. For lateness metrics, [WithMetrics] needs no observer
// (Event.Info.Late is the figure).
func WithObserver(f func(Event)) Option {
	return func(o *options) error { o.observer = f; return nil }
}

// WithConnectionName sets the name of the Consumer's connection in the management UI (default
// "rabbitdelay-consumer"); its retry Publisher's connection gets the same name plus "-retry".
func WithConnectionName(name string) Option {
	return func(o *options) error { o.name = name; return nil }
}

// WithReconnectBackoff sets the bounds of the exponential back-off between reconnection
// attempts, as for the amqpdelay Publisher: about min first, doubling to about max (defaults
// 100 ms and 5 s), each wait randomized by ±50 %. 0 < min <= max <= [MaxReconnectBackoff],
// else ErrInvalidConfig.
func WithReconnectBackoff(min, max time.Duration) Option {
	return func(o *options) error {
		if min <= 0 || max < min || max > MaxReconnectBackoff {
			return fmt.Errorf("%w: WithReconnectBackoff(%v, %v): want 0 < min <= max <= %v", ErrInvalidConfig, min, max, MaxReconnectBackoff)
		}
		o.reconnectMin, o.reconnectMax = min, max
		return nil
	}
}

// WithIDFunc sets how a delivery's id for deduplication is found (default: its MessageId,
// which the amqpdelay Publisher always sets, and, for a copy that Publisher.Reschedule
// published, "@" and that copy's tag (the header amqpdelay.CopyHeader, starting with 'r'), so
// that a message rescheduled after it was handled is handled again, once). For a delivery whose
// id is "" (no MessageId) the Consumer derives one from its content, and it replaces an id
// longer than MaxIDLen by its hash: see the Event kind IDDerived.
func WithIDFunc(f func(amqp.Delivery) string) Option {
	return func(o *options) error {
		if f == nil {
			return fmt.Errorf("%w: nil id function", ErrInvalidConfig)
		}
		o.idFunc = f
		return nil
	}
}

// WithoutRetryBinding stops Run from binding the queue to the retry exchange itself (by default
// it does, with the binding `rabbitdelay apply` declares for ready queues: idempotent). Use it when
// the Consumer's user may not bind (RabbitMQ's write permission on the queue, read on the
// exchange) and the queue is a ready queue of the topology.
func WithoutRetryBinding() Option {
	return func(o *options) error { o.bind = false; return nil }
}

// WithoutRevocations stops the Consumer from reading the revocation stream: every delivery runs
// the handler, revoked or not (amqpdelay's Publisher.Revoke and Reschedule then have no effect on
// this queue). By default Run reads it (package revoke) and acks revoked deliveries without
// calling the handler.
func WithoutRevocations() Option {
	return func(o *options) error { o.revocations = false; return nil }
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
