package amqpdelay

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/delaykit/rabbitdelay/internal/amqpconn"
	"github.com/delaykit/rabbitdelay/internal/delayspec"
)

type session struct {
	conn *amqp.Connection
	// slots: general channels for the bucket and ladder paths, then the kinds' own (own, by
	// slotKind; -1: none). A refusal closes its channel and fails every publish in flight
	// there, so the publishes that may meet one never share the delay paths' channels.
	slots         []atomic.Pointer[pubChan]
	general       int
	own           [4]int
	chanDied      chan struct{} // buffered, coalescing
	connClose     chan *amqp.Error
	brokerVersion string // "" when unknown
}

type slotKind int

const (
	generalSlots slotKind = iota // the bucket and ladder paths
	pluginSlot
	directSlot // direct publishes to exchanges that took one before
	serialSlot // publishes the broker may refuse (Publisher.mayBeRefused), one at a time
)

// connect dials again after a connection loss; the spec record must not have changed.
func (p *Publisher) connect(ctx context.Context) (*session, error) {
	conn, err := amqpconn.Dial(ctx, p.cfg.conn(), p.cfg.ConnectionName)
	if err != nil {
		return nil, err
	}
	spec, err := p.cfg.readSpec(ctx, conn)
	if err == nil && !sameSpec(spec, p.spec, p.cfg.extraTargets) {
		err = fmt.Errorf("%w: prefix %q was applied again with another topology since this Publisher started: "+
			"start a new Publisher, which reads the new one", ErrTopologyMissing, p.spec.Prefix)
	}
	if err != nil {
		_ = conn.Close()
		return nil, err
	}
	return p.setUp(ctx, conn)
}

// sameSpec reports whether read, with extra targets, is the record the Publisher started with.
func sameSpec(read, started delayspec.Spec, extra []delayspec.Target) bool {
	read.Targets = append(read.Targets, extra...)
	a, errA := delayspec.EncodeRecord(read)
	b, errB := delayspec.EncodeRecord(started)
	return errA == nil && errB == nil && string(a) == string(b)
}

// setUp checks the topology, probes the plugin and opens the channels; it closes conn on failure.
func (p *Publisher) setUp(ctx context.Context, conn *amqp.Connection) (*session, error) {
	fail := func(err error) (*session, error) {
		_ = conn.Close()
		return nil, err
	}
	if err := p.checkTopology(ctx, conn); err != nil {
		return fail(err)
	}
	p.refusals.forget() // maybe another node: learn its limits anew
	if err := p.checkManaged(ctx); err != nil {
		return fail(err)
	}
	hadPlugin := p.pluginOK.Load() || p.pluginLost.Load()
	pluginOK := false
	if p.cfg.Strategy != LadderOnly && p.spec.Plugin != delayspec.PluginOff {
		var err error
		if pluginOK, err = p.probePlugin(ctx); err != nil {
			return fail(fmt.Errorf("amqpdelay: probe for the delayed-message plugin: %w", err))
		}
	}
	p.pluginOK.Store(pluginOK)
	// A plugin exchange in use and now missing is looked for again every pluginReprobe.
	p.pluginLost.Store(hadPlugin && !pluginOK)
	// Without the check and serial channels a refusal would fail other publishes in flight.
	if limit := int(conn.Config.ChannelMax); limit < p.cfg.Channels+2 {
		return fail(fmt.Errorf("%w: the broker allows %d channels per connection (channel_max) and the Publisher needs %d "+
			"(Config.Channels %d, one to check exchanges and one for publishes the broker may refuse): lower Config.Channels to at most %d, or raise channel_max in rabbitmq.conf",
			ErrInvalidConfig, limit, p.cfg.Channels+2, p.cfg.Channels, max(limit-2, 0)))
	}
	// Direct and plugin publishes get channels of their own as far as channel_max permits.
	brokerVersion, _ := conn.Properties["version"].(string)
	s := &session{
		conn:          conn,
		brokerVersion: brokerVersion,
		general:       p.cfg.Channels,
		own:           [4]int{-1, -1, -1, p.cfg.Channels},
		chanDied:      make(chan struct{}, 1),
		connClose:     conn.NotifyClose(make(chan *amqp.Error, 1)),
	}
	nslots, room := p.cfg.Channels+1, int(conn.Config.ChannelMax)-p.cfg.Channels-2
	if room > 0 {
		s.own[directSlot], nslots, room = nslots, nslots+1, room-1
	}
	if room > 0 && (pluginOK || p.pluginLost.Load()) {
		s.own[pluginSlot], nslots = nslots, nslots+1
	}
	s.slots = make([]atomic.Pointer[pubChan], nslots)
	for i := range s.slots {
		pc, err := openPubChan(conn, s.onChanDied, i == s.own[serialSlot])
		if err != nil {
			return fail(fmt.Errorf("amqpdelay: %w", err))
		}
		s.slots[i].Store(pc)
	}
	p.cfg.Logger.Info().Str("urls", p.cfg.conn().Redacted()).Str("node", conn.RemoteAddr().String()).Bool("plugin", pluginOK).
		Int("channels", p.cfg.Channels).Bool("plugin_channel", s.own[pluginSlot] >= 0).Bool("direct_channel", s.own[directSlot] >= 0).Str("strategy", p.cfg.Strategy.String()).Msg("amqpdelay: publisher connected")
	return s, nil
}

