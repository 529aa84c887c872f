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
