package amqpdelay

import (
	"errors"
	"fmt"
	"regexp"
	"sync/atomic"

	amqp "github.com/rabbitmq/amqp091-go"
)

// RabbitMQ checks every basic.publish before routing it (rabbit_channel.erl,
// handle_method(#'basic.publish'{})) and answers a failed check by closing the channel (403 no
// write or topic permission, or an internal exchange; 404 no such exchange; 406 a body over
// max_message_size, a user_id of another user, an invalid expiration, delivery mode, CC or BCC),
// which fails every publish in flight there, outcome unknown. So a publish that may be refused
// (mayBeRefused) goes alone on the serial channel, where the refusal answers it alone (learn:
// ErrAccessRefused, ErrExchangeNotFound or ErrInvalidInput; nothing stored). A refusal that
// still closes a shared channel (an exchange deleted, or a permission taken away, after it took
// publishes) fails no publish either: every publish in flight there is sent again alone
// (closedByRefusal); one the broker had stored is then stored twice, with the same MessageId.
// What would close the whole connection (501 for a frame over frame_max or a short string over
// 255 bytes, 541 for a header value RabbitMQ cannot read) is refused before sending
// (validateMessage, headerTooLarge), and so are the 406s whose error should name the field.

// refusals is what the broker refused or accepted, learnt from confirmed and refused
// publishes.
type refusals struct {
	trusted nameSet // exchanges a publish was confirmed on, on this connection
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

	bodyOK atomic.Int64 // the largest body, in bytes, the broker has confirmed
}

// forget drops what was learnt on a connection (trusted exchanges, the largest body taken):
// after a reconnection the broker, or the node, may have other permissions or limits.
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
	return !p.refusals.trusted.has(dest) ||
		path == PathDirect && p.refusals.topicGuarded.has(dest) ||
		int64(len(out.Body)) > p.refusals.bodyOK.Load() ||
		out.UserId != "" && out.UserId != p.user
}

// accepted records a confirmed publish: its body size and its exchange.
func (p *Publisher) accepted(dest string, bodyLen int) {
	p.refusals.trusted.add(dest)
	for n := int64(bodyLen); ; {
		old := p.refusals.bodyOK.Load()
		if n <= old || p.refusals.bodyOK.CompareAndSwap(old, n) {
			return
		}
	}
}

// checkBodySize returns an error wrapping ErrInvalidInput when a body of n bytes is above
// Config.MaxMessageSize. A lower max_message_size of the broker's is its own refusal (406, on
// the serial channel: mayBeRefused).
func (p *Publisher) checkBodySize(n int) error {
	if limit := p.opts.maxBody; n > limit {
		return fmt.Errorf("%w: msg.Body is %d bytes, more than Config.MaxMessageSize of %d bytes (default 16 MiB: RabbitMQ 4.x's "+
			"default max_message_size): send a smaller body, or raise the limit (Config.MaxMessageSize, and max_message_size in "+
			"rabbitmq.conf)", ErrInvalidInput, n, limit)
	}
	return nil
}

var sizeRefusal = regexp.MustCompile(`message size (\d+) is larger than (?:configured )?max size (\d+)`)

// learn turns the error of a publish into what the caller gets, and learns from a refusal.
// On the serial channel a channel closed by a 403, 404 or 406 is the broker's answer to that
// publish alone (nothing was stored); elsewhere the outcome stays unknown (ErrConnectionLost),
// but a 403 naming an exchange makes the next direct publish to it go on the serial channel.
// An unroutable delayed publish's error names the damaged topology.
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
		p.refusals.topicGuarded.add(name) // from now on, direct publishes to it go alone
	}
	if !serial {
		switch ae.Code {
		case amqp.AccessRefused:
			if name, ok := quotedExchange(ae.Reason); ok {
				p.refusals.trusted.remove(name)
			}
		case amqp.NotFound:
			if path == PathDirect {
				p.refusals.trusted.remove(dest) // deleted since it took a publish: the next goes alone
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
