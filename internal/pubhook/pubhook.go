// Package pubhook gives rabbitdelay's own packages settings of an amqpdelay Publisher that users
// have no reason to set. Package amqpdelay fills its variables when it is initialized, so a
// package that imports amqpdelay finds them set.
package pubhook

// ExtraTargets returns a func(*amqpdelay.Config) (as any: this package cannot import amqpdelay)
// that adds the named exchanges to the targets the spec record lists, through an unexported
// field of the Config. The caller declares each of them and binds it to the dispatch exchange
// itself, as package schedule does for its links exchange.
var ExtraTargets func(names ...string) any
