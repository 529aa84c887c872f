package consumer

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/cenkalti/backoff/v4"
)

// Headers the Consumer writes on its retry and parked copies; the Publisher strips only the
// routing headers, so these travel with the copy.
const (
	// HeaderAttempt (int64) is the attempt a delivery is: absent or 1 for the first, 2 for the
	// first retry. (x-death counts delay-queue hops, and RabbitMQ 4.x ignores a published one.)
	HeaderAttempt = "rabbitdelay-attempt"
	// HeaderFirstFailure and HeaderLastFailure (int64, Unix ms) are when the first and the
	// latest attempt failed.
	HeaderFirstFailure = "rabbitdelay-first-failure"
	HeaderLastFailure  = "rabbitdelay-last-failure"
	// HeaderError (string) is the latest error's text, cut to MaxErrorLen bytes.
	HeaderError = "rabbitdelay-error"
	// HeaderPanic (string) is set when the latest failure was a panic: [PanicError.Summary].
	HeaderPanic = "rabbitdelay-panic"
	// HeaderQueue (string) is the queue the message was consumed from and belongs back to.
	HeaderQueue = "rabbitdelay-queue"
	// HeaderRoutingKey and HeaderTarget (string) keep the routing key and rabbitdelay-target
	// header ("" when none) the message first arrived with; the handler gets them back.
	HeaderRoutingKey = "rabbitdelay-first-routing-key"
	HeaderTarget     = "rabbitdelay-first-target"
	// HeaderDue (int64, Unix ms) keeps the first delivery's rabbitdelay-due, which a direct
	// publish (parking) drops.
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
	// ParkRetryRefused: the retry copy was refused as invalid (amqpdelay.ErrInvalidInput,
	// typically for too many headers), so it can never be retried; HeaderError says why.
	ParkRetryRefused = "retry-refused"
)

// MaxErrorLen is the longest error text, in bytes, the HeaderError header carries.
const MaxErrorLen = 1000

// Backoff is the retry policy ([Options.Backoff]): the wait before attempt a+1 is
// Initial * Multiplier^(a-1), at most Max, then randomized by ±Jitter (a fraction). Zero fields
// take the values of [DefaultBackoff]; [New] refuses a field out of its range, and
// [Consumer.Run] a Max that, with its jitter, the topology's ladder cannot delay.
type Backoff struct {
	// MaxAttempts is how many times the handler runs for one message, the first included;
	// then the message is parked. Default 5; 1 to MaxBackoffAttempts.
	MaxAttempts int
	// Initial is the wait before the first retry. Default 1 s; 1 ms to Max.
	Initial time.Duration
	// Max caps each wait before jitter. Default 5 min (lowered to fit a shorter ladder);
	// Initial to the ladder's maximum (49.7 days by default) divided by 1+Jitter.
	Max time.Duration
	// Multiplier is the growth per attempt. Default 2; at least 1, finite.
	Multiplier float64
	// Jitter: each wait is multiplied by a random factor in [1-Jitter, 1+Jitter]. Default 0.2;
	// 0 to 1.
	Jitter float64
	// NoJitter turns the randomization off (Jitter 0 means the default).
	NoJitter bool
}

// MaxBackoffAttempts is the largest Backoff.MaxAttempts.
const MaxBackoffAttempts = 10_000

// DefaultBackoff is the retry policy of a Consumer whose Options.Backoff is zero.
var DefaultBackoff = Backoff{MaxAttempts: 5, Initial: time.Second, Max: 5 * time.Minute, Multiplier: 2, Jitter: 0.2}

func (b Backoff) withDefaults() Backoff {
	d := DefaultBackoff
	b.MaxAttempts, b.Initial = cmp.Or(b.MaxAttempts, d.MaxAttempts), cmp.Or(b.Initial, d.Initial)
	b.Max, b.Multiplier = cmp.Or(b.Max, max(d.Max, b.Initial)), cmp.Or(b.Multiplier, d.Multiplier)
	if b.Jitter = cmp.Or(b.Jitter, d.Jitter); b.NoJitter {
		b.Jitter = 0
	}
	return b
}

// validate names every unusable field and its range, joined.
func (b Backoff) validate() error {
	var errs []error
	add := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("%w: "+format, append([]any{ErrInvalidConfig}, args...)...))
	}
	if b.MaxAttempts < 1 || b.MaxAttempts > MaxBackoffAttempts {
		add("Options.Backoff.MaxAttempts %d: want 1 to %d (0: the default %d)", b.MaxAttempts, MaxBackoffAttempts, DefaultBackoff.MaxAttempts)
	}
	if b.Initial < time.Millisecond {
		add("Options.Backoff.Initial %v: want 1ms or more (the ladder's resolution; 0: the default %v)", b.Initial, DefaultBackoff.Initial)
	}
	switch {
	case b.Max < b.Initial:
		add("Options.Backoff.Max %v below Backoff.Initial %v: want Initial <= Max", b.Max, b.Initial)
	case b.Max > maxBackoffMax:
		add("Options.Backoff.Max %v: want at most the topology's ladder maximum (49.7 days by default; never above %v)", b.Max, maxBackoffMax)
	}
	if !(b.Multiplier >= 1) || math.IsInf(b.Multiplier, 0) {
		add("Options.Backoff.Multiplier %v: want a finite number, 1 or more (0: the default %v)", b.Multiplier, DefaultBackoff.Multiplier)
	}
	if !(b.Jitter >= 0 && b.Jitter <= 1) {
		add("Options.Backoff.Jitter %v: want 0 to 1 (0: the default %v; NoJitter for none)", b.Jitter, DefaultBackoff.Jitter)
	}
	return errors.Join(errs...)
}

// maxBackoffMax bounds Backoff.Max whatever the topology, so that 2 x Max (the largest jitter)
// fits a time.Duration: about 73 years.
const maxBackoffMax = time.Duration(math.MaxInt64 / 4)

// longest is Max with its largest jitter, in float64 (which does not overflow).
func (b Backoff) longest() float64 { return float64(b.Max) * (1 + b.Jitter) }

// delay returns the wait after failed attempt attempt (1 for the first), jitter included: 1 ms
// to Max with its jitter, for any b (clamped first) and attempt. The growth and the jitter are
// cenkalti/backoff's, which caps each step at Max.
func (b Backoff) delay(attempt int) time.Duration {
	b = b.withDefaults().clamp()
	grow := &backoff.ExponentialBackOff{InitialInterval: b.Initial, Multiplier: b.Multiplier, MaxInterval: b.Max,
		Stop: backoff.Stop, Clock: backoff.SystemClock}
	grow.Reset()
	d := grow.NextBackOff() // the wait after attempt 1: Initial
	for range min(max(attempt, 1), MaxBackoffAttempts) - 1 {
		next := grow.NextBackOff()
		if next == d { // at Max, or a Multiplier too close to 1 to grow
			break
		}
		d = next
	}
	grow.InitialInterval, grow.RandomizationFactor = d, b.Jitter
	grow.Reset()
	return max(grow.NextBackOff(), time.Millisecond)
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
