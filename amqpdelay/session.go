package amqpdelay

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/cenkalti/backoff/v4"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/delaykit/rabbitdelay/internal/amqpconn"
	"github.com/delaykit/rabbitdelay/internal/delayspec"
)

// The Publisher's connection and channels: dialing and checking the topology (connect), the
// channels of a session and which publish uses which (pick), and the supervisor that replaces
// dead channels and reconnects after a connection loss. Publishing itself is publisher.go.

// session is one connection and its publishing channels.
type session struct {
	conn *amqp.Connection
	// slots are the publishing channels: general of them for the bucket and ladder paths,
	// then, when present (their index >= 0), one for the plugin path, one for direct
	// publishes, and one serial channel (one publish at a time) for publishes the broker may
	// refuse (refusal.go). A publish the broker refuses by closing the channel (403, 404,
	// 406) fails every publish still waiting for a confirm on that channel, so the kinds of
	// publish that can meet such a refusal never share a channel with the delay paths.
	slots      []atomic.Pointer[pubChan]
	general    int
	pluginSlot int
	directSlot int
	serialSlot int
	chanDied   chan struct{} // a channel of this session died (buffered, coalescing)
	connClose  chan *amqp.Error
	// brokerVersion is the server property "version" of the connection ("" when absent).
	brokerVersion string
}

// slotKind says which channels of a session a publish may use.
type slotKind int

const (
	generalSlots slotKind = iota // the bucket and ladder paths
	pluginSlot                   // the plugin path
	directSlot                   // direct publishes to exchanges that took one before
	serialSlot                   // publishes the broker may refuse (Publisher.mayBeRefused)
)

// connect dials again after a connection loss, reads the spec record, which must still be the
// one the Publisher started with, and sets the connection up.
func (p *Publisher) connect(ctx context.Context) (*session, error) {
	conn, err := amqpconn.Dial(ctx, p.cfg.conn(), p.opts.name)
	if err != nil {
		return nil, err
	}
	spec, err := p.cfg.readSpec(ctx, conn)
	if err == nil && !sameSpec(spec, p.spec, p.opts.extraTargets) {
		err = fmt.Errorf("%w: prefix %q was applied again with another topology since this Publisher started: "+
			"start a new Publisher, which reads the new one", ErrTopologyMissing, p.spec.Prefix)
	}
	if err != nil {
		_ = conn.Close()
		return nil, err
	}
	return p.setUp(ctx, conn)
}

// sameSpec reports whether the record read is the one a Publisher started with (which has
// extra appended to its targets).
func sameSpec(read, started delayspec.Spec, extra []delayspec.Target) bool {
	read.Targets = append(read.Targets, extra...)
	a, errA := delayspec.EncodeRecord(read)
	b, errB := delayspec.EncodeRecord(started)
	return errA == nil && errB == nil && string(a) == string(b)
}

