package amqpdelay

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"sync"
	"sync/atomic"

	amqp "github.com/rabbitmq/amqp091-go"
)

// RabbitMQ answers a failed basic.publish check by closing the channel (403, 404, 406), which
// fails every publish in flight there (rabbit_channel.erl). So a publish that may be refused
// goes alone on the serial channel, where the refusal is its own answer (learn); one that still
// closes a shared channel sends every publish in flight there again alone (closedByRefusal),
// maybe storing one twice. What would close the connection is refused before sending.

type refusals struct {
	trusted nameSet // exchanges a publish was confirmed on, on this connection
	// topicGuarded: exchanges with a topic permission, whose direct publishes go alone; kept
	// across reconnections.
	topicGuarded nameSet
	permitted    nameSet         // targets a delayed publish was permitted to (checkPermitted)
	topologies   topologyAnswers // whether other prefixes have a topology (foreign.go)
	bodyOK       atomic.Int64    // the largest body, in bytes, the broker has confirmed
}

// forget drops what was learnt on a connection: another node may have other limits.
func (r *refusals) forget() {
	r.trusted.clear()
	r.permitted.clear()
	r.topologies.clear()
	r.bodyOK.Store(0)
}

// mayBeRefused reports whether a publish of out to dest on path must go on the serial channel:
// an exchange not yet trusted, a topic-guarded direct target, a body larger than any
// confirmed, or a UserId other than the connection's user (refused without impersonator).
func (p *Publisher) mayBeRefused(path Path, dest string, out *amqp.Publishing) bool {
	return !p.refusals.trusted.has(dest) ||
		path == PathDirect && p.refusals.topicGuarded.has(dest) ||
		int64(len(out.Body)) > p.refusals.bodyOK.Load() ||
		out.UserId != "" && out.UserId != p.user
}

func (p *Publisher) accepted(dest string, bodyLen int) {
	p.refusals.trusted.add(dest)
	for n := int64(bodyLen); ; {
		old := p.refusals.bodyOK.Load()
		if n <= old || p.refusals.bodyOK.CompareAndSwap(old, n) {
			return
		}
	}
}

// checkBodySize refuses a body above Config.MaxMessageSize (a lower broker limit: its 406).
func (p *Publisher) checkBodySize(n int) error {
	if limit := p.cfg.MaxMessageSize; n > limit {
		return fmt.Errorf("%w: msg.Body is %d bytes, more than Config.MaxMessageSize of %d bytes (default 16 MiB: RabbitMQ 4.x's "+
			"default max_message_size): send a smaller body, or raise the limit (Config.MaxMessageSize, and max_message_size in "+
			"rabbitmq.conf)", ErrInvalidInput, n, limit)
	}
	return nil
}

var sizeRefusal = regexp.MustCompile(`message size (\d+) is larger than (?:configured )?max size (\d+)`)

