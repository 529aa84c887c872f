package revoke

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/delaykit/rabbitdelay/amqpdelay"
)

// TestOptions: the zero Options give the defaults, a negative Bound means none, and a Bound
// above a minute is refused with ErrInvalidConfig naming the field.
func TestOptions(t *testing.T) {
	o, err := Options{}.resolve()
	if err != nil || o.Bound != DefaultBound || o.ConnectionName != "rabbitdelay-revocations" {
		t.Errorf("zero Options: %+v, %v", o, err)
	}
	if o, err := (Options{Bound: -1, ConnectionName: "c"}).resolve(); err != nil || o.Bound != 0 || o.ConnectionName != "c" {
		t.Errorf("Bound -1: %+v, %v; want bound 0", o, err)
	}
	if o, err := (Options{Bound: time.Minute}).resolve(); err != nil || o.Bound != time.Minute {
		t.Errorf("Bound 1m: %+v, %v", o, err)
	}
	_, err = New(context.Background(), amqpdelay.Config{}, Options{Bound: time.Minute + 1})
	if !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), "Options.Bound") {
		t.Errorf("Bound above 1m: %v, want ErrInvalidConfig naming Options.Bound", err)
	}
}