// setUp checks the topology on conn, probes the plugin and opens the channels; it closes conn
// when it fails.
func (p *Publisher) setUp(ctx context.Context, conn *amqp.Connection) (*session, error) {
	fail := func(err error) (*session, error) {
		_ = conn.Close()
		return nil, err
	}
	if err := p.checkTopology(ctx, conn); err != nil {
		return fail(err)
	}
	p.refusals.forget() // a new connection, maybe to another node: learn its limits anew
	if err := p.checkManaged(ctx); err != nil {
		return fail(err)
	}
	// The plugin was in use before this (re)connection, or was being looked for.
	hadPlugin := p.pluginOK.Load() || p.pluginLost.Load()
	pluginOK := false
	if p.opts.strategy != LadderOnly && p.spec.Plugin != delayspec.PluginOff {
		var err error
		if pluginOK, err = p.probePlugin(ctx); err != nil {
			return fail(fmt.Errorf("amqpdelay: probe for the delayed-message plugin: %w", err))
		}
	}
	p.pluginOK.Store(pluginOK)
	// A plugin exchange that was in use and that this probe misses (deleted during the outage,
	// or found gone by a publish) is looked for again every pluginReprobe; a broker that never
	// had it is not.
	p.pluginLost.Store(hadPlugin && !pluginOK)
	// The broker caps the channels of a connection (channel_max, negotiated at connection
	// tuning; RabbitMQ's default 2,047). The Publisher needs its publishing channels, one for
	// the checks before a publish (askOnCheckChannel) and the serial channel: without it a
	// publish the broker may refuse would share a general channel, whose closing by a 404 or
	// 403 would fail the other publishes in flight there and could be taken for theirs.
	if limit := int(conn.Config.ChannelMax); limit < p.opts.channels+2 {
		return fail(fmt.Errorf("%w: the broker allows %d channels per connection (channel_max) and the Publisher needs %d "+
			"(Config.Channels %d, one to check exchanges and one for publishes the broker may refuse): lower Config.Channels to at most %d, or raise channel_max in rabbitmq.conf",
			ErrInvalidConfig, limit, p.opts.channels+2, p.opts.channels, max(limit-2, 0)))
	}
	// The direct publishes get a channel of their own, and so does the plugin path when this
	// connection can use the plugin (it has the exchange, or had it and a re-probe may find it
	// again), as far as channel_max permits; without one, such publishes share the general
	// channels.
	brokerVersion, _ := conn.Properties["version"].(string)
	s := &session{
		conn:          conn,
		brokerVersion: brokerVersion,
		general:       p.opts.channels,
		pluginSlot:    -1,
		directSlot:    -1,
		serialSlot:    -1,
		chanDied:      make(chan struct{}, 1),
		connClose:     conn.NotifyClose(make(chan *amqp.Error, 1)),
	}
	s.serialSlot = p.opts.channels
	nslots, room := p.opts.channels+1, int(conn.Config.ChannelMax)-p.opts.channels-2
	if room > 0 {
		s.directSlot, nslots, room = nslots, nslots+1, room-1
	}
	if room > 0 && (pluginOK || p.pluginLost.Load()) {
		s.pluginSlot, nslots = nslots, nslots+1
	}
	s.slots = make([]atomic.Pointer[pubChan], nslots)
	for i := range s.slots {
		pc, err := openPubChan(conn, s.onChanDied, i == s.serialSlot)
		if err != nil {
			return fail(fmt.Errorf("amqpdelay: %w", err))
		}
		s.slots[i].Store(pc)
	}
	p.log.Info().Str("urls", p.cfg.conn().Redacted()).Str("node", conn.RemoteAddr().String()).Bool("plugin", pluginOK).
		Int("channels", p.opts.channels).Bool("plugin_channel", s.pluginSlot >= 0).Bool("direct_channel", s.directSlot >= 0).Str("strategy", p.opts.strategy.String()).Msg("amqpdelay: publisher connected")
	return s, nil
}

// pick returns a live channel of s for a publish of kind k (round robin from start among the
// general channels), or nil when none is live. A kind without a channel of its own in s uses
// the general ones.
func (s *session) pick(k slotKind, start uint32) *pubChan {
	own := -1
	switch k {
	case pluginSlot:
		own = s.pluginSlot
	case directSlot:
		own = s.directSlot
	case serialSlot:
		own = s.serialSlot
	}
	if own >= 0 {
		if pc := s.slots[own].Load(); pc != nil && !pc.isDead() {
			return pc
		}
		return nil
	}
	n := uint32(s.general)
	for j := uint32(0); j < n; j++ {
		if pc := s.slots[(start+j)%n].Load(); pc != nil && !pc.isDead() {
			return pc
		}
	}
	return nil
}

func (s *session) onChanDied() {
	select {
	case s.chanDied <- struct{}{}:
	default:
	}
}