// learn turns a publish's error into the caller's, and learns from a refusal: on the serial
// channel a 403, 404 or 406 answers that publish alone (nothing stored); elsewhere it stays
// ErrConnectionLost, and the exchange named goes on the serial channel next.
func (p *Publisher) learn(err error, serial bool, path Path, dest, key string, out *amqp.Publishing) error {
	if errors.Is(err, ErrUnroutable) && (path == PathLadder || path == PathBucket) {
		return fmt.Errorf("%w; the delay topology routes it to no queue, so it is incomplete or damaged (a queue, binding "+
			"or exchange deleted or re-declared): `rabbitdelay status` names what is wrong, `rabbitdelay apply` declares what is "+
			"missing", err)
	}
	var ae *amqp.Error
	if !errors.Is(err, ErrConnectionLost) || !errors.As(err, &ae) {
		return err
	}
	if ae.Code == amqp.AccessRefused && topicRefusal.MatchString(ae.Reason) {
		name, ok := quotedExchange(ae.Reason)
		if !ok {
			name = dest
		}
		p.refusals.topicGuarded.add(name)
	}
	if !serial {
		switch ae.Code {
		case amqp.AccessRefused:
			if name, ok := quotedExchange(ae.Reason); ok {
				p.refusals.trusted.remove(name)
			}
		case amqp.NotFound:
			if path == PathDirect {
				p.refusals.trusted.remove(dest)
			}
		}
		return err
	}
	switch ae.Code {
	case amqp.AccessRefused:
		p.refusals.trusted.remove(dest)
		return fmt.Errorf("%w: RabbitMQ refused the publish to exchange %q with routing key %q (%s); nothing was stored: grant the "+
			"user write permission (and topic permission) on it, or publish to an exchange that is not internal: %w", ErrAccessRefused, dest, key, ae.Reason, ae)
	case amqp.NotFound:
		p.refusals.trusted.remove(dest)
		return fmt.Errorf("%w: exchange %q does not exist (RabbitMQ answered the publish with 404 NOT_FOUND); nothing was stored: "+
			"declare it, or correct the name: %w", ErrExchangeNotFound, dest, ae)
	case amqp.PreconditionFailed:
		if m := sizeRefusal.FindStringSubmatch(ae.Reason); m != nil {
			return fmt.Errorf("%w: msg.Body is %d bytes and the broker's max_message_size is %s bytes (RabbitMQ answered 406); nothing "+
				"was stored: send a smaller body, or raise max_message_size: %w", ErrInvalidInput, len(out.Body), m[2], ae)
		}
		return fmt.Errorf("%w: RabbitMQ refused the message (%s); nothing was stored: correct the property it names: %w", ErrInvalidInput, ae.Reason, ae)
	}
	return err
}

// closedByRefusal reports whether err is ErrConnectionLost from a channel a soft error (403,
// 404, 406: amqp091's Recover) closed: a publish in flight there may be refused, stored or lost.
func closedByRefusal(err error) bool {
	var ae *amqp.Error
	return errors.Is(err, ErrConnectionLost) && errors.As(err, &ae) && ae.Server && ae.Recover
}

var (
	topicRefusal     = regexp.MustCompile(`access to topic '`)
	exchangeInReason = regexp.MustCompile(`exchange '((?:[^']|'[^ ])*)' in vhost`)
)

// quotedExchange returns the exchange a reply text names ("exchange 'X' in vhost").
func quotedExchange(reason string) (string, bool) {
	m := exchangeInReason.FindStringSubmatch(reason)
	if m == nil {
		return "", false
	}
	return m[1], true
}

const maxNames = 1024 // bounds a nameSet: a name beyond is not remembered, only checked again

// nameSet is a concurrent set of at most max(limit, maxNames) names; the zero value is ready.
type nameSet struct {
	mu    sync.RWMutex
	names map[string]struct{}
	limit int // set before first use
}

func (s *nameSet) add(name string) {
	s.mu.Lock()
	if s.names == nil {
		s.names = make(map[string]struct{})
	}
	if len(s.names) < max(s.limit, maxNames) {
		s.names[name] = struct{}{}
	}
	s.mu.Unlock()
}

func (s *nameSet) has(name string) bool {
	s.mu.RLock()
	_, ok := s.names[name]
	s.mu.RUnlock()
	return ok
}

func (s *nameSet) remove(name string) {
	s.mu.Lock()
	delete(s.names, name)
	s.mu.Unlock()
}

func (s *nameSet) clear() {
	s.mu.Lock()
	s.names = nil
	s.mu.Unlock()
}

