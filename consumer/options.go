package consumer

import (
	"cmp"
	"errors"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/rs/zerolog"

	"github.com/delaykit/rabbitdelay/amqpdelay"
	"github.com/delaykit/rabbitdelay/internal/amqpconn"
	"github.com/delaykit/rabbitdelay/internal/revlog"
)

// Options configure a Consumer; pass them to [New]. The zero value of each field means its
// default. New refuses a value out of its range with one error per field, each wrapping
// ErrInvalidConfig and naming the field and the range, joined.
type Options struct {
	// Concurrency is how many handlers run at once, and the prefetch count (basic.qos).
	// 0: DefaultConcurrency; else 1 to 10,000.
	Concurrency int

	// Backoff is the retry policy; its zero fields take the values of DefaultBackoff. The zero
	// Backoff has Max lowered to fit a shorter ladder; a set Backoff whose longest wait the
	// topology's ladder cannot carry makes Run fail with ErrInvalidConfig.
	Backoff Backoff

	// Store is the store of handled ids. nil: a private [MemoryStore]. Share one [RedisStore]
	// between every Consumer of a queue that must not handle a message twice.
	Store Store
	// NoStore turns deduplication off. With a Store as well: ErrInvalidConfig.
	NoStore bool

	// Lease is how long a claim on an id lasts, renewed every third of it while the handler
	// runs; a handler whose lease is lost has its context cancelled. 0: DefaultLease; else at
	// least 100 ms.
	Lease time.Duration
	// Keep is how long a handled id is remembered. 0: DefaultKeep, or Lease when longer; else
	// at least Lease.
	Keep time.Duration
	// BusyDelay is how long a delivery waits in the delay topology, without counting an
	// attempt, when its id is leased elsewhere or the store or revocation stream could not
	// answer. 0: a quarter of the lease, 1 s to the ladder's maximum; else 1 ms to that maximum.
	BusyDelay time.Duration

	// ShutdownTimeout is how long Run, once its context ends, lets running handlers finish
	// before it cancels them and gives their messages back (nack with requeue).
	// 0: DefaultShutdownTimeout; negative: none.
	ShutdownTimeout time.Duration
	// SettleTimeout bounds the settling of one delivery: store writes and the publish of its
	// retry, deferred or parked copy, tried again with back-off. When it ends before a copy is
	// published, the delivery is given back (Requeued); a handled delivery whose done mark
	// failed is acked anyway. The steps before the handler get a timeout of the same length.
	// 0: DefaultSettleTimeout; else at least 1 ms.
	SettleTimeout time.Duration
	// HandlerTimeout bounds each handler's context. 0: no bound but the shutdown's; negative:
	// ErrInvalidConfig.
	HandlerTimeout time.Duration

	// Logger receives the Consumer's logs, never a body or a password. The zero Logger logs
	// nothing.
	Logger zerolog.Logger
	// Observer, when set, is called on the handler's goroutine for every [Event], after the
	// outcome is settled: keep it quick.
	Observer func(Event)
	// Metrics, when set, is the Prometheus registry for the Consumer's metrics; Consumers may
	// share one. A registry that refuses the collectors: ErrInvalidConfig.
	Metrics prometheus.Registerer

	// ConnectionName names the connection in the management UI; the retry Publisher's gets
	// "-retry" appended. "": "rabbitdelay-consumer".
	ConnectionName string
	// ReconnectMin and ReconnectMax bound the exponential back-off between reconnection
	// attempts, each wait randomized by ±50 %. 0: 100 ms and 5 s (ReconnectMax: at least
	// ReconnectMin); else 0 < ReconnectMin <= ReconnectMax <= MaxReconnectBackoff.
	ReconnectMin, ReconnectMax time.Duration

	// IDFunc returns a delivery's id for deduplication. nil: its MessageId and, for a copy
	// that Publisher.Reschedule published, "@" and its copy tag (amqpdelay.CopyHeader), so a
	// rescheduled message is handled again, once. See [IDDerived] for "" and long ids.
	IDFunc func(amqp.Delivery) string

	// NoRetryBinding stops Run from binding the queue to the retry exchange (as `rabbitdelay
	// apply` does for ready queues): for a user who may not bind.
	NoRetryBinding bool
	// NoRevocations stops the Consumer from reading the revocation stream (package revoke):
	// revoked deliveries then run the handler too.
	NoRevocations bool
}

// options are Options resolved: defaults filled in, ranges checked (ShutdownTimeout 0: none;
// Store nil: no deduplication).
type options struct {
	Options
	backoffSet bool
	maxDelay   time.Duration // the topology's ladder maximum (Run)
}

// Defaults.
const (
	// DefaultConcurrency is how many handlers run at once (and the prefetch count).
	DefaultConcurrency = 8
	// DefaultLease is how long a claim on a message id lasts unless renewed.
	DefaultLease = time.Minute
	// DefaultKeep is how long a handled id is remembered.
	DefaultKeep = 24 * time.Hour
	// DefaultShutdownTimeout is how long Run's shutdown lets running handlers finish.
	DefaultShutdownTimeout = 30 * time.Second
	// DefaultSettleTimeout bounds the settling of one delivery.
	DefaultSettleTimeout = 30 * time.Second
)

