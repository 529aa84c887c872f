package amqpdelay

import (
	"context"
	"errors"
	"fmt"
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/delaykit/rabbitdelay/internal/route"
	"github.com/delaykit/rabbitdelay/plugin"
)

func TestOutcomeOf(t *testing.T) {
	for _, c := range []struct {
		err  error
		want publishOutcome
	}{
		{nil, outcomeConfirmed},
		{fmt.Errorf("x: %w", ErrNacked), outcomeNacked},
		{ErrUnroutable, outcomeUnroutable},
		{ErrInvalidInput, outcomeInvalid},
		{ErrUnknownTarget, outcomeInvalid},
		{ErrDelayTooLong, outcomeInvalid},
		{ErrPluginUnavailable, outcomeInvalid},
		{ErrAccessRefused, outcomeRefused},
		{ErrExchangeNotFound, outcomeRefused},
		{ErrConnectionLost, outcomeLost},
		{ErrClosed, outcomeClosed},
		{fmt.Errorf("amqpdelay: context ended: %w", context.DeadlineExceeded), outcomeCanceled},
		{context.Canceled, outcomeCanceled},
		{errors.New("something else"), outcomeFailed},
	} {
		if got := outcomeOf(c.err); got != c.want {
			t.Errorf("outcomeOf(%v) = %s, want %s", c.err, got, c.want)
		}
	}
}

func TestDeliveryPath(t *testing.T) {
	due := int64(1_700_000_000_000)
	for _, c := range []struct {
		name    string
		headers amqp.Table
		want    Path
		ok      bool
	}{
		{"not rabbitdelay's", amqp.Table{"x": "y"}, PathDirect, false},
		{"direct", amqp.Table{route.DueHeader: due}, PathDirect, true},
		{"bucket", amqp.Table{route.DueHeader: due, route.BucketHeader: int64(1000)}, PathBucket, true},
		{"ladder", amqp.Table{route.DueHeader: due, route.DigitHeader(0): int64(0), route.DigitHeader(1): int64(3)}, PathLadder, true},
		{"plugin", amqp.Table{route.DueHeader: due, plugin.DelayHeader: int64(5000)}, PathPlugin, true},
	} {
		got, ok := DeliveryPath(amqp.Delivery{Headers: c.headers})
		if got != c.want || ok != c.ok {
			t.Errorf("%s: DeliveryPath = %s, %v; want %s, %v", c.name, got, ok, c.want, c.ok)
		}
	}
}
