package amqpdelay

import (
	"fmt"
	"time"

	"github.com/delaykit/rabbitdelay/plugin"
	"github.com/delaykit/rabbitdelay/ttlbuckets"
)

// Path is the way a message travels to its target exchange. [Receipt.Path] reports the one
// the Publisher chose.
type Path int

const (
	// PathDirect: published to the target exchange at once (delay <= 0).
	PathDirect Path = iota
	// PathBucket: one hop through the bucket queue whose x-message-ttl equals the delay.
	PathBucket
	// PathLadder: one hop per non-zero digit of the delay, at most one more in the top-split
	// order (ttlbuckets.Plan.Hops), through the ladder's queues.
	PathLadder
	// PathPlugin: held by the delayed-message plugin's exchange (x-delay header).
	PathPlugin
)

// String returns "direct", "bucket", "ladder" or "plugin" ("Path(N)" for other values).
func (p Path) String() string {
	switch p {
	case PathDirect:
		return "direct"
	case PathBucket:
		return "bucket"
	case PathLadder:
		return "ladder"
	case PathPlugin:
		return "plugin"
	}
	return fmt.Sprintf("Path(%d)", int(p))
}

// Strategy says how the Publisher chooses between the ladder and the plugin for a delay that
// no bucket matches. Delays <= 0 always go direct, whatever the strategy.
type Strategy int

const (
	// Auto (the default): the ladder when it carries the delay as exactly as the plugin would
	// (at most its maximum, and rounded up to its unit it lands on the delay rounded up to the
	// millisecond: always so with a 1 ms unit); else the plugin when the broker has it and the
	// delay fits x-delay (<= 2^32-1 ms); else the ladder, rounded up to its unit; else
	// ErrDelayTooLong. A bucket that matches the delay exactly is used first.
	Auto Strategy = iota
	// PreferPlugin: the plugin whenever it is available and can take the delay; else as Auto.
	// A bucket that matches the delay exactly is used first.
	PreferPlugin
	// PluginOnly: every positive delay through the plugin (no buckets, no ladder); an error
	// wrapping ErrPluginUnavailable when the broker has no plugin exchange, ErrDelayTooLong
	// above 2^32-1 ms.
	PluginOnly
	// LadderOnly: never the plugin: a bucket that matches exactly, else the ladder (rounded up
	// to its unit); ErrDelayTooLong above the ladder's maximum.
	LadderOnly
)

// String returns "auto", "prefer-plugin", "plugin-only" or "ladder-only".
func (s Strategy) String() string {
	switch s {
	case Auto:
		return "auto"
	case PreferPlugin:
		return "prefer-plugin"
	case PluginOnly:
		return "plugin-only"
	case LadderOnly:
		return "ladder-only"
	}
	return fmt.Sprintf("Strategy(%d)", int(s))
}

// choice is the outcome of choosePath: where a delay goes and what it becomes.
type choice struct {
	path      Path
	effective time.Duration // the delay actually applied (>= requested for positive delays)
	rounded   bool
	plan      ttlbuckets.Plan // PathLadder only
	bucketTTL int64           // PathBucket only, ms
	pluginMs  int64           // PathPlugin only
}

// chooser holds what the path choice depends on besides the delay. It is a value: the
// Publisher keeps one per connection (pluginOK changes with each probe).
type chooser struct {
	ladder   ttlbuckets.Ladder // with defaults, valid
	buckets  ttlbuckets.Buckets
	strategy Strategy
	pluginOK bool // the broker has the plugin exchange
	// brokerVersion is the RabbitMQ version the connection's server properties name ("" when
	// unknown): an error for a missing plugin names 4.3 where that is why.
	brokerVersion string
}