// pick returns a live channel for kind k (round robin from start among the general ones) or nil.
func (s *session) pick(k slotKind, start uint32) *pubChan {
	if own := s.own[k]; k != generalSlots && own >= 0 {
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

// checkTopology passive-declares the dispatch exchange, the targets and the bucket queues,
// each on a channel of its own (a missing one closes it with 404): what was deleted since apply.
func (p *Publisher) checkTopology(ctx context.Context, conn *amqp.Connection) error {
	type check struct {
		name    string
		queue   bool
		missing error
	}
	checks := []check{{name: p.names.Dispatch(), missing: fmt.Errorf("%w: exchange %q does not exist in this vhost, though prefix %q "+
		"has a spec record: run `rabbitdelay apply` again", ErrTopologyMissing, p.names.Dispatch(), p.spec.Prefix)}}
	for _, t := range p.spec.Targets {
		missing := fmt.Errorf("%w: target exchange %q of the applied topology does not exist (deleted since `rabbitdelay apply`?): "+
			"declare it again (AMQPDELAY_TARGETS=%s:topic, or another type, then `rabbitdelay apply`), or apply again without it",
			ErrTopologyMissing, t.Name, t.Name)
		if delayspec.BrokerReserved(t.Name) {
			missing = fmt.Errorf("%w: target exchange %q does not exist, and names starting with \"amq.\" are RabbitMQ's own: only the broker "+
				"creates them; enable what creates it, or apply again without it", ErrTopologyMissing, t.Name)
		}
		checks = append(checks, check{name: t.Name, missing: missing})
	}
	for _, b := range p.buckets.List() {
		q := p.names.BucketQueue(b.TTL)
		checks = append(checks, check{name: q, queue: true, missing: fmt.Errorf("%w: bucket %v (queue %q) of the applied topology "+
			"does not exist (deleted since `rabbitdelay apply`?): run `rabbitdelay apply` again", ErrTopologyMissing, b.Delay, q)})
	}
	done := make(chan error, 1)
	go func() {
		done <- func() error {
			for _, c := range checks {
				ch, err := conn.Channel()
				if err != nil {
					return fmt.Errorf("amqpdelay: open channel: %w", err)
				}
				if c.queue {
					_, err = ch.QueueDeclarePassive(c.name, true, false, false, false, nil)
				} else {
					err = ch.ExchangeDeclarePassive(c.name, amqp.ExchangeHeaders, true, false, false, false, nil)
				}
				switch {
				case amqpconn.IsNotFound(err):
					return fmt.Errorf("%w: %w", c.missing, err)
				case err != nil:
					return fmt.Errorf("amqpdelay: check %q: %w", c.name, err)
				}
				_ = ch.Close()
			}
			return nil
		}()
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
				p.cfg.Logger.Warn().Err(err).Msg("amqpdelay: reopening a channel failed; reconnecting")
				_ = s.conn.Close()
			}
		case e := <-s.connClose:
			var err error = amqp.ErrClosed
			if e != nil {
				err = e
			}
			p.cfg.Logger.Warn().Err(err).Msg("amqpdelay: connection lost; reconnecting")
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

// reopenChannels replaces every dead channel of s, whose connection is alive.
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
		npc, err := openPubChan(s.conn, s.onChanDied, i == s.own[serialSlot])
		if err != nil {
			return err
		}
		s.slots[i].Store(npc)
		p.cfg.Logger.Info().Int("slot", i).AnErr("cause", cause).Msg("amqpdelay: channel reopened")
	}
	p.broadcast()
	return nil
}

// reconnect retries connect with exponential back-off, randomized by ±50 % so that publishers
// do not dial in step, until it succeeds or the Publisher is closed (nil).
func (p *Publisher) reconnect() *session {
	bo := amqpconn.NewBackOff(p.cfg.ReconnectMin, p.cfg.ReconnectMax, 2)
	wait := bo.NextBackOff()
	for attempt := 1; ; attempt++ {
		if !amqpconn.Sleep(p.closeCtx, wait) {
			return nil
		}
		ctx, cancel := context.WithTimeout(p.closeCtx, 30*time.Second)
		s, err := p.connect(ctx)
		cancel()
		if err == nil {
			p.cfg.Logger.Info().Int("attempt", attempt).Bool("plugin", p.pluginOK.Load()).Msg("amqpdelay: reconnected")
			p.event(ReconnectEvent{Kind: Reconnected, Attempt: attempt, PluginAvailable: p.pluginOK.Load()})
			return s
		}
		wait = bo.NextBackOff()
		p.cfg.Logger.Warn().Int("attempt", attempt).Dur("next_in", wait).Err(err).Msg("amqpdelay: reconnect failed")
		p.event(ReconnectEvent{Kind: ReconnectFailed, Err: err, Attempt: attempt})
	}
}

// event reports e, unless Close has begun (an attempt Close cancels is no event).
func (p *Publisher) event(e ReconnectEvent) {
	if !p.isClosed() {
		p.metrics.connection(e.Kind)
		if p.cfg.OnReconnect != nil {
			p.cfg.OnReconnect(e)
		}
	}
}

// broadcast wakes every publish waiting for a usable channel.
func (p *Publisher) broadcast() {
	p.mu.Lock()
	close(p.changed)
	p.changed = make(chan struct{})
	p.mu.Unlock()
}

// acquire returns a live channel for kind k, waiting through an outage until ctx ends or Close.
func (p *Publisher) acquire(ctx context.Context, k slotKind) (*pubChan, error) {
	for {
		p.mu.Lock()
		changed := p.changed
		p.mu.Unlock()
		// A publish counted in before Close may use a live channel; only waiting ends in ErrClosed.
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

// askOnCheckChannel runs ask on a channel of its own, for the checks before a publish, waiting
// through an outage. One check at a time (checkSem), released when the broker answers, not when
// ctx ends: a blocked broker would otherwise collect a channel per timed-out publish. skip, if
// set, is asked once the turn has come: true gives an empty answer. Errors: ErrClosed or ctx's.
func (p *Publisher) askOnCheckChannel(ctx context.Context, doing string, skip func() bool, ask func(*amqp.Channel) error) (checkAnswer, error) {
	var s *session
	for s == nil {
		if _, err := p.acquire(ctx, generalSlots); err != nil { // waits through an outage
			return checkAnswer{}, err
		}
		s = p.sess.Load()
	}
	select {
	case p.checkSem <- struct{}{}:
	case <-p.closeCtx.Done():
		return checkAnswer{}, ErrClosed
	case <-ctx.Done():
		return checkAnswer{}, fmt.Errorf("amqpdelay: context ended while waiting to %s: %w", doing, ctx.Err())
	}
	if skip != nil && skip() {
		<-p.checkSem
		return checkAnswer{}, nil
	}
	done := make(chan error, 1)
	go func() {
		defer func() { <-p.checkSem }()
		ch, err := s.conn.Channel()
		if err == nil {
			closed := ch.NotifyClose(make(chan *amqp.Error, 1))
			if err = ask(ch); err == nil {
				_ = ch.Close()
			} else {
				t := time.NewTimer(5 * time.Second)
				defer t.Stop()
				select {
				case e, ok := <-closed:
					if ok && e != nil {
						err = e
					}
				case <-t.C:
				}
			}
		}
		done <- err
	}()
	select {
	case err := <-done:
		return checkAnswer{err: err, lost: err != nil && s.conn.IsClosed()}, nil
	case <-p.closeCtx.Done():
		return checkAnswer{}, ErrClosed
	case <-ctx.Done():
		return checkAnswer{}, fmt.Errorf("amqpdelay: context ended while waiting to %s: %w", doing, ctx.Err())
	}
}

// checkAnswer is a check's answer: err nil passed; else the channel's close reason when the
// broker closed it (a later call gets only 504); lost: the connection closed, ask again.
type checkAnswer struct {
	err  error
	lost bool
}