// checkTopology passive-declares the dispatch exchange on a channel of its own (a missing
// exchange closes only that channel with 404 NOT_FOUND).
func (p *Publisher) checkTopology(ctx context.Context, conn *amqp.Connection) error {
	// Each check is a passive declare on a channel of its own: a missing object closes the
	// channel (404 NOT_FOUND). The spec record says what apply declared; these find what was
	// deleted since.
	type check struct {
		exchange, queue string
		missing         func() error
	}
	checks := []check{
		{exchange: p.names.Dispatch(), missing: func() error {
			return fmt.Errorf("%w: exchange %q does not exist in this vhost, though prefix %q has a spec record: run `rabbitdelay apply` again",
				ErrTopologyMissing, p.names.Dispatch(), p.spec.Prefix)
		}},
	}
	for _, t := range p.spec.Targets {
		checks = append(checks, check{exchange: t.Name, missing: func() error {
			if delayspec.BrokerReserved(t.Name) {
				return fmt.Errorf("%w: target exchange %q does not exist, and names starting with \"amq.\" are RabbitMQ's own: only the broker "+
					"creates them; enable what creates it, or apply again without it", ErrTopologyMissing, t.Name)
			}
			return fmt.Errorf("%w: target exchange %q of the applied topology does not exist (deleted since `rabbitdelay apply`?): "+
				"declare it again (AMQPDELAY_TARGETS=%s:topic, or another type, then `rabbitdelay apply`), or apply again without it",
				ErrTopologyMissing, t.Name, t.Name)
		}})
	}
	for _, b := range p.buckets.List() {
		checks = append(checks, check{queue: p.names.BucketQueue(b.TTL), missing: func() error {
			return fmt.Errorf("%w: bucket %v (queue %q) of the applied topology does not exist (deleted since `rabbitdelay apply`?): run `rabbitdelay apply` again",
				ErrTopologyMissing, b.Delay, p.names.BucketQueue(b.TTL))
		}})
	}
	done := make(chan error, 1)
	go func() {
		for _, c := range checks {
			ch, err := conn.Channel()
			if err != nil {
				done <- fmt.Errorf("amqpdelay: open channel: %w", err)
				return
			}
			name := c.exchange
			if c.queue != "" {
				name = c.queue
				_, err = ch.QueueDeclarePassive(c.queue, true, false, false, false, nil)
			} else {
				err = ch.ExchangeDeclarePassive(c.exchange, amqp.ExchangeHeaders, true, false, false, false, nil)
			}
			var ae *amqp.Error
			notFound := errors.As(err, &ae) && ae.Code == amqp.NotFound
			switch {
			case err == nil:
				_ = ch.Close()
			case notFound:
				done <- fmt.Errorf("%w: %w", c.missing(), err)
				return
			default:
				done <- fmt.Errorf("amqpdelay: check %q: %w", name, err)
				return
			}
		}
		done <- nil
	}()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return fmt.Errorf("amqpdelay: check the topology: %w", ctx.Err())
	}
}

// supervise replaces dead channels and lost connections until Close.
func (p *Publisher) supervise(s *session) {
	defer p.wg.Done()
	for {
		select {
		case <-p.closeCtx.Done():
			return
		case <-s.chanDied:
			if s.conn.IsClosed() {
				continue // connClose follows
			}
			if err := p.reopenChannels(s); err != nil {
				p.log.Warn().Err(err).Msg("amqpdelay: reopening a channel failed; reconnecting")
				_ = s.conn.Close()
			}
		case e := <-s.connClose:
			var err error = amqp.ErrClosed
			if e != nil {
				err = e
			}
			p.log.Warn().Err(err).Msg("amqpdelay: connection lost; reconnecting")
			p.event(ReconnectEvent{Kind: Disconnected, Err: err})
			p.sess.Store(nil)
			p.broadcast()
			s = p.reconnect()
			if s == nil {
				return
			}
			p.sess.Store(s)
			p.broadcast()
		}
	}
}

