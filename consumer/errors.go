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

// panicError is a handler's panic, turned into an error (retried like any other).
type panicError struct{ v any }

func (p panicError) Error() string { return fmt.Sprintf("consumer: handler panicked: %v", p.v) }
