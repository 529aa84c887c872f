package consumer

import (
	"errors"
	"fmt"
)

// Sentinel errors; every error the package returns wraps one of them (or a context's error, or
// an amqpdelay error such as amqpdelay.ErrTopologyMissing from starting the retry Publisher).
var (
	// ErrInvalidConfig: an option, the queue name or the handler is unusable; the error names
	// which and what to pass instead.
	ErrInvalidConfig = errors.New("consumer: invalid configuration")
	// ErrQueueNotFound: the queue to consume does not exist in the vhost (RabbitMQ's passive
	// declare answered 404 NOT_FOUND).
	ErrQueueNotFound = errors.New("consumer: queue not found")
	// ErrStore: the store of handled ids failed (Redis unreachable, say).
	ErrStore = errors.New("consumer: store of handled ids failed")
	// ErrRunning: Run was called on a Consumer that is running or has run.
	ErrRunning = errors.New("consumer: Run called twice")
	// ErrEarly: a delivery arrived more than [EarlyHold] before its due time, so a copy of it
	// went back through the delay topology for the time left (the Err of its Deferred event).
	ErrEarly = errors.New("consumer: delivery arrived before its due time")
)

// permanent marks an error as permanent: see [Permanent].
type permanent struct{ err error }

func (p permanent) Error() string { return "permanent: " + p.err.Error() }
func (p permanent) Unwrap() error { return p.err }

// Permanent wraps err so that the Consumer parks the message at once instead of retrying it: a
// message that can never succeed (bad input, say). Permanent(nil) is nil. errors.Is and
// errors.As reach err.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return permanent{err: err}
}

// IsPermanent reports whether err, or an error it wraps, was marked with [Permanent].
func IsPermanent(err error) bool {
	var p permanent
	return errors.As(err, &p)
}

// PanicError is a handler's panic, turned into an error: the delivery is retried (or parked)
// like any other failure. The outcome's [Event].Err is a *PanicError (errors.As), with the
// whole stack trace; the Consumer's logger ([Options.Logger]) records it at error level with the
// stack; and the retry or parked copy carries [HeaderPanic], the bounded Summary.
type PanicError struct {
	// Value is the value the handler passed to panic (a *runtime.PanicNilError for panic(nil)).
	Value any
	// Stack is the panicking goroutine's stack trace (runtime/debug.Stack), taken where the
	// Consumer recovered it: the frames below the deferred call are the handler's.
	Stack []byte
	// Summary is Value and the first frames below the panic, function and file:line each, at
	// most MaxPanicLen bytes: what HeaderPanic carries.
	Summary string
}

// Error returns "consumer: handler panicked: " and the panic's value.
func (p *PanicError) Error() string { return fmt.Sprintf("consumer: handler panicked: %v", p.Value) }

// Unwrap returns Value when it is an error (a handler that panics with an error wrapped by
// [Permanent] has its message parked at once), else nil.
func (p *PanicError) Unwrap() error {
	err, _ := p.Value.(error)
	return err
}
