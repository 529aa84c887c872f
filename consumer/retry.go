package consumer

import (
	"fmt"
	"math"
	"time"

	"github.com/cenkalti/backoff/v4"
)

// Headers the Consumer writes on the copies it sends (retries, parked messages). The amqpdelay
// Publisher strips only the routing headers (internal/route.IsDelayHeader) from a delayed copy, so
// these travel with the retry.
const (
	// HeaderAttempt (int64) is the attempt a delivery is: absent or 1 for the first, 2 for the
	// first retry, and so on. rabbitdelay counts its own retries here; x-death counts the delay
	// queues' hops, and RabbitMQ 4.x ignores an x-death a client publishes.
	HeaderAttempt = "rabbitdelay-attempt"
	// HeaderFirstFailure and HeaderLastFailure (int64, Unix ms) are when the first and the
	// latest attempt failed.
	HeaderFirstFailure = "rabbitdelay-first-failure"
	HeaderLastFailure  = "rabbitdelay-last-failure"
	// HeaderError (string) is the latest failure's error text, cut to MaxErrorLen bytes.
	HeaderError = "rabbitdelay-error"
	// HeaderPanic (string) is set when the latest failure was a panic ([PanicError]): the
	// panic's value and the first frames below it, function and file:line each, at most
	// MaxPanicLen bytes ("panic: boom; at orders.handle (orders/handle.go:42); at ...").
	HeaderPanic = "rabbitdelay-panic"
	// HeaderQueue (string) is the queue the message was consumed from and belongs back to.
	HeaderQueue = "rabbitdelay-queue"
	// HeaderRoutingKey and HeaderTarget (string) keep the routing key the message first
	// arrived with and its rabbitdelay-target header ("" when it had none): a retry travels
	// with the queue's name as routing key and with the retry exchange as target, and the
	// Consumer gives the handler the original values back.
	HeaderRoutingKey = "rabbitdelay-first-routing-key"
	HeaderTarget     = "rabbitdelay-first-target"
	// HeaderDue (int64, Unix ms) keeps the first delivery's rabbitdelay-due on a parked
	// message (a direct publish drops the routing headers, rabbitdelay-due among them).
	HeaderDue = "rabbitdelay-first-due"
	// HeaderParked (int64, Unix ms) is when the message was parked, and HeaderParkReason why:
	// ParkAttempts, ParkPermanent or ParkRetryRefused.
	HeaderParked     = "rabbitdelay-parked"
	HeaderParkReason = "rabbitdelay-park-reason"
)

// Park reasons (the HeaderParkReason header).
const (
	// ParkAttempts: the last allowed attempt failed.
	ParkAttempts = "attempts"
	// ParkPermanent: the handler returned an error marked with [Permanent].
	ParkPermanent = "permanent"
	// ParkRetryRefused: the handler failed and the retry copy was refused as invalid
	// (amqpdelay.ErrInvalidInput: typically a delivery with so many headers that the copy,
	// with the Consumer's own, exceeds what the Publisher sends), so it can never be retried;
	// the refusal is in HeaderError.
	ParkRetryRefused = "retry-refused"
)

// MaxErrorLen is the longest error text, in bytes, the HeaderError header carries.
const MaxErrorLen = 1000

// Backoff is the retry policy: how many attempts a message gets and how long each retry waits.
// The wait before attempt a+1 is Initial * Multiplier^(a-1), at most Max, then randomized by
// ±Jitter (a fraction). It is [Options.Backoff]: zero fields take the defaults of
// [DefaultBackoff]; [New] refuses a value outside a field's range, and [Consumer.Run] a Max that,
// with its jitter, the topology's ladder cannot delay.
type Backoff struct {
	// MaxAttempts is how many times the handler runs for one message, the first included;
	// after the last failure the message is parked. Default 5; 1 to MaxBackoffAttempts; 1
	// parks on the first failure.
	MaxAttempts int
	// Initial is the wait before the first retry. Default 1 s; 1 ms to Max.
	Initial time.Duration
	// Max caps each wait (before jitter). Default 5 min (lowered to fit a shorter ladder);
	// Initial to the topology's ladder maximum (49.7 days by default) divided by 1+Jitter: a
	// wait is a delayed publish through the ladder.
	Max time.Duration
	// Multiplier is the growth per attempt. Default 2; at least 1, finite. Large values reach
	// Max sooner; no value overflows.
	Multiplier float64
	// Jitter is the randomization: each wait is multiplied by a random factor in
	// [1-Jitter, 1+Jitter]. Default 0.2; 0 to 1. Set NoJitter for none.
	Jitter float64
	// NoJitter turns the randomization off (Jitter 0 means the default).
	NoJitter bool
}

// MaxBackoffAttempts is the largest Backoff.MaxAttempts.
const MaxBackoffAttempts = 10_000

// DefaultBackoff is the retry policy of a Consumer whose Options.Backoff is zero.
var DefaultBackoff = Backoff{MaxAttempts: 5, Initial: time.Second, Max: 5 * time.Minute, Multiplier: 2, Jitter: 0.2}

