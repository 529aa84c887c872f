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
)

// PluginAvailable reports whether the plugin exchange exists, as probed at start and after each
// reconnection (never under [LadderOnly] or with the plugin off). A publish that finds it gone
// turns it false and takes another path; publishes look for it again every 5 s.
func (p *Publisher) PluginAvailable() bool { return p.pluginOK.Load() }

// withoutPlugin chooses a path again after the plugin exchange dest was found gone (the message
// was not stored); ErrPluginUnavailable under PluginOnly.
func (p *Publisher) withoutPlugin(delay time.Duration, dest string) (choice, error) {
	if p.opts.strategy == PluginOnly {
		return choice{}, fmt.Errorf("%w: the plugin exchange %q no longer exists (RabbitMQ answered 404 NOT_FOUND; this message "+
			"was not stored): run `rabbitdelay apply` with the plugin on, then publish again", ErrPluginUnavailable, dest)
	}
	return chooser{ladder: p.ladder, buckets: p.buckets, strategy: p.opts.strategy}.choose(delay)
}

// pluginReprobe is how often publishes look for a plugin exchange that a publish found gone.
const pluginReprobe = 5 * time.Second

// pluginGone reports whether err is the 404 for the plugin exchange, and then marks the plugin
// unavailable until a re-probe finds it.
func (p *Publisher) pluginGone(err error) bool {
	if !isExchangeNotFound(err, p.names.PluginExchange()) {
		return false
	}
	if p.pluginOK.CompareAndSwap(true, false) {
		p.nextProbe.Store(time.Now().Add(pluginReprobe).UnixNano())
		p.pluginLost.Store(true)
		p.log.Warn().Str("exchange", p.names.PluginExchange()).
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
		return amqpconn.Dial(ctx, p.cfg.conn(), p.opts.name+"-probe")
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
		if ok, err := p.probePlugin(ctx); err != nil || !ok {
			return
		}
		if p.pluginLost.CompareAndSwap(true, false) {
			p.pluginOK.Store(true)
			p.log.Info().Str("exchange", p.names.PluginExchange()).Msg("amqpdelay: the plugin exchange is back")
		}
	}()
}
