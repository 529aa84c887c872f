package amqpdelay

import (
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// What RabbitMQ refuses by closing the channel, and how the Publisher keeps such a refusal
// from costing other publishes their confirms.
//
// RabbitMQ checks every basic.publish before it routes it (rabbit_channel.erl,
// handle_method(#'basic.publish'{}), in 3.10 and 4.0) and answers a failed check by closing
// the channel (a soft error: rabbit_binary_generator:map_exception) — every publish still
// waiting for its confirm on that channel then fails, outcome unknown. The checks, in the
// broker's order, and what the Publisher does about each:
//
//  1. Body larger than max_message_size (406 "message size N is larger than configured max
//     size M"; 128 MiB by default on 3.x, 16 MiB on 4.x, not advertised over AMQP 0-9-1).
//     Refused before sending above Config.MaxMessageSize or a limit learnt from such a 406; a
//     body larger than any the broker has confirmed for this Publisher goes on the serial
//     channel.
//  2. No write permission on the exchange (403 "access to exchange ... refused"), the
//     target's or one of the topology's (a user may hold write permission on some of its
//     exchanges only; a passive declare, which NewPublisher checks with, needs none). Every
//     publish goes on the serial channel until one to its exchange (the target, or the path's
//     entry exchange) has been confirmed on this connection; a refused exchange is remembered
//     for refusalMemory and refused before sending.
//  3. Exchange not found (404): checked with a passive declare before the first direct
//     publish (checkExchange); the delay paths' exchanges are checked by NewPublisher. An
//     exchange deleted after it took a direct publish cannot be told from AMQP without a
//     declare per publish: the next direct publish to it closes the direct publishes' shared
//     channel, and every publish in flight there is sent again alone (below); publishes to
//     that exchange then go alone until it takes one.
//  4. Internal exchange (403 "cannot publish to internal exchange"): as 2.
//  5. Topic permission on the routing key, topic exchanges only (403 "access to topic ...";
//     rabbit_channel.erl check_topic_authorisation and rabbit_auth_backend_internal
//     check_topic_access, whose write pattern may hold {username}, {vhost} and {client_id};
//     4.x checks CC and BCC keys too): direct publishes only (the delay paths publish to
//     headers exchanges, and dead-lettering is not checked; permission.go asks the broker
//     before delayed publishes instead, so that they keep the user's permissions). Direct
//     publishes to an exchange
//     with a topic permission for the user go on the serial channel, each alone: with
//     Config.Management the Publisher reads those exchanges at every connection
//     (ManagementCheck.TopicPermissionExchanges); without it, or when the management user
//     may not read them, it learns an exchange from the first topic refusal there. Until then
//     the direct publishes to an exchange that has taken one share the direct publishes'
//     channel, so that first refusal closes it, and every publish in flight there is sent
//     again alone (below).
//  6. user_id property other than the connection's user (406), unless the user has the
//     impersonator tag: such a publish goes on the serial channel.
//  7. expiration property that is not an integer of 0 to 315,360,000,000 ms (406 "invalid
//     expiration"; rabbit_basic:parse_expiration, rabbit_misc:check_expiry): refused before
//     sending (validateMessage).
//  8. CC or BCC header that is not an array (406 "invalid message"): refused before sending.
//  9. delivery mode other than 1 or 2 (406 on 3.x): refused before sending.
//
// The serial channel carries one publish at a time, so its refusal is the answer to that
// publish alone: the Publisher returns it as ErrAccessRefused, ErrExchangeNotFound or
// ErrInvalidInput (nothing was stored) and reopens the channel. A refusal that still closes a
// shared channel (the cases of 3 and 5 the Publisher cannot foresee, or any check not listed
// here) fails no publish either: every publish that was in flight on that channel is sent
// again, alone, on the serial channel (closedByRefusal), where the refused one gets its own
// refusal and the others their confirms. A publish the broker had stored before the refusal
// (its confirm lost with the channel) is then stored twice, with the same MessageId. Errors that close the whole
// connection (501 for a frame larger than frame_max, 540 for immediate, 541 for a header
// value RabbitMQ cannot read) are refused before sending by validateMessage and
// headerTooLarge.

// refusalMemory is how long the Publisher refuses direct publishes to an exchange that the
// broker refused (403) without asking it again: permissions can be granted meanwhile.
const refusalMemory = 30 * time.Second

// refusals is what the broker refused or accepted, learnt from confirmed and refused
// publishes.
type refusals struct {
	mu      sync.Mutex
	refused map[string]refusal // exchange -> its 403, at most maxNames
	trusted nameSet            // exchanges a publish was confirmed on, on this connection
	// topicGuarded holds the exchanges on which the user has a topic permission (read through
	// the management API, or learnt from a topic refusal): every direct publish to one goes
	// alone on the serial channel. Kept across reconnections (permissions rarely change; a
	// guarded exchange costs only speed).
	topicGuarded nameSet
	// permitted holds the targets a delayed publish was permitted to on this connection
	// (permission.go): later delayed publishes to one ask again only when it is topicGuarded.
	permitted nameSet
	// topologies holds whether prefixes other than the Publisher's were found to have a delay
	// topology in the vhost (foreign.go), each answer for a while.
	topologies topologyAnswers

	bodyOK    atomic.Int64 // the largest body, in bytes, the broker has confirmed
	brokerMax atomic.Int64 // the broker's max_message_size learnt from a 406; 0: unknown
}

type refusal struct {
	err   *amqp.Error
	until time.Time
}

// earlier returns an error wrapping ErrAccessRefused when the broker refused a direct publish
// to exchange less than refusalMemory ago, or nil.
func (r *refusals) earlier(exchange string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	f, ok := r.refused[exchange]
	if !ok {
		return nil
	}
	if time.Now().After(f.until) {
		delete(r.refused, exchange)
		return nil
	}
	return fmt.Errorf("%w: RabbitMQ refused a publish to exchange %q less than %v ago (%d %s); nothing was sent: grant the user write "+
		"permission on it, or publish to an exchange that is not internal: %w", ErrAccessRefused, exchange, refusalMemory, f.err.Code, f.err.Reason, f.err)
}

func (r *refusals) isTrusted(exchange string) bool { return r.trusted.has(exchange) }

func (r *refusals) trust(exchange string) { r.trusted.add(exchange) }

func (r *refusals) untrust(exchange string) { r.trusted.remove(exchange) }

func (r *refusals) refuse(exchange string, ae *amqp.Error) {
	r.trusted.remove(exchange)
	r.mu.Lock()
	if r.refused == nil {
		r.refused = make(map[string]refusal)
	}
	if len(r.refused) < maxNames {
		r.refused[exchange] = refusal{err: ae, until: time.Now().Add(refusalMemory)}
	}
	r.mu.Unlock()
}

// forget drops what was learnt on a connection (trusted exchanges, the largest body taken):
// after a reconnection the broker, or the node, may have other permissions or limits. What was
// refused is kept for its refusalMemory.
func (r *refusals) forget() {
	r.trusted.clear()
	r.permitted.clear()
	r.topologies.clear()
	r.bodyOK.Store(0)
}

// mayBeRefused reports whether a publish of out to dest on path may meet a refusal that
// closes the channel and so must go on the serial channel: a publish to an exchange no publish
// was confirmed on yet on this connection, a body larger than any confirmed on it, or a
// UserId other than the connection's user, or a direct publish to an exchange on which the
// user has a topic permission.
func (p *Publisher) mayBeRefused(path Path, dest string, out *amqp.Publishing) bool {
	return !p.refusals.isTrusted(dest) ||
		path == PathDirect && p.refusals.topicGuarded.has(dest) ||
		int64(len(out.Body)) > p.refusals.bodyOK.Load() ||
		out.UserId != "" && out.UserId != p.user
}

// accepted records a confirmed publish: its body size and its exchange.
func (p *Publisher) accepted(path Path, dest string, bodyLen int) {
	p.refusals.trust(dest)
	for n := int64(bodyLen); ; {
		old := p.refusals.bodyOK.Load()
		if n <= old || p.refusals.bodyOK.CompareAndSwap(old, n) {
			return
		}
	}
}

// checkBodySize returns an error wrapping ErrInvalidInput when a body of n bytes is above
// Config.MaxMessageSize or the broker's max_message_size learnt from a refusal.
func (p *Publisher) checkBodySize(n int) error {
	limit, from := p.opts.maxBody, "Config.MaxMessageSize, default 16 MiB: RabbitMQ 4.x's default max_message_size"
	if b := p.refusals.brokerMax.Load(); b > 0 && b < int64(limit) {
		limit, from = int(b), "the broker's max_message_size, from its refusal of a larger message"
	}
	if n <= limit {
		return nil
	}
	return fmt.Errorf("%w: msg.Body is %d bytes, more than the largest message size of %d bytes (%s); RabbitMQ would close the "+
		"channel: send a smaller body, or raise the limit (Config.MaxMessageSize, and max_message_size in rabbitmq.conf)", ErrInvalidInput, n, limit, from)
}

var sizeRefusal = regexp.MustCompile(`message size (\d+) is larger than (?:configured )?max size (\d+)`)

// learn turns the error of a publish into what the caller gets, and learns from a refusal.
// On the serial channel a channel closed by a 403, 404 or 406 is the broker's answer to that
// publish alone (nothing was stored); elsewhere the outcome stays unknown (ErrConnectionLost),
// but a 403 naming an exchange makes the next direct publish to it go on the serial channel.
func (p *Publisher) learn(err error, serial bool, path Path, dest, key string, out *amqp.Publishing) error {
	var ae *amqp.Error
	if !errors.Is(err, ErrConnectionLost) || !errors.As(err, &ae) {
		return err
	}
	if ae.Code == amqp.AccessRefused && topicRefusal.MatchString(ae.Reason) {
		name, ok := quotedExchange(ae.Reason)
		if !ok {
			name = dest
		}
		p.refusals.topicGuarded.add(name) // from now on, direct publishes to it go alone
	}
	if !serial {
		switch ae.Code {
		case amqp.AccessRefused:
			if name, ok := quotedExchange(ae.Reason); ok {
				p.refusals.untrust(name)
			}
		case amqp.NotFound:
			if path == PathDirect {
				p.refusals.untrust(dest) // deleted since it took a publish: the next goes alone
			}
		}
		return err
	}
	switch ae.Code {
	case amqp.AccessRefused:
		if !topicRefusal.MatchString(ae.Reason) {
			p.refusals.refuse(dest, ae)
		}
		return fmt.Errorf("%w: RabbitMQ refused the publish to exchange %q with routing key %q (%s); nothing was stored: grant the "+
			"user write permission (and topic permission) on it, or publish to an exchange that is not internal: %w", ErrAccessRefused, dest, key, ae.Reason, ae)
	case amqp.NotFound:
		p.forgetExchange(dest)
		return fmt.Errorf("%w: exchange %q does not exist (RabbitMQ answered the publish with 404 NOT_FOUND); nothing was stored: "+
			"declare it, or correct the name: %w", ErrExchangeNotFound, dest, ae)
	case amqp.PreconditionFailed:
		if m := sizeRefusal.FindStringSubmatch(ae.Reason); m != nil {
			if limit, perr := strconv.ParseInt(m[2], 10, 64); perr == nil && limit > 0 {
				p.refusals.brokerMax.Store(limit)
			}
			return fmt.Errorf("%w: msg.Body is %d bytes and the broker's max_message_size is %s bytes (RabbitMQ answered 406); nothing "+
				"was stored, and larger bodies are now refused before sending: send a smaller body, or raise max_message_size: %w",
				ErrInvalidInput, len(out.Body), m[2], ae)
		}
		return fmt.Errorf("%w: RabbitMQ refused the message (%s); nothing was stored: correct the property it names: %w", ErrInvalidInput, ae.Reason, ae)
	}
	return err
}

// closedByRefusal reports whether err is a publish's ErrConnectionLost because RabbitMQ closed
// its channel (not the connection) with a soft error: a refusal of a basic.publish (403, 404,
// 406; AMQP 0-9-1's soft-error codes, which amqp091 marks Recover). The broker handles a
// channel's frames in order and ignores the publishes after the refused one, so any publish
// in flight on it may be the refused one, stored (sent before it, its confirm lost with the
// channel), or dropped (sent after it).
func closedByRefusal(err error) bool {
	var ae *amqp.Error
	return errors.Is(err, ErrConnectionLost) && errors.As(err, &ae) && ae.Server && ae.Recover
}

var (
	topicRefusal     = regexp.MustCompile(`access to topic '`)
	exchangeInReason = regexp.MustCompile(`exchange '((?:[^']|'[^ ])*)' in vhost`)
)

// urlUser returns the user name of an AMQP URL (amqp091's default, guest, when it has none),
// or "" when the URL does not parse.
func urlUser(raw string) string {
	u, err := amqp.ParseURI(raw)
	if err != nil {
		return ""
	}
	return u.Username
}

// quotedExchange returns the exchange a broker's reply text names ("exchange 'X' in vhost").
func quotedExchange(reason string) (string, bool) {
	m := exchangeInReason.FindStringSubmatch(reason)
	if m == nil {
		return "", false
	}
	return m[1], true
}
