package pluginprobe

import (
	"context"
	"errors"
	"fmt"
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"
)

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
