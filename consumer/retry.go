package consumer

import (
	"fmt"
	"math"
	"math/rand/v2"
	"time"
)

// Headers the Consumer writes on the copies it sends (retries, parked messages). They do not
// begin with "rabbitdelay-": the amqpdelay Publisher strips every rabbitdelay-* header from a
// delayed copy (they decide or record a delay), and these must travel with the retry.
const (
	// HeaderAttempt (int64) is the attempt a delivery is: absent or 1 for the first, 2 for the
	// first retry, and so on. rabbitdelay counts its own retries here; x-death counts the delay
	// queues' hops, and RabbitMQ 4.x ignores an x-death a client publishes.
	HeaderAttempt = "rabbitdelay.attempt"
	// HeaderFirstFailure and HeaderLastFailure (int64, Unix ms) are when the first and the
	// latest attempt failed.
	HeaderFirstFailure = "rabbitdelay.first-failure"
	HeaderLastFailure  = "rabbitdelay.last-failure"
	// HeaderError (string) is the latest failure's error text, cut to MaxErrorLen bytes.
	HeaderError = "rabbitdelay.error"
	// HeaderPanic (string) is set when the latest failure was a panic ([PanicError]): the
	// panic's value and the first frames below it, function and file:line each, at most
	// MaxPanicLen bytes ("panic: boom; at orders.handle (orders/handle.go:42); at ...").
	HeaderPanic = "rabbitdelay.panic"
	// HeaderQueue (string) is the queue the message was consumed from and belongs back to.
	HeaderQueue = "rabbitdelay.queue"
	// HeaderRoutingKey and HeaderTarget (string) keep the routing key the message first
	// arrived with and its rabbitdelay-target header ("" when it had none): a retry travels
	// with the queue's name as routing key and with the retry exchange as target, and the
	// Consumer gives the handler the original values back.
	HeaderRoutingKey = "rabbitdelay.routing-key"
	HeaderTarget     = "rabbitdelay.target"
	// HeaderDue (int64, Unix ms) keeps the first delivery's rabbitdelay-due on a parked
	// message (a direct publish drops rabbitdelay-* headers).
	HeaderDue = "rabbitdelay.due"
	// HeaderParked (int64, Unix ms) is when the message was parked, and HeaderParkReason why:
	// ParkAttempts, ParkPermanent or ParkRetryRefused.
	HeaderParked     = "rabbitdelay.parked"
	HeaderParkReason = "rabbitdelay.park-reason"
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
// ±Jitter (a fraction). Zero fields take the defaults of [DefaultBackoff].
type Backoff struct {
	// MaxAttempts is how many times the handler runs for one message, the first included;
	// after the last failure the message is parked. Default 5; 1 parks on the first failure.
	MaxAttempts int
	// Initial is the wait before the first retry. Default 1 s; at least 1 ms.
	Initial time.Duration
	// Max caps each wait (before jitter). Default 5 min. A wait is a delayed publish: it must
	// fit the topology's ladder maximum (49.7 days by default).
	Max time.Duration
	// Multiplier is the growth per attempt. Default 2; at least 1.
	Multiplier float64
	// Jitter is the randomization: each wait is multiplied by a random factor in
	// [1-Jitter, 1+Jitter]. Default 0.2; 0 to 1. Set NoJitter for none.
	Jitter float64
	// NoJitter turns the randomization off (Jitter 0 means the default).
	NoJitter bool
}

// DefaultBackoff is the retry policy of a Consumer without [WithBackoff].
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

// validate returns an error naming every unusable field.
func (b Backoff) validate() error {
	switch {
	case b.MaxAttempts < 1:
		return fmt.Errorf("%w: Backoff.MaxAttempts %d: want 1 or more", ErrInvalidConfig, b.MaxAttempts)
	case b.Initial < time.Millisecond:
		return fmt.Errorf("%w: Backoff.Initial %v: want 1ms or more (the ladder's resolution)", ErrInvalidConfig, b.Initial)
	case b.Max < b.Initial:
		return fmt.Errorf("%w: Backoff.Max %v below Initial %v", ErrInvalidConfig, b.Max, b.Initial)
	case b.Multiplier < 1 || math.IsNaN(b.Multiplier) || math.IsInf(b.Multiplier, 0):
		return fmt.Errorf("%w: Backoff.Multiplier %v: want 1 or more", ErrInvalidConfig, b.Multiplier)
	case b.Jitter < 0 || b.Jitter > 1 || math.IsNaN(b.Jitter):
		return fmt.Errorf("%w: Backoff.Jitter %v: want 0 to 1", ErrInvalidConfig, b.Jitter)
	}
	return nil
}

// Delay returns the wait before the retry that follows failed attempt attempt (1 for the
// first), jitter included: at least 1 ms. b's zero fields take their defaults.
func (b Backoff) Delay(attempt int) time.Duration {
	b = b.withDefaults()
	d := float64(b.Initial) * math.Pow(b.Multiplier, float64(max(attempt, 1)-1))
	if d > float64(b.Max) || math.IsInf(d, 0) {
		d = float64(b.Max)
	}
	if b.Jitter > 0 {
		d *= 1 - b.Jitter + 2*b.Jitter*rand.Float64()
	}
	return max(time.Duration(d), time.Millisecond)
}
