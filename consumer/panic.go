package consumer

import (
	"fmt"
	"path"
	"reflect"
	"runtime"
	"runtime/debug"
	"strings"
)

// MaxPanicLen is the longest text, in bytes, the [HeaderPanic] header carries.
const MaxPanicLen = 400

// panicFrames is how many frames below a panic its summary names.
const panicFrames = 4

// maxPanicValueLen bounds the panic value's text in a summary, so that the frames fit.
const maxPanicValueLen = 120

// callFunc is the function name of Consumer.run, which calls the handler: a summary's frames
// stop there.
var callFunc = reflect.TypeFor[Consumer]().PkgPath() + ".(*Consumer).run"

// newPanicError turns the value v recovered in Consumer.run's deferred function into a
// *PanicError. It must be called from that deferred function directly: it skips its own frame,
// that function's and the runtime's panic frames.
func newPanicError(v any) *PanicError {
	pcs := make([]uintptr, 64)
	n := runtime.Callers(2, pcs) // from the deferred function
	return &PanicError{Value: v, Stack: debug.Stack(), Summary: panicSummary(v, pcs[:n])}
}

// panicSummary is v's text and the first panicFrames frames of pcs below the runtime's panic
// frames (the panicking function first), up to Consumer.run, as "panic: <v>; at <func>
// (<dir>/<file>:<line>); at ...", cut to MaxPanicLen bytes.
func panicSummary(v any, pcs []uintptr) string {
	var b strings.Builder
	b.WriteString("panic: ")
	b.WriteString(truncate(fmt.Sprint(v), maxPanicValueLen))
	frames := runtime.CallersFrames(pcs)
	inRuntime, below := false, 0
	for below < panicFrames {
		fr, more := frames.Next()
		if fr.Function == callFunc {
			break
		}
		isRuntime := strings.HasPrefix(fr.Function, "runtime.")
		switch {
		case !inRuntime && !isRuntime: // the deferred function, above the runtime's frames
		case isRuntime:
			inRuntime = true
		default:
			fmt.Fprintf(&b, "; at %s (%s:%d)", shortFunc(fr.Function), shortFile(fr.File), fr.Line)
			below++
		}
		if !more {
			break
		}
	}
	return truncate(b.String(), MaxPanicLen)
}

// shortFunc drops the import path before a function's package name:
// "github.com/a/b/pkg.(*T).m" becomes "pkg.(*T).m".
func shortFunc(f string) string {
	if i := strings.LastIndexByte(f, '/'); i >= 0 {
		return f[i+1:]
	}
	return f
}

// shortFile keeps the last directory and the file name: "/src/app/handlers/order.go" becomes
// "handlers/order.go".
func shortFile(f string) string {
	dir, file := path.Split(f)
	return path.Join(path.Base(dir), file)
}
