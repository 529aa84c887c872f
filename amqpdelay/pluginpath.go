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

// PluginAvailable reports the last probe's answer: whether the topology's delayed-message
// plugin exchange exists (probed at start and after each reconnection). It is always false
// under [LadderOnly] and with the topology's Plugin set to off, which never probe. When a
// publish finds the exchange gone (RabbitMQ's 404), it turns false at once, that message takes
// the path the strategy chooses without the plugin (PluginOnly: ErrPluginUnavailable), and
// later publishes look for the exchange again every 5 s until it is back.
func (p *Publisher) PluginAvailable() bool { return p.pluginOK.Load() }

// withoutPlugin chooses a path for delay again after the plugin exchange dest was found gone:
// RabbitMQ drops a publish to a missing exchange and closes the channel, and a plugin publish
// processed before the exchange went had its ack sent before that close, so the message was
// not stored. Under PluginOnly it returns ErrPluginUnavailable.
func (p *Publisher) withoutPlugin(delay time.Duration, dest string) (choice, error) {
	if p.opts.strategy == PluginOnly {
		return choice{}, fmt.Errorf("%w: the plugin exchange %q no longer exists (RabbitMQ answered 404 NOT_FOUND; this message "+
			"was not stored): run `rabbitdelay apply` with the plugin on, then publish again", ErrPluginUnavailable, dest)
	}
	return chooser{ladder: p.ladder, buckets: p.buckets, strategy: p.opts.strategy}.choose(delay)
}

// pluginReprobe is how often publishes look for a plugin exchange that a publish found gone.
const pluginReprobe = 5 * time.Second

// pluginGone reports whether err is the broker's 404 for the plugin exchange (deleted since the
// last probe). It then marks the plugin unavailable, so that paths are chosen without it, until
// a re-probe (reprobePlugin, or the next reconnection) finds the exchange again.
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

// isExchangeNotFound reports whether err carries RabbitMQ's 404 NOT_FOUND for the exchange named
// exchange ("NOT_FOUND - no exchange 'NAME' in vhost 'V'").
//
// RabbitMQ cuts a long reply text off to fit an AMQP short string (255 bytes), ending it
// with "..." (RabbitMQ 3.10 and later), so for a long name the reason may end inside the name: a reason
// of that length whose rest, less the "...", begins the name counts too.
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

// probePlugin reports whether the topology's plugin exchange exists, with a passive declare on
// a connection of its own (pluginprobe.ExchangeExists), bounded by ctx.
func (p *Publisher) probePlugin(ctx context.Context) (bool, error) {
	dial := func(ctx context.Context) (*amqp.Connection, error) {
		return amqpconn.Dial(ctx, p.cfg.conn(), p.opts.name+"-probe")
	}
	return pluginprobe.ExchangeExists(ctx, dial, p.names.PluginExchange())
}

// reprobePlugin starts a look for the plugin exchange in the background, at most once per
// pluginReprobe across all publishes; no publish waits for it. The probe uses a connection of
// its own, bounded by pluginReprobe and by Close.
func (p *Publisher) reprobePlugin() {
	next := p.nextProbe.Load()
	now := time.Now()
	if now.UnixNano() < next || !p.nextProbe.CompareAndSwap(next, now.Add(pluginReprobe).UnixNano()) {
		return
	}
	// Under mu, so that Close (which cancels closeCtx under mu before it waits) never waits on
	// a WaitGroup that is being added to.
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
