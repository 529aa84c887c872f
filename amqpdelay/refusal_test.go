package amqpdelay

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"
)

// lost wraps a broker's close as pubChan.publish reports it: amqp091 marks a close the broker
// sent Server, and Recover when its code is one of AMQP 0-9-1's soft errors (a channel close).
func lost(code int, reason string) error {
	soft := false
	switch code {
	case 311, 312, 313, 403, 404, 405, 406:
		soft = true
	}
	return fmt.Errorf("%w (exchange %q, routing key %q): %w", ErrConnectionLost, "x", "k", &amqp.Error{Code: code, Reason: reason, Server: true, Recover: soft})
}

// TestLearn: on the serial channel each refusal becomes its own sentinel and is learnt; on a
// shared channel the outcome stays unknown.
func TestLearn(t *testing.T) {
	cases := []struct {
		name   string
		serial bool
		path   Path
		err    error
		want   error
		text   string // the error names it
		check  func(t *testing.T, p *Publisher)
	}{
		{name: "internal exchange", serial: true, path: PathDirect,
			err: lost(amqp.AccessRefused, "ACCESS_REFUSED - cannot publish to internal exchange 'x' in vhost '/'"), want: ErrAccessRefused,
			check: func(t *testing.T, p *Publisher) {
				if p.refusals.trusted.has("x") {
					t.Error("the refused exchange stays trusted: the next publish to it would share a channel")
				}
			}},
		{name: "topic permission", serial: true, path: PathDirect,
			err: lost(amqp.AccessRefused, "ACCESS_REFUSED - write access to topic 'k' in exchange 'x' in vhost '/' refused for user 'u'"), want: ErrAccessRefused,
			check: func(t *testing.T, p *Publisher) {
				if !p.refusals.topicGuarded.has("x") {
					t.Error("a topic refusal did not make the exchange's direct publishes go alone")
				}
			}},
		{name: "missing exchange", serial: true, path: PathDirect,
			err: lost(amqp.NotFound, "NOT_FOUND - no exchange 'x' in vhost '/'"), want: ErrExchangeNotFound},
		{name: "size", serial: true, path: PathLadder,
			err: lost(amqp.PreconditionFailed, "PRECONDITION_FAILED - message size 20000000 is larger than configured max size 16777216"), want: ErrInvalidInput,
			text: "max_message_size is 16777216"},
		{name: "user_id", serial: true, path: PathLadder,
			err: lost(amqp.PreconditionFailed, "PRECONDITION_FAILED - user_id property set to 'a' but authenticated user was 'b'"), want: ErrInvalidInput},
		{name: "shared channel keeps the outcome unknown", serial: false, path: PathDirect,
			err: lost(amqp.AccessRefused, "ACCESS_REFUSED - access to exchange 'y' in vhost '/' refused for user 'u'"), want: ErrConnectionLost,
			check: func(t *testing.T, p *Publisher) {
				if p.refusals.trusted.has("y") {
					t.Error("an exchange named in a 403 stays trusted")
				}
			}},
		{name: "connection loss on the serial channel", serial: true, path: PathDirect,
			err: fmt.Errorf("%w: %w", ErrConnectionLost, amqp.ErrClosed), want: ErrConnectionLost},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := &Publisher{}
			p.refusals.trusted.add("y")
			err := p.learn(tc.err, tc.serial, tc.path, "x", "k", &amqp.Publishing{Body: make([]byte, 10)})
			if !errors.Is(err, tc.want) {
				t.Fatalf("learn: %v, want %v", err, tc.want)
			}
			if !strings.Contains(err.Error(), tc.text) {
				t.Errorf("learn: %v, want it to name %q", err, tc.text)
			}
			if tc.want != ErrConnectionLost && errors.Is(err, ErrConnectionLost) {
				t.Errorf("a refusal on the serial channel reads as an unknown outcome: %v", err)
			}
			if tc.check != nil {
				tc.check(t, p)
			}
		})
	}
}

// TestMayBeRefused: which publishes go on the serial channel.
func TestMayBeRefused(t *testing.T) {
	p := &Publisher{user: "svc"}
	p.refusals.bodyOK.Store(100)
	for _, x := range []string{"orders", "rd.ladder.03", "rd.buckets"} {
		p.refusals.trusted.add(x)
	}
	cases := []struct {
		name string
		path Path
		dest string
		msg  amqp.Publishing
		want bool
	}{
		{"delayed, small", PathLadder, "rd.ladder.03", amqp.Publishing{Body: make([]byte, 100)}, false},
		{"delayed, larger than any taken", PathLadder, "rd.ladder.03", amqp.Publishing{Body: make([]byte, 101)}, true},
		{"direct to a trusted exchange", PathDirect, "orders", amqp.Publishing{}, false},
		{"direct to a new exchange", PathDirect, "billing", amqp.Publishing{}, true},
		{"own user id", PathBucket, "rd.buckets", amqp.Publishing{UserId: "svc"}, false},
		{"delayed, to an entry exchange not yet taken", PathLadder, "rd.ladder.05", amqp.Publishing{}, true},
		{"another user id", PathBucket, "rd.buckets", amqp.Publishing{UserId: "admin"}, true},
	}
	for _, tc := range cases {
		if got := p.mayBeRefused(tc.path, tc.dest, &tc.msg); got != tc.want {
			t.Errorf("%s: mayBeRefused = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestForgetOnReconnect: what was learnt on one connection (trusted exchanges, the largest body
// taken) is forgotten on the next; the exchanges with a topic permission are kept.
func TestForgetOnReconnect(t *testing.T) {
	var r refusals
	r.trusted.add("orders")
	r.bodyOK.Store(1 << 20)
	r.topicGuarded.add("topic")
	r.forget()
	if r.trusted.has("orders") || r.bodyOK.Load() != 0 {
		t.Error("forget kept what the last connection learnt")
	}
	if !r.topicGuarded.has("topic") {
		t.Error("forget dropped an exchange with a topic permission")
	}
}

func TestClosedByRefusal(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"404 channel close", lost(amqp.NotFound, "NOT_FOUND - no exchange 'x' in vhost '/'"), true},
		{"403 channel close", lost(amqp.AccessRefused, "ACCESS_REFUSED - access to topic 'k' in exchange 'x' in vhost '/' refused for user 'u'"), true},
		{"406 channel close", lost(amqp.PreconditionFailed, "PRECONDITION_FAILED - invalid expiration"), true},
		{"connection forced (hard error)", lost(amqp.ConnectionForced, "CONNECTION_FORCED - broker forced connection closure"), false},
		{"connection gone", fmt.Errorf("%w: %w", ErrConnectionLost, amqp.ErrClosed), false},
		{"a 404 not from the broker", fmt.Errorf("%w: %w", ErrConnectionLost, &amqp.Error{Code: amqp.NotFound, Recover: true}), false},
		{"a refusal answered alone", fmt.Errorf("%w: %w", ErrExchangeNotFound, &amqp.Error{Code: amqp.NotFound, Recover: true, Server: true}), false},
	} {
		if got := closedByRefusal(tc.err); got != tc.want {
			t.Errorf("%s: closedByRefusal = %v, want %v", tc.name, got, tc.want)
		}
	}
}
