package plugin

import (
	"errors"
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
