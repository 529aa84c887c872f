package plugin

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

func TestDelay(t *testing.T) {
	cases := []struct {
		d       time.Duration
		ms      int64
		rounded bool
		err     bool
	}{
		{d: time.Millisecond, ms: 1},
		{d: time.Nanosecond, ms: 1, rounded: true},
		{d: 1500*time.Millisecond + 1, ms: 1501, rounded: true},
		{d: 30 * 24 * time.Hour, ms: 2_592_000_000},
		{d: MaxDelay, ms: MaxDelayMs},
		{d: MaxDelay - time.Microsecond, ms: MaxDelayMs, rounded: true},
		{d: MaxDelay + 1, err: true},
		{d: 0, err: true},
		{d: -time.Second, err: true},
	}
	for _, c := range cases {
		ms, rounded, err := Delay(c.d)
		if c.err {
			if !errors.Is(err, ErrDelayOutOfRange) {
				t.Errorf("Delay(%v) error = %v, want ErrDelayOutOfRange", c.d, err)
			}
			continue
		}
		if err != nil || ms != c.ms || rounded != c.rounded {
			t.Errorf("Delay(%v) = %d, %v, %v; want %d, %v", c.d, ms, rounded, err, c.ms, c.rounded)
		}
	}
}

// TestSetDelayInt64: 30 days is 2,592,000,000 ms, above int32's maximum; a Go int would go on
// the wire as a signed 32-bit value and wrap negative, so the header must hold an int64.
func TestSetDelayInt64(t *testing.T) {
	h := amqp.Table{}
	ms, _, err := Delay(30 * 24 * time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	SetDelay(h, ms)
	v, ok := h[DelayHeader].(int64)
	if !ok || v != 2_592_000_000 {
		t.Fatalf("x-delay = %#v (%T), want int64(2592000000)", h[DelayHeader], h[DelayHeader])
	}
	if err := h.Validate(); err != nil {
		t.Fatal(err)
	}
}

func TestProbesRefuseNilContext(t *testing.T) {
	dial := func(context.Context) (*amqp.Connection, error) { t.Fatal("dialled"); return nil, nil }
	//lint:ignore SA1012 testing the nil check
	if _, err := ExchangeExists(nil, dial, "x"); err == nil { //nolint:staticcheck
		t.Error("ExchangeExists(nil ctx) succeeded")
	}
	if _, err := Probe(nil, dial, "p"); err == nil { //nolint:staticcheck
		t.Error("Probe(nil ctx) succeeded")
	}
}

func TestProbeReturnsDialError(t *testing.T) {
	boom := errors.New("boom")
	dial := func(context.Context) (*amqp.Connection, error) { return nil, boom }
	if _, err := ExchangeExists(context.Background(), dial, "x"); !errors.Is(err, boom) {
		t.Errorf("err = %v, want the dial error", err)
	}
	if _, err := Probe(context.Background(), dial, "p"); !errors.Is(err, boom) {
		t.Errorf("err = %v, want the dial error", err)
	}
}

// TestIsUnknownExchangeType: each version's answer to a declare of an unknown exchange type,
// as the broker sends it, and answers that are not it.
func TestIsUnknownExchangeType(t *testing.T) {
	cases := []struct {
		name string
		err  error
		want bool
	}{
		{"3.x connection error", &amqp.Error{Code: amqp.CommandInvalid, Reason: "COMMAND_INVALID - unknown exchange type 'x-delayed-message'"}, true},
		{"3.x seen as a closed channel", amqp.ErrClosed, true},
		{"4.x channel error", &amqp.Error{Code: amqp.PreconditionFailed, Reason: "PRECONDITION_FAILED - unknown exchange type 'x-delayed-message'"}, true},
		{"wrapped", fmt.Errorf("declare: %w", &amqp.Error{Code: amqp.PreconditionFailed, Reason: "PRECONDITION_FAILED - unknown exchange type 'x-delayed-message'"}), true},
		{"unregistered module", &amqp.Error{Code: amqp.NotAllowed, Reason: "NOT_ALLOWED - invalid exchange type 'x-delayed-message'"}, true},
		{"other 406", &amqp.Error{Code: amqp.PreconditionFailed, Reason: "PRECONDITION_FAILED - inequivalent arg 'durable'"}, false},
		{"access refused", &amqp.Error{Code: amqp.AccessRefused, Reason: "ACCESS_REFUSED - access to exchange 'x' refused"}, false},
		{"other error", errors.New("boom"), false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := IsUnknownExchangeType(tc.err); got != tc.want {
				t.Errorf("IsUnknownExchangeType(%v) = %v, want %v", tc.err, got, tc.want)
			}
		})
	}
}
