// Command rabbitdelay declares, checks, inspects, exports and tears down rabbitdelay's delay
// topology. Its code and documentation are in package [github.com/delaykit/rabbitdelay/cmd/declare];
// this main only names the binary: `go install` names a binary after its directory, and
// `declare` is a bash builtin, which a shell runs before any program of that name.
package main

import "github.com/delaykit/rabbitdelay/cmd/declare"

func main() { declare.Main() }
