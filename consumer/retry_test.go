package consumer

import (
	"errors"
	"fmt"
	"testing"
	"time"
)

func TestBackoffDelay(t *testing.T) {
	b := Backoff{Initial: 100 * time.Millisecond, Max: time.Second, Multiplier: 2, NoJitter: true}
	for attempt, want := range map[int]time.Duration{0: 100 * time.Millisecond, 1: 100 * time.Millisecond, 2: 200 * time.Millisecond,
		3: 400 * time.Millisecond, 4: 800 * time.Millisecond, 5: time.Second, 100: time.Second, 5000: time.Second} {
		if got := b.Delay(attempt); got != want {
			t.Errorf("Delay(%d) = %v, want %v", attempt, got, want)
		}
	}
	j := Backoff{Initial: time.Second, Jitter: 0.5}
	for range 1000 {
		if d := j.Delay(1); d < 500*time.Millisecond || d > 1500*time.Millisecond {
			t.Fatalf("jittered delay %v outside 0.5s..1.5s", d)
		}
	}
	if d := (Backoff{Initial: time.Millisecond, Jitter: 1}).Delay(1); d < time.Millisecond {
		t.Fatalf("delay %v below 1ms", d)
	}
}

func TestBackoffValidate(t *testing.T) {
	for _, b := range []Backoff{
		{MaxAttempts: -1}, {Initial: time.Microsecond}, {Initial: time.Second, Max: time.Millisecond},
		{Multiplier: 0.5}, {Jitter: 1.5}, {Jitter: -0.1},
	} {
		if err := WithBackoff(b)(&options{}); !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("WithBackoff(%+v) = %v, want ErrInvalidConfig", b, err)
		}
	}
	o := options{}
	if err := WithBackoff(Backoff{})(&o); err != nil || o.backoff != DefaultBackoff {
		t.Errorf("zero Backoff = %+v, %v; want the defaults", o.backoff, err)
	}
}

func TestPermanent(t *testing.T) {
	base := errors.New("bad input")
	err := fmt.Errorf("handle order 42: %w", Permanent(base))
	if !IsPermanent(err) || !errors.Is(err, base) {
		t.Fatalf("IsPermanent/Is on %v", err)
	}
	if IsPermanent(base) || Permanent(nil) != nil {
		t.Fatal("plain error permanent, or Permanent(nil) not nil")
	}
}