// withDefaults fills zero fields.
func (b Backoff) withDefaults() Backoff {
	d := DefaultBackoff
	if b.MaxAttempts == 0 {
		b.MaxAttempts = d.MaxAttempts
	}
	if b.Initial == 0 {
		b.Initial = d.Initial
	}
	if b.Max == 0 {
		b.Max = max(d.Max, b.Initial)
	}
	if b.Multiplier == 0 {
		b.Multiplier = d.Multiplier
	}
	if b.Jitter == 0 && !b.NoJitter {
		b.Jitter = d.Jitter
	}
	if b.NoJitter {
		b.Jitter = 0
	}
	return b
}

// validate returns an error naming the first unusable field and its range.
func (b Backoff) validate() error {
	switch {
	case b.MaxAttempts < 1 || b.MaxAttempts > MaxBackoffAttempts:
		return fmt.Errorf("%w: Options.Backoff.MaxAttempts %d: want 1 to %d (0: the default %d)", ErrInvalidConfig,
			b.MaxAttempts, MaxBackoffAttempts, DefaultBackoff.MaxAttempts)
	case b.Initial < time.Millisecond:
		return fmt.Errorf("%w: Options.Backoff.Initial %v: want 1ms or more (the ladder's resolution; 0: the default %v)",
			ErrInvalidConfig, b.Initial, DefaultBackoff.Initial)
	case b.Max < b.Initial:
		return fmt.Errorf("%w: Options.Backoff.Max %v below Backoff.Initial %v: want Initial <= Max", ErrInvalidConfig, b.Max, b.Initial)
	case b.Max > maxBackoffMax:
		return fmt.Errorf("%w: Options.Backoff.Max %v: want at most the topology's ladder maximum (49.7 days by default; "+
			"never above %v)", ErrInvalidConfig, b.Max, maxBackoffMax)
	case !(b.Multiplier >= 1) || math.IsInf(b.Multiplier, 0):
		return fmt.Errorf("%w: Options.Backoff.Multiplier %v: want a finite number, 1 or more (0: the default %v)",
			ErrInvalidConfig, b.Multiplier, DefaultBackoff.Multiplier)
	case !(b.Jitter >= 0 && b.Jitter <= 1):
		return fmt.Errorf("%w: Options.Backoff.Jitter %v: want 0 to 1 (0: the default %v; NoJitter for none)",
			ErrInvalidConfig, b.Jitter, DefaultBackoff.Jitter)
	}
	return nil
}

// maxBackoffMax bounds Backoff.Max whatever the topology (New checks it against the ladder): a
// wait of Max with the largest jitter (2 x Max, computed in float64) stays well inside a
// time.Duration. It is about 73 years; RabbitMQ refuses queue TTLs above 10 years.
const maxBackoffMax = time.Duration(math.MaxInt64 / 4)

// longest is the longest wait b can give: Max with its largest jitter, in float64 (which does
// not overflow where a Duration would).
func (b Backoff) longest() float64 { return float64(b.Max) * (1 + b.Jitter) }

// delay returns the wait before the retry that follows failed attempt attempt (1 for the
// first), jitter included: at least 1 ms, at most Max with its jitter. b's zero fields take
// their defaults, and a value New would refuse is brought into its range first, so no Backoff
// and no attempt overflows (the growth and the jitter are cenkalti/backoff's
// ExponentialBackOff, which caps each step at Max).
func (b Backoff) delay(attempt int) time.Duration {
	b = b.withDefaults().clamp()
	grow := &backoff.ExponentialBackOff{InitialInterval: b.Initial, Multiplier: b.Multiplier, MaxInterval: b.Max,
		Stop: backoff.Stop, Clock: backoff.SystemClock}
	grow.Reset()
	d := grow.NextBackOff() // the wait after attempt 1: Initial
	for range min(max(attempt, 1), MaxBackoffAttempts) - 1 {
		next := grow.NextBackOff()
		if next == d { // at Max, or a Multiplier too close to 1 to grow a whole nanosecond: it stays
			break
		}
		d = next
	}
	jitter := &backoff.ExponentialBackOff{InitialInterval: d, RandomizationFactor: b.Jitter, Multiplier: 1, MaxInterval: d,
		Stop: backoff.Stop, Clock: backoff.SystemClock}
	jitter.Reset()
	return max(jitter.NextBackOff(), time.Millisecond)
}

// clamp brings each field of b into the range validate accepts.
func (b Backoff) clamp() Backoff {
	b.Max = min(max(b.Max, time.Millisecond), maxBackoffMax)
	b.Initial = min(max(b.Initial, time.Millisecond), b.Max)
	if !(b.Multiplier >= 1) || math.IsInf(b.Multiplier, 0) {
		b.Multiplier = 1
	}
	if !(b.Jitter >= 0) {
		b.Jitter = 0
	}
	b.Jitter = min(b.Jitter, 1)
	return b
}
