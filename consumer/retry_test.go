package consumer

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/delaykit/rabbitdelay/amqpdelay"
	"github.com/delaykit/rabbitdelay/ttlbuckets"
)

func TestBackoffDelay(t *testing.T) {
	b := Backoff{Initial: 100 * time.Millisecond, Max: time.Second, Multiplier: 2, NoJitter: true}
	for attempt, want := range map[int]time.Duration{0: 100 * time.Millisecond, 1: 100 * time.Millisecond, 2: 200 * time.Millisecond,
		3: 400 * time.Millisecond, 4: 800 * time.Millisecond, 5: time.Second, 100: time.Second, 5000: time.Second} {
		if got := b.delay(attempt); got != want {
			t.Errorf("Delay(%d) = %v, want %v", attempt, got, want)
		}
	}
	j := Backoff{Initial: time.Second, Jitter: 0.5}
	for range 1000 {
		if d := j.delay(1); d < 500*time.Millisecond || d > 1500*time.Millisecond {
			t.Fatalf("jittered delay %v outside 0.5s..1.5s", d)
		}
	}
	if d := (Backoff{Initial: time.Millisecond, Jitter: 1}).delay(1); d < time.Millisecond {
		t.Fatalf("delay %v below 1ms", d)
	}
}

func TestBackoffValidate(t *testing.T) {
	for _, b := range []Backoff{
		{MaxAttempts: -1}, {Initial: time.Microsecond}, {Initial: time.Second, Max: time.Millisecond},
		{Multiplier: 0.5}, {Jitter: 1.5}, {Jitter: -0.1},
	} {
		if _, err := (Options{Backoff: b}).resolve(); !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("Options.Backoff %+v: %v, want ErrInvalidConfig", b, err)
		}
	}
	// Every bad field is named at once.
	_, err := Options{Backoff: Backoff{MaxAttempts: -1, Initial: -1, Multiplier: math.NaN(), Jitter: 5}}.resolve()
	for _, want := range []string{"Backoff.MaxAttempts -1", "Backoff.Initial -1ns", "Backoff.Multiplier NaN", "Backoff.Jitter 5"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("four bad Backoff fields: %v; want %q named", err, want)
		}
	}
	o, err := Options{Backoff: Backoff{}}.resolve()
	if err != nil || o.Backoff != DefaultBackoff {
		t.Errorf("zero Backoff = %+v, %v; want the defaults", o.Backoff, err)
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

// TestBackoffRefused: every kind of back-off setting out of range, or that would overflow, is
// refused by New, or by Run once it knows the topology's ladder (newOn), with ErrInvalidConfig and an error naming the option and the allowed range.
// Before, a Max near the largest time.Duration passed New's ladder check (Max x (1+Jitter)
// wrapped negative) and its retries waited 1 ms or failed to publish, without end.
func TestBackoffRefused(t *testing.T) {
	cfg := ttlbuckets.DefaultMax      // the default ladder's maximum: 2^32-1 ms
	short := 65535 * time.Millisecond // a ladder of radix 16 and 4 levels
	for _, tc := range []struct {
		name string
		cfg  time.Duration // the ladder's maximum
		opts Options
		want []string // in the error
	}{
		{"max beyond the ladder", cfg, Options{Backoff: Backoff{Max: 60 * 24 * time.Hour}}, []string{"Backoff.Max 1440h0m0s", "want Backoff.Max from"}},
		{"max with jitter beyond the ladder", cfg, Options{Backoff: Backoff{Max: 40 * 24 * time.Hour, Jitter: 0.5}},
			[]string{"Backoff.Max 960h0m0s with Jitter 0.5 waits up to 1440h0m0s", "to 795h"}},
		{"max x (1+jitter) overflowing a Duration", cfg, Options{Backoff: Backoff{Initial: time.Second, Max: time.Duration(math.MaxInt64 / 3 * 2), Jitter: 1}},
			[]string{"Backoff.Max", "want at most the topology's ladder maximum"}},
		{"max at the largest Duration", cfg, Options{Backoff: Backoff{Max: time.Duration(math.MaxInt64)}}, []string{"Backoff.Max"}},
		{"max beyond a short ladder", short, Options{Backoff: Backoff{Max: 2 * time.Minute}}, []string{"beyond 1m5.535s", "the topology's ladder carries"}},
		{"initial beyond the ladder", short, Options{Backoff: Backoff{Initial: time.Hour}}, []string{"Backoff.Max 1h0m0s", "beyond 1m5.535s"}},
		{"min above max", cfg, Options{Backoff: Backoff{Initial: time.Minute, Max: time.Second}}, []string{"Backoff.Max 1s below Backoff.Initial 1m0s"}},
		{"negative initial", cfg, Options{Backoff: Backoff{Initial: -time.Second}}, []string{"Backoff.Initial -1s: want 1ms or more"}},
		{"initial below 1 ms", cfg, Options{Backoff: Backoff{Initial: time.Microsecond}}, []string{"Backoff.Initial 1µs: want 1ms or more"}},
		{"negative max", cfg, Options{Backoff: Backoff{Max: -time.Second}}, []string{"Backoff.Max -1s below Backoff.Initial"}},
		{"negative attempts", cfg, Options{Backoff: Backoff{MaxAttempts: -1}}, []string{"Backoff.MaxAttempts -1: want 1 to 10000"}},
		{"too many attempts", cfg, Options{Backoff: Backoff{MaxAttempts: MaxBackoffAttempts + 1}}, []string{"Backoff.MaxAttempts 10001: want 1 to 10000"}},
		{"multiplier below 1", cfg, Options{Backoff: Backoff{Multiplier: 0.5}}, []string{"Backoff.Multiplier 0.5: want a finite number, 1 or more"}},
		{"negative multiplier", cfg, Options{Backoff: Backoff{Multiplier: -2}}, []string{"Backoff.Multiplier -2"}},
		{"infinite multiplier", cfg, Options{Backoff: Backoff{Multiplier: math.Inf(1)}}, []string{"Backoff.Multiplier +Inf"}},
		{"NaN multiplier", cfg, Options{Backoff: Backoff{Multiplier: math.NaN()}}, []string{"Backoff.Multiplier NaN"}},
		{"negative jitter", cfg, Options{Backoff: Backoff{Jitter: -0.1}}, []string{"Backoff.Jitter -0.1: want 0 to 1"}},
		{"jitter above 1", cfg, Options{Backoff: Backoff{Jitter: 1.5}}, []string{"Backoff.Jitter 1.5: want 0 to 1"}},
		{"NaN jitter", cfg, Options{Backoff: Backoff{Jitter: math.NaN()}}, []string{"Backoff.Jitter NaN"}},
		{"infinite jitter", cfg, Options{Backoff: Backoff{Jitter: math.Inf(1)}}, []string{"Backoff.Jitter +Inf"}},
		{"busy delay beyond the ladder", short, Options{BusyDelay: 2 * time.Minute}, []string{"Options.BusyDelay 2m0s: want 1ms to 1m5.535s"}},
		{"busy delay below 1 ms", cfg, Options{BusyDelay: time.Microsecond}, []string{"Options.BusyDelay 1µs: want 1ms or more"}},
		{"reconnect max beyond an hour", cfg, Options{ReconnectMin: time.Second, ReconnectMax: time.Duration(math.MaxInt64)},
			[]string{"Options.ReconnectMax", "want 0 < ReconnectMin <= ReconnectMax <= 1h0m0s"}},
		{"reconnect min above max", cfg, Options{ReconnectMin: time.Minute, ReconnectMax: time.Second}, []string{"want 0 < ReconnectMin <= ReconnectMax"}},
		{"reconnect min negative", cfg, Options{ReconnectMin: -time.Second, ReconnectMax: time.Second}, []string{"want 0 < ReconnectMin <= ReconnectMax"}},
		{"reconnect min beyond an hour", cfg, Options{ReconnectMin: 2 * time.Hour}, []string{"Options.ReconnectMin 2h0m0s"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := newOn(tc.cfg, tc.opts)
			if !errors.Is(err, ErrInvalidConfig) {
				t.Fatalf("New = %v, want ErrInvalidConfig", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
		})
	}
	// The edges of the ranges are accepted.
	for _, opts := range []Options{
		{Backoff: Backoff{Max: ttlbuckets.DefaultMax, NoJitter: true}},
		{Backoff: Backoff{Max: time.Duration(float64(ttlbuckets.DefaultMax) / 1.2)}},
		{Backoff: Backoff{MaxAttempts: MaxBackoffAttempts, Initial: time.Millisecond, Max: time.Millisecond, Multiplier: 1, Jitter: 1}},
		{BusyDelay: ttlbuckets.DefaultMax},
		{ReconnectMin: time.Millisecond, ReconnectMax: MaxReconnectBackoff},
	} {
		if _, err := newOn(cfg, opts); err != nil {
			t.Errorf("New with a setting at the edge of its range: %v", err)
		}
	}
	// A lease so long that the default busy delay (a quarter of it) is beyond a short ladder:
	// the default is lowered to fit, not refused.
	c, err := newOn(short, Options{Lease: time.Hour, Keep: 2 * time.Hour})
	if err != nil || c.o.BusyDelay != short {
		t.Errorf("New with a long lease on a short ladder: busy delay %v, %v; want %v", c.o.BusyDelay, err, short)
	}
}

// TestBackoffDelayBounded: delay stays within [1 ms, Max x (1+Jitter)] for every attempt,
// including growth that would overflow a Duration (a multiplier of 1e300, attempt numbers up to
// the largest int) and a Backoff New never checked (delay brings it into range): never a
// negative or zero wait, which would make the retries loop.
func TestBackoffDelayBounded(t *testing.T) {
	for _, b := range []Backoff{
		{Initial: time.Second, Max: 40 * 24 * time.Hour, Multiplier: 1e300, Jitter: 0.2},
		{Initial: time.Second, Max: time.Hour, Multiplier: 10, Jitter: 1},
		{Initial: time.Millisecond, Max: time.Hour, Multiplier: 1.0000001, NoJitter: true},
		{Initial: time.Second, Max: time.Duration(math.MaxInt64), Multiplier: 2, Jitter: 1},  // unchecked
		{Initial: -time.Second, Max: -time.Hour, Multiplier: math.NaN(), Jitter: math.NaN()}, // unchecked
		{Initial: time.Second, Max: time.Minute, Multiplier: math.Inf(1), Jitter: math.Inf(1)},
	} {
		c := b.withDefaults().clamp()
		hi := time.Duration(c.longest())
		for _, attempt := range []int{math.MinInt, -1, 0, 1, 2, 3, 10, 64, 1000, MaxBackoffAttempts, math.MaxInt} {
			for range 20 {
				if d := b.delay(attempt); d < time.Millisecond || d > hi+1 {
					t.Fatalf("%+v: Delay(%d) = %v, want 1ms to %v", b, attempt, d, hi)
				}
			}
		}
	}
	// Growth reaches Max and stays there.
	b := Backoff{Initial: time.Second, Max: 40 * 24 * time.Hour, Multiplier: 1e300, NoJitter: true}
	if d2, dMax := b.delay(2), b.delay(math.MaxInt); d2 != b.Max || dMax != b.Max {
		t.Errorf("Delay(2) = %v, Delay(MaxInt) = %v, want Max %v", d2, dMax, b.Max)
	}
	if d := (Backoff{Initial: time.Millisecond, Max: time.Hour, Multiplier: 1.5, NoJitter: true}).delay(4); d != 3375*time.Microsecond {
		t.Errorf("Delay(4) with 1ms x 1.5^3 = %v, want 3.375ms", d)
	}
}

// newOn is New, then the fitting of the waits to a topology whose ladder carries at most m, as
// Run does once it has read the topology.
func newOn(m time.Duration, opts Options) (*Consumer, error) {
	c, err := New(amqpdelay.Config{}, "q", noop, opts)
	if err != nil {
		return nil, err
	}
	if err := c.o.fitWaits(m); err != nil {
		return nil, err
	}
	return c, nil
}
