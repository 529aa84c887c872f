package consumer

import (
	"errors"
	"fmt"
	"path"
	"reflect"
	"runtime"
	"runtime/debug"
	"strings"
)

// Sentinel errors; every error the package returns wraps one of them, a context's error, or an
// amqpdelay error.
var (
	// ErrInvalidConfig: an option, the queue name or the handler is unusable (the error says
	// which).
	ErrInvalidConfig = errors.New("consumer: invalid configuration")
	// ErrQueueNotFound: the queue to consume does not exist in the vhost (RabbitMQ's passive
	// declare answered 404 NOT_FOUND).
	ErrQueueNotFound = errors.New("consumer: queue not found")
	// ErrStore: the store of handled ids failed (Redis unreachable, say).
	ErrStore = errors.New("consumer: store of handled ids failed")
	// ErrRunning: Run was called on a Consumer that is running or has run.
	ErrRunning = errors.New("consumer: Run called twice")
	// ErrEarly: a delivery arrived more than [EarlyHold] before its due time and was deferred.
	ErrEarly = errors.New("consumer: delivery arrived before its due time")
)

type permanent struct{ err error }

func (p permanent) Error() string { return "permanent: " + p.err.Error() }
func (p permanent) Unwrap() error { return p.err }

// Permanent wraps err so that the Consumer parks the message at once instead of retrying it.
// Permanent(nil) is nil; errors.Is and errors.As reach err.
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

// PanicError is a handler's panic as an error, a failure like any other. It is the outcome's
// [Event].Err, logged at error level with the stack, and its Summary goes in [HeaderPanic].
type PanicError struct {
	// Value is the value the handler passed to panic (a *runtime.PanicNilError for panic(nil)).
	Value any
	// Stack is the panicking goroutine's stack trace (runtime/debug.Stack).
	Stack []byte
	// Summary is Value and the first frames below the panic, function and file:line each, at
	// most MaxPanicLen bytes.
	Summary string
}

// Error returns "consumer: handler panicked: " and the panic's value.
func (p *PanicError) Error() string { return fmt.Sprintf("consumer: handler panicked: %v", p.Value) }

// Unwrap returns Value when it is an error (so a panic with a [Permanent] error parks), else nil.
func (p *PanicError) Unwrap() error {
	err, _ := p.Value.(error)
	return err
}

// MaxPanicLen is the longest text, in bytes, the [HeaderPanic] header carries.
const MaxPanicLen = 400

// A summary names panicFrames frames below the panic and maxPanicValueLen bytes of its value.
const (
	panicFrames      = 4
	maxPanicValueLen = 120
)

// callFunc is the function that calls the handler: a summary's frames stop there.
var callFunc = reflect.TypeFor[Consumer]().PkgPath() + ".(*Consumer).run"

// newPanicError turns v, recovered in Consumer.run's deferred function, into a *PanicError. It
// must be called from that function directly.
func newPanicError(v any) *PanicError {
	pcs := make([]uintptr, 64)
	n := runtime.Callers(2, pcs) // from the deferred function
	return &PanicError{Value: v, Stack: debug.Stack(), Summary: panicSummary(v, pcs[:n])}
}

// panicSummary is "panic: <v>; at <func> (<dir>/<file>:<line>); at ..." for the frames of pcs
// below the runtime's panic frames, cut to MaxPanicLen bytes.
func panicSummary(v any, pcs []uintptr) string {
	b := strings.Builder{}
	b.WriteString("panic: " + truncate(fmt.Sprint(v), maxPanicValueLen))
	frames := runtime.CallersFrames(pcs)
	for inRuntime, below, more := false, 0, true; more && below < panicFrames; {
		var fr runtime.Frame
		if fr, more = frames.Next(); fr.Function == callFunc {
			break
		}
		if strings.HasPrefix(fr.Function, "runtime.") {
			inRuntime = true
		} else if inRuntime { // below the runtime's frames; above them is the deferred function
			dir, file := path.Split(fr.File)
			fn := fr.Function[strings.LastIndexByte(fr.Function, '/')+1:] // without the import path
			fmt.Fprintf(&b, "; at %s (%s:%d)", fn, path.Join(path.Base(dir), file), fr.Line)
			below++
		}
	}
	return truncate(b.String(), MaxPanicLen)
}