// choose is the path rule of the package doc and docs/how-it-works.md, as a pure function of the delay: no I/O, no clock.
// Errors wrap ErrDelayTooLong (stating the maximum) or ErrPluginUnavailable.
func (c chooser) choose(d time.Duration) (choice, error) {
	if d <= 0 {
		return choice{path: PathDirect}, nil
	}
	if c.strategy != PluginOnly {
		if b, ok := c.buckets.Lookup(d); ok {
			return choice{path: PathBucket, effective: b.Delay, bucketTTL: b.TTL}, nil
		}
	}
	switch c.strategy {
	case PluginOnly:
		if !c.pluginOK {
			return choice{}, errPluginMissing(c.brokerVersion)
		}
		return c.viaPlugin(d)
	case PreferPlugin:
		if c.pluginOK {
			if ch, err := c.viaPlugin(d); err == nil {
				return ch, nil
			}
		}
		return c.viaLadder(d)
	case LadderOnly:
		return c.viaLadder(d)
	default: // Auto
		// The plugin counts whole milliseconds too (x-delay), so where the ladder, rounded up to
		// its unit, lands on the same millisecond, it is as exact and it is replicated: a sub-ms
		// rest (90.5 s) takes the ladder, and only a ladder coarser than 1 ms leaves the plugin
		// a delay to carry more exactly.
		lc, lerr := c.viaLadder(d)
		if lerr == nil && lc.effective == ceilMs(d) {
			return lc, nil
		}
		if c.pluginOK {
			if ch, err := c.viaPlugin(d); err == nil {
				return ch, nil
			}
		}
		return lc, lerr
	}
}

// ceilMs rounds d (positive, at most the ladder's maximum) up to a whole millisecond.
func ceilMs(d time.Duration) time.Duration {
	t := d.Truncate(time.Millisecond)
	if t < d {
		t += time.Millisecond
	}
	return t
}

func (c chooser) viaPlugin(d time.Duration) (choice, error) {
	ms, rounded, err := plugin.Delay(d)
	if err != nil {
		return choice{}, tooLong(d, plugin.MaxDelay, "the delayed-message plugin, 2^32-1 ms", err)
	}
	return choice{path: PathPlugin, effective: time.Duration(ms) * time.Millisecond, rounded: rounded, pluginMs: ms}, nil
}

func (c chooser) viaLadder(d time.Duration) (choice, error) {
	p, err := c.ladder.Plan(d, ttlbuckets.RoundUp)
	if err != nil {
		max := c.ladder.Max
		how := "the ladder"
		if c.pluginOK && c.strategy != LadderOnly && plugin.MaxDelay > max {
			max, how = plugin.MaxDelay, "the delayed-message plugin"
		}
		return choice{}, tooLong(d, max, how, err)
	}
	return choice{path: PathLadder, effective: p.Effective, rounded: p.Rounded, plan: p}, nil
}

// delayTooLongError is ErrDelayTooLong with the cause from package ttlbuckets or plugin, both
// reachable with errors.Is, and a message that states the limit once.
type delayTooLongError struct {
	msg   string
	cause error
}

func (e *delayTooLongError) Error() string   { return e.msg }
func (e *delayTooLongError) Unwrap() []error { return []error{ErrDelayTooLong, e.cause} }

// tooLong returns the error for a delay d above max, the longest delay the path how carries.
func tooLong(d, max time.Duration, how string, cause error) error {
	return &delayTooLongError{cause: cause, msg: fmt.Sprintf("%v: %v is above %v (%d ms), the longest delay this topology carries "+
		"(through %s); publish it again later, when the rest is within reach, or declare a ladder with a larger maximum",
		ErrDelayTooLong, d, max, max.Milliseconds(), how)}
}

func errPluginMissing(brokerVersion string) error {
	if err := plugin.ErrUnsupported(brokerVersion); err != nil {
		return fmt.Errorf("%w: %v: use strategy Auto or LadderOnly, which take the ladder", ErrPluginUnavailable, err)
	}
	return fmt.Errorf("%w: the broker has no delayed-message plugin exchange: the plugin (%s) is missing, "+
		"or `rabbitdelay apply --plugin on` was not run; use strategy Auto or LadderOnly to do without it",
		ErrPluginUnavailable, plugin.PluginName)
}