// checkPermitted returns nil when a delayed publish to target may go ahead as a direct one would
// (RabbitMQ does not check dead-lettering): it asks before the first to target on a connection,
// with the message's keys then probeKey, and before every one to a topic-guarded target. A
// deny-list pattern is found only through Config.Management or a refusal.
func (p *Publisher) checkPermitted(ctx context.Context, target, routingKey string, headers amqp.Table) error {
	if p.refusals.permitted.has(target) && !p.refusals.topicGuarded.has(target) {
		return nil
	}
	// One first check at a time: those waiting find the target permitted by the first.
	select {
	case p.permSem <- struct{}{}:
		defer func() { <-p.permSem }()
	case <-p.closeCtx.Done():
		return ErrClosed
	case <-ctx.Done():
		return fmt.Errorf("amqpdelay: context ended while waiting to check the permission to publish to %q: %w", target, ctx.Err())
	}
	if p.refusals.permitted.has(target) && !p.refusals.topicGuarded.has(target) {
		return nil
	}
	if err := p.permitted(ctx, target, routingKey, headers); err != nil {
		return err
	}
	if !p.refusals.permitted.has(target) && !p.refusals.topicGuarded.has(target) {
		// A topic refusal guards target; another means the write permission was taken meanwhile.
		if err := p.permitted(ctx, target, probeKey, nil); err != nil && !(errors.Is(err, ErrAccessRefused) && p.refusals.topicGuarded.has(target)) {
			return err
		}
	}
	p.refusals.permitted.add(target)
	return nil
}

// probeKey is refused by an allow-list topic pattern (^orders\.) and allowed by .* .
const probeKey = ""

// permitted asks the broker whether the user may publish to exchange with routingKey and the
// CC and BCC keys of headers: in a transaction it publishes an empty message, checked on
// receipt, and rolls it back unstored (rabbit_channel.erl). Errors: ErrAccessRefused,
// ErrExchangeNotFound, ctx's, or after four failed tries an error: never unchecked.
func (p *Publisher) permitted(ctx context.Context, exchange, routingKey string, headers amqp.Table) error {
	probe := amqp.Publishing{Headers: amqp.Table{}} // amqp091 sends no empty table
	for _, h := range []string{"CC", "BCC"} {
		if v, ok := headers[h]; ok {
			probe.Headers[h] = v
		}
	}
	for tries := 0; ; {
		answer, err := p.askOnCheckChannel(ctx, fmt.Sprintf("check the permission to publish to %q", exchange), nil,
			func(ch *amqp.Channel) error {
				if err := ch.Tx(); err != nil {
					return err
				}
				if err := ch.PublishWithContext(context.Background(), exchange, routingKey, false, false, probe); err != nil {
					return err
				}
				return ch.TxRollback()
			})
		if err != nil {
			return err
		}
		err = answer.err
		var ae *amqp.Error
		switch {
		case err == nil:
			return nil
		case errors.As(err, &ae) && ae.Code == amqp.AccessRefused:
			if topicRefusal.MatchString(ae.Reason) {
				p.refusals.topicGuarded.add(exchange)
			}
			return fmt.Errorf("%w: RabbitMQ refuses the user a publish to exchange %q with routing key %q (%s), and a delayed "+
				"message would reach it by dead-lettering, which RabbitMQ does not check, so the Publisher refuses it; nothing was "+
				"sent: grant the user write permission on the exchange (and a topic permission that allows the key), or publish "+
				"with a key it allows: %w", ErrAccessRefused, exchange, routingKey, ae.Reason, ae)
		case errors.As(err, &ae) && ae.Code == amqp.NotFound:
			return fmt.Errorf("%w: target exchange %q does not exist (RabbitMQ answered 404 NOT_FOUND); nothing was sent: run "+
				"`rabbitdelay apply`: %w", ErrExchangeNotFound, exchange, err)
		case answer.lost:
			continue
		case tries < 3:
			tries++
			p.cfg.Logger.Debug().Str("exchange", exchange).Err(err).Msg("amqpdelay: could not check the permission to publish; asking again")
			continue
		default:
			// Never publish unchecked: a lost refusal would let a forbidden message through.
			return fmt.Errorf("amqpdelay: could not ask the broker whether the user may publish to exchange %q with routing "+
				"key %q (nothing was sent; publish again): %w", exchange, routingKey, err)
		}
	}
}
