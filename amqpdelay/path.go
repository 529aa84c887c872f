package amqpdelay

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/delaykit/rabbitdelay/internal/amqpconn"
	"github.com/delaykit/rabbitdelay/internal/pluginprobe"
	"github.com/delaykit/rabbitdelay/internal/route"
	"github.com/delaykit/rabbitdelay/plugin"
	"github.com/delaykit/rabbitdelay/ttlbuckets"
)

// Path is the way a message travels to its target exchange ([Receipt.Path]).
type Path int

const (
	// PathDirect: published to the target exchange at once (delay <= 0).
	PathDirect Path = iota
	// PathBucket: one hop through the bucket queue whose x-message-ttl equals the delay.
	PathBucket
	// PathLadder: one hop per non-zero digit of the delay (ttlbuckets.Plan.Hops).
	PathLadder
	// PathPlugin: held by the delayed-message plugin's exchange (x-delay header).
	PathPlugin
)

// String returns "direct", "bucket", "ladder" or "plugin" ("Path(N)" for other values).
func (p Path) String() string { return enumName(pathNames, int(p), "Path") }

var pathNames = []string{"direct", "bucket", "ladder", "plugin"}

// enumName returns names[v], or typ(v) when v is out of range.
func enumName(names []string, v int, typ string) string {
	if v >= 0 && v < len(names) {
		return names[v]
	}
	return fmt.Sprintf("%s(%d)", typ, v)
}

// Strategy says how the Publisher chooses between the ladder and the plugin for a delay no
// bucket matches (package documentation). Delays <= 0 always go direct.
type Strategy int

const (
	// Auto (the default): an exact bucket; the ladder when as exact as the plugin; the plugin;
	// the ladder, rounded up; else ErrDelayTooLong.
	Auto Strategy = iota
	// PreferPlugin: an exact bucket; the plugin whenever it can take the delay; else as Auto.
	PreferPlugin
	// PluginOnly: the plugin only (ErrPluginUnavailable; ErrDelayTooLong above 2^32-1 ms).
	PluginOnly
	// LadderOnly: an exact bucket, else the ladder, rounded up (ErrDelayTooLong above its max).
	LadderOnly
)

// String returns "auto", "prefer-plugin", "plugin-only" or "ladder-only".
func (s Strategy) String() string {
	return enumName([]string{"auto", "prefer-plugin", "plugin-only", "ladder-only"}, int(s), "Strategy")
}

type choice struct {
	path      Path
	effective time.Duration // the delay actually applied (>= requested for positive delays)
	rounded   bool
	plan      ttlbuckets.Plan // PathLadder only
	bucketTTL int64           // PathBucket only, ms
	pluginMs  int64           // PathPlugin only
}

type chooser struct {
	ladder        ttlbuckets.Ladder // with defaults, valid
	buckets       ttlbuckets.Buckets
	strategy      Strategy
	pluginOK      bool
	brokerVersion string // names 4.3 in the error for a missing plugin
}