// MaxReconnectBackoff is the largest Options.ReconnectMax: a wait near the largest
// time.Duration would overflow with its ±50 % randomization into no wait at all.
const MaxReconnectBackoff = amqpconn.MaxReconnect

// resolve fills in the defaults of the zero fields of opts and checks the others.
func (opts Options) resolve() (options, error) {
	o := options{Options: opts}
	var errs []error
	bad := func(format string, a ...any) {
		errs = append(errs, fmt.Errorf("%w: "+format, append([]any{ErrInvalidConfig}, a...)...))
	}
	if n := opts.Concurrency; n < 0 || n > 10_000 {
		bad("Options.Concurrency %d: want 1 to 10,000 (0: the default %d)", n, DefaultConcurrency)
	}
	o.Concurrency = cmp.Or(opts.Concurrency, DefaultConcurrency)
	o.Backoff = DefaultBackoff
	if opts.Backoff != (Backoff{}) {
		o.Backoff, o.backoffSet = opts.Backoff.withDefaults(), true
		if err := o.Backoff.validate(); err != nil {
			errs = append(errs, err)
		}
	}
	switch {
	case opts.NoStore && opts.Store != nil:
		bad("Options.NoStore with a Store: set one or the other (NoStore turns deduplication off)")
	case !opts.NoStore && opts.Store == nil:
		o.Store = &MemoryStore{}
	}
	o.Lease = cmp.Or(opts.Lease, DefaultLease)
	if o.Keep == 0 {
		o.Keep = max(DefaultKeep, o.Lease)
	}
	if o.Lease < 100*time.Millisecond || o.Keep < o.Lease {
		bad("Options.Lease %v, Options.Keep %v: want Lease 100ms or more and Keep at least Lease (0: the defaults %v and %v)",
			opts.Lease, opts.Keep, DefaultLease, DefaultKeep)
	}
	if d := opts.BusyDelay; d != 0 && d < time.Millisecond {
		bad("Options.BusyDelay %v: want 1ms or more (at most the topology's ladder maximum; 0: a quarter of the lease)", d)
	}
	o.ShutdownTimeout = max(cmp.Or(opts.ShutdownTimeout, DefaultShutdownTimeout), 0)
	if d := opts.SettleTimeout; d != 0 && d < time.Millisecond {
		bad("Options.SettleTimeout %v: want 1ms or more (0: the default %v)", d, DefaultSettleTimeout)
	}
	o.SettleTimeout = cmp.Or(opts.SettleTimeout, DefaultSettleTimeout)
	if d := opts.HandlerTimeout; d < 0 {
		bad("Options.HandlerTimeout %v: want 0 (none) or more", d)
	}
	o.ConnectionName = cmp.Or(opts.ConnectionName, "rabbitdelay-consumer")
	if rmin, rmax, err := amqpconn.ReconnectRange("Options", opts.ReconnectMin, opts.ReconnectMax); err != nil {
		bad("%w", err)
	} else {
		o.ReconnectMin, o.ReconnectMax = rmin, rmax
	}
	if o.IDFunc == nil {
		o.IDFunc = defaultID
	}
	return o, errors.Join(errs...)
}

// defaultID is a delivery's MessageId, plus "@" and the copy tag for a copy Reschedule
// published: each Reschedule is a new message to handle, its redeliveries and retries are not.
func defaultID(d amqp.Delivery) string {
	if d.MessageId == "" {
		return ""
	}
	if tag, _ := d.Headers[amqpdelay.CopyHeader].(string); revlog.Rescheduled(tag) {
		return d.MessageId + "@" + tag
	}
	return d.MessageId
}

// fitWaits fits o's waits to m, the topology's longest delay: a longer wait could never be
// published, so its delivery would be given back again and again. A default backoff is
// shortened to fit; one the caller set is refused.
func (o *options) fitWaits(m time.Duration) error {
	var errs []error
	if fit := time.Duration(float64(m) / (1 + o.Backoff.Jitter)); o.Backoff.longest() > float64(m) && !o.backoffSet {
		o.Backoff.Max = max(fit, time.Millisecond)
		o.Backoff.Initial = min(o.Backoff.Initial, o.Backoff.Max)
	} else if o.Backoff.longest() > float64(m) {
		errs = append(errs, fmt.Errorf("%w: Options.Backoff.Max %v with Jitter %v waits up to %s, beyond %v, the longest delay "+
			"the topology's ladder carries (retries wait in it): want Backoff.Max from Backoff.Initial (%v) to %v",
			ErrInvalidConfig, o.Backoff.Max, o.Backoff.Jitter, time.Duration(o.Backoff.longest()), m, o.Backoff.Initial, fit))
	}
	if o.BusyDelay > m {
		errs = append(errs, fmt.Errorf("%w: Options.BusyDelay %v: want 1ms to %v, the longest delay the topology's ladder carries",
			ErrInvalidConfig, o.BusyDelay, m))
	}
	o.maxDelay = m
	if o.BusyDelay == 0 {
		o.BusyDelay = min(max(o.Lease/4, time.Second), m)
	}
	return errors.Join(errs...)
}
