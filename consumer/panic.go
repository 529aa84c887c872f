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

// shortFunc drops the import path: "github.com/a/b/pkg.(*T).m" becomes "pkg.(*T).m".
func shortFunc(f string) string {
	if i := strings.LastIndexByte(f, '/'); i >= 0 {
		return f[i+1:]
	}
	return f
}

// shortFile keeps the last directory and the file name.
func shortFile(f string) string {
	dir, file := path.Split(f)
	return path.Join(path.Base(dir), file)
}