// choose is the path rule of docs/how-it-works.md, without I/O or clock. Errors wrap
// ErrDelayTooLong (stating the maximum) or ErrPluginUnavailable.
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
		// The plugin counts whole ms too: the ladder, replicated, wins when it lands on d rounded
		// up to the ms.
		lc, lerr := c.viaLadder(d)
		if lerr == nil && lc.effective == (d+time.Millisecond-1).Truncate(time.Millisecond) {
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

// delayTooLongError is ErrDelayTooLong and the cause from ttlbuckets or plugin.
type delayTooLongError struct {
	msg   string
	cause error
}

func (e *delayTooLongError) Error() string   { return e.msg }
func (e *delayTooLongError) Unwrap() []error { return []error{ErrDelayTooLong, e.cause} }

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

// copyHeaders returns a copy of h, with room for extra more, without the headers that decide or
// record a delay (route.IsDelayHeader); direct keeps those beginning with "x-" (a direct
// publish is the caller's message as given, less a stale due time or digit).
func copyHeaders(h amqp.Table, extra int, direct bool) amqp.Table {
	out := make(amqp.Table, len(h)+extra)
	for k, v := range h {
		if !route.IsDelayHeader(k) || direct && strings.HasPrefix(k, "x-") {
			out[k] = v
		}
	}
	return out
}

// buildHeaders returns the headers of the copy sent for choice c to target, due at due.
func buildHeaders(h amqp.Table, c *choice, l ttlbuckets.Ladder, target string, due time.Time) amqp.Table {
	var out amqp.Table
	switch c.path {
	case PathDirect:
		out = copyHeaders(h, 1, true)
	case PathLadder:
		out = copyHeaders(h, len(c.plan.Digits)+3, false)
		route.EncodeRoute(l, c.plan, out)
		out[route.TargetHeader] = target
	case PathBucket:
		out = copyHeaders(h, 3, false)
		out[route.BucketHeader] = c.bucketTTL
		out[route.TargetHeader] = target
	case PathPlugin:
		out = copyHeaders(h, 3, false)
		plugin.SetDelay(out, c.pluginMs)
		out[route.TargetHeader] = target
	}
	out[route.DueHeader] = due.UnixMilli()
	return out
}

// Due returns the time a delivery was due, from the rabbitdelay-due header (Unix ms, truncated)
// the Publisher sets on every path; ok is false without it.
func Due(delivery amqp.Delivery) (due time.Time, ok bool) {
	ms, isInt, fits := route.HeaderInt(delivery.Headers[route.DueHeader])
	if !isInt || !fits {
		return time.Time{}, false
	}
	return time.UnixMilli(ms), true
}

// PluginAvailable reports whether the plugin exchange exists, as probed at start and after each
// reconnection (never under [LadderOnly] or with the plugin off). A publish that finds it gone
// turns it false and takes another path; publishes look for it again every 5 s.
func (p *Publisher) PluginAvailable() bool { return p.pluginOK.Load() }

// withoutPlugin chooses again once the plugin exchange dest is gone; PluginOnly: an error.
func (p *Publisher) withoutPlugin(delay time.Duration, dest string) (choice, error) {
	if p.cfg.Strategy == PluginOnly {
		return choice{}, fmt.Errorf("%w: the plugin exchange %q no longer exists (RabbitMQ answered 404 NOT_FOUND; this message "+
			"was not stored): run `rabbitdelay apply` with the plugin on, then publish again", ErrPluginUnavailable, dest)
	}
	return chooser{ladder: p.ladder, buckets: p.buckets, strategy: p.cfg.Strategy}.choose(delay)
}

const pluginReprobe = 5 * time.Second // how often publishes look for a plugin exchange found gone

// pluginGone reports whether err is the plugin exchange's 404, and marks the plugin unavailable.
func (p *Publisher) pluginGone(err error) bool {
	if !isExchangeNotFound(err, p.names.PluginExchange()) {
		return false
	}
	if p.pluginOK.CompareAndSwap(true, false) {
		p.nextProbe.Store(time.Now().Add(pluginReprobe).UnixNano())
		p.pluginLost.Store(true)
		p.cfg.Logger.Warn().Str("exchange", p.names.PluginExchange()).
			Msg("amqpdelay: the plugin exchange is gone (404); publishing without the plugin until it is declared again (`rabbitdelay apply`)")
	}
	return true
}

// isExchangeNotFound reports whether err is RabbitMQ's 404 "no exchange 'NAME' in vhost 'V'"
// for exchange; a reply cut to 255 bytes with "..." counts when its rest begins the name.
func isExchangeNotFound(err error, exchange string) bool {
	var ae *amqp.Error
	if !errors.As(err, &ae) || ae.Code != amqp.NotFound {
		return false
	}
	const lead = "no exchange '"
	i := strings.Index(ae.Reason, lead)
	if i < 0 {
		return false
	}
	rest := ae.Reason[i+len(lead):]
	if strings.HasPrefix(rest, exchange+"'") {
		return true
	}
	cut, ok := strings.CutSuffix(rest, "...")
	return ok && len(ae.Reason) >= maxShortstr-8 && cut != "" && strings.HasPrefix(exchange+"' in vhost '", cut)
}

// probePlugin reports whether the plugin exchange exists, on a connection of its own.
func (p *Publisher) probePlugin(ctx context.Context) (bool, error) {
	dial := func(ctx context.Context) (*amqp.Connection, error) {
		return amqpconn.Dial(ctx, p.cfg.conn(), p.cfg.ConnectionName+"-probe")
	}
	return pluginprobe.ExchangeExists(ctx, dial, p.names.PluginExchange())
}

// reprobePlugin starts a background probe at most once per pluginReprobe; no publish waits.
func (p *Publisher) reprobePlugin() {
	next := p.nextProbe.Load()
	now := time.Now()
	if now.UnixNano() < next || !p.nextProbe.CompareAndSwap(next, now.Add(pluginReprobe).UnixNano()) {
		return
	}
	// Under mu, so that Close never waits on a WaitGroup being added to.
	p.mu.Lock()
	if p.isClosed() {
		p.mu.Unlock()
		return
	}
	p.wg.Add(1)
	p.mu.Unlock()
	go func() {
		defer p.wg.Done()
		ctx, cancel := context.WithTimeout(p.closeCtx, pluginReprobe)
		defer cancel()
		if ok, err := p.probePlugin(ctx); err == nil && ok && p.pluginLost.CompareAndSwap(true, false) {
			p.pluginOK.Store(true)
			p.cfg.Logger.Info().Str("exchange", p.names.PluginExchange()).Msg("amqpdelay: the plugin exchange is back")
		}
	}()
}