// reopenChannels replaces every dead channel of s (the connection is alive).
func (p *Publisher) reopenChannels(s *session) error {
	for i := range s.slots {
		pc := s.slots[i].Load()
		if pc != nil && !pc.isDead() {
			continue
		}
		var cause error
		if pc != nil {
			cause = pc.deadErr
		}
		npc, err := openPubChan(s.conn, s.onChanDied, i == s.serialSlot)
		if err != nil {
			return err
		}
		s.slots[i].Store(npc)
		p.log.Info().Int("slot", i).AnErr("cause", cause).Msg("amqpdelay: channel reopened")
	}
	p.broadcast()
	return nil
}

// reconnect retries connect with exponential back-off and jitter (cenkalti/backoff: from
// Config.ReconnectMin, doubling up to Config.ReconnectMax, each wait randomized by ±50 % so
// that many publishers that lost one node do not dial the others in step) until it succeeds
// (the new session) or the Publisher is closed (nil). Each attempt dials the whole address list.
func (p *Publisher) reconnect() *session {
	bo := backoff.NewExponentialBackOff()
	bo.InitialInterval, bo.MaxInterval, bo.Multiplier = p.opts.backoffMin, p.opts.backoffMax, 2
	bo.RandomizationFactor, bo.MaxElapsedTime = 0.5, 0
	bo.Reset()
	wait := bo.NextBackOff()
	for attempt := 1; ; attempt++ {
		select {
		case <-p.closeCtx.Done():
			return nil
		case <-time.After(wait):
		}
		ctx, cancel := context.WithTimeout(p.closeCtx, 30*time.Second)
		s, err := p.connect(ctx)
		cancel()
		if err == nil {
			p.log.Info().Int("attempt", attempt).Bool("plugin", p.pluginOK.Load()).Msg("amqpdelay: reconnected")
			p.event(ReconnectEvent{Kind: Reconnected, Attempt: attempt, PluginAvailable: p.pluginOK.Load()})
			return s
		}
		wait = bo.NextBackOff()
		p.log.Warn().Int("attempt", attempt).Dur("next_in", wait).
			Err(err).Msg("amqpdelay: reconnect failed")
		p.event(ReconnectEvent{Kind: ReconnectFailed, Err: err, Attempt: attempt})
	}
}

// event reports e to the reconnect handler, unless Close has begun: a reconnection attempt
// that Close cancels is not an event of the Publisher's connection.
func (p *Publisher) event(e ReconnectEvent) {
	if !p.isClosed() {
		p.metrics.connection(e.Kind)
	}
	if p.opts.onReconnect != nil && !p.isClosed() {
		p.opts.onReconnect(e)
	}
}

// broadcast wakes every publish waiting for a usable channel.
func (p *Publisher) broadcast() {
	p.mu.Lock()
	close(p.changed)
	p.changed = make(chan struct{})
	p.mu.Unlock()
}

// acquire returns a live channel for a publish of kind k (session.pick), waiting through an
// outage until ctx ends or Close.
func (p *Publisher) acquire(ctx context.Context, k slotKind) (*pubChan, error) {
	for {
		p.mu.Lock()
		changed := p.changed
		p.mu.Unlock()
		// A publish counted in before Close began may still use a live channel: Close waits
		// for it. Only a publish that would wait for a connection ends with ErrClosed.
		if s := p.sess.Load(); s != nil {
			if pc := s.pick(k, p.rr.Add(1)); pc != nil {
				return pc, nil
			}
		}
		if p.isClosed() {
			return nil, ErrClosed
		}
		select {
		case <-changed:
		case <-p.closeCtx.Done():
			return nil, ErrClosed
		case <-ctx.Done():
			return nil, fmt.Errorf("amqpdelay: context ended while waiting for a connection to the broker: %w", ctx.Err())
		}
	}
}
