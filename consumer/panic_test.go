package consumer

import (
	"bytes"
	"context"
	"errors"
	"runtime"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// panicsDeep panics two calls below the handler, with a nil map write (a runtime panic) or a
// value.
func panicsDeep(runtimePanic bool, v any) {
	panicsDeeper(runtimePanic, v)
}

func panicsDeeper(runtimePanic bool, v any) {
	if runtimePanic {
		var m map[string]int
		m["x"] = 1
	}
	panic(v)
}

// TestPanicError: Consumer.call (through Consumer.run) turns a handler's panic (a value, a runtime error, panic(nil),
// an error marked Permanent) into a *PanicError with the stack trace and a summary that names
// the panicking function, its file and line first and stops at the handler, within MaxPanicLen;
// failureHeaders puts the summary in HeaderPanic and drops an earlier attempt's. A handler
// that calls runtime.Goexit fails with an error that says so.
func TestPanicError(t *testing.T) {
	long := strings.Repeat("v", 5000)
	for _, tc := range []struct {
		name      string
		h         Handler
		value     string // in the summary
		first     string // the first frame's function
		permanent bool
	}{
		{"value", func(context.Context, amqp.Delivery) error { panicsDeep(false, "boom"); return nil }, "panic: boom", "consumer.panicsDeeper", false},
		{"runtime", func(context.Context, amqp.Delivery) error { panicsDeep(true, nil); return nil }, "assignment to entry in nil map", "consumer.panicsDeeper", false},
		{"nil", func(context.Context, amqp.Delivery) error { panic(nil) }, "panic called with nil argument", "consumer.TestPanicError.func", false},
		{"long value", func(context.Context, amqp.Delivery) error { panicsDeep(false, long); return nil }, "panic: vvvv", "consumer.panicsDeeper", false},
		{"permanent", func(context.Context, amqp.Delivery) error { panic(Permanent(errors.New("bad input"))) }, "permanent: bad input", "consumer.TestPanicError.func", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &Consumer{h: tc.h}
			err := c.call(context.Background(), amqp.Delivery{})
			var pe *PanicError
			if !errors.As(err, &pe) {
				t.Fatalf("call = %v (%T), want a *PanicError", err, err)
			}
			if !strings.HasPrefix(err.Error(), "consumer: handler panicked: ") || IsPermanent(err) != tc.permanent {
				t.Errorf("error %q, permanent %v; want the panic's text, permanent %v", err, IsPermanent(err), tc.permanent)
			}
			s := pe.Summary
			if len(s) > MaxPanicLen || !strings.HasPrefix(s, "panic: ") || !strings.Contains(s, tc.value) {
				t.Errorf("summary %q (%d bytes): want at most %d bytes starting with %q", s, len(s), MaxPanicLen, tc.value)
			}
			frames := strings.Split(s, "; at ")
			if len(frames) < 2 || !strings.HasPrefix(frames[1], tc.first) || !strings.Contains(frames[1], "consumer/panic_test.go:") {
				t.Errorf("summary %q: want the first frame %s (consumer/panic_test.go:<line>)", s, tc.first)
			}
			if strings.Contains(s, "runtime.") || strings.Contains(s, "(*Consumer).run") {
				t.Errorf("summary %q names the runtime's or the Consumer's frames", s)
			}
			if !bytes.Contains(pe.Stack, []byte("consumer/panic_test.go:")) || !bytes.Contains(pe.Stack, []byte("goroutine ")) {
				t.Errorf("stack trace without the handler's file:\n%s", pe.Stack)
			}
			h := (&Consumer{queue: "q"}).failureHeaders(amqp.Table{HeaderPanic: "an earlier attempt's"}, "k", Info{}, err, time.Now())
			if h[HeaderPanic] != s {
				t.Errorf("HeaderPanic %q, want the summary %q", h[HeaderPanic], s)
			}
		})
	}
	// A handler that ends its goroutine with runtime.Goexit fails the delivery: call returns.
	goexit := &Consumer{h: func(context.Context, amqp.Delivery) error { runtime.Goexit(); return nil }}
	if err := goexit.call(context.Background(), amqp.Delivery{}); err == nil || !strings.Contains(err.Error(), "runtime.Goexit") {
		t.Errorf("call of a handler that calls runtime.Goexit = %v, want an error naming runtime.Goexit", err)
	}
	h := (&Consumer{queue: "q"}).failureHeaders(amqp.Table{HeaderPanic: "an earlier attempt's"}, "k", Info{}, errors.New("plain"), time.Now())
	if _, ok := h[HeaderPanic]; ok {
		t.Errorf("a plain failure after a panic kept HeaderPanic %q", h[HeaderPanic])
	}
}
