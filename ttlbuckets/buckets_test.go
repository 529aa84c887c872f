package ttlbuckets_test

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/delaykit/rabbitdelay/ttlbuckets"
)

func TestBuckets(t *testing.T) {
	b, err := ttlbuckets.NewBuckets(time.Minute, 5*time.Second, time.Hour, time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	want := []ttlbuckets.Bucket{
		{Delay: time.Millisecond, TTL: 1}, {Delay: 5 * time.Second, TTL: 5000},
		{Delay: time.Minute, TTL: 60000}, {Delay: time.Hour, TTL: 3600000},
	}
	if got := b.List(); !slices.Equal(got, want) || len(b.List()) != 4 {
		t.Fatalf("List() = %v (Len %d), want %v", got, len(b.List()), want)
	}
	b.List()[0].TTL = 99 // a copy
	if b.List()[0].TTL != 1 {
		t.Fatal("List() shares its slice")
	}
	for _, w := range want {
		if got, ok := b.Lookup(w.Delay); !ok || got != w {
			t.Errorf("Lookup(%v) = %v, %v", w.Delay, got, ok)
		}
	}
	for _, d := range []time.Duration{0, -time.Minute, time.Minute - 1, time.Minute + 1, 2 * time.Hour, time.Microsecond} {
		if got, ok := b.Lookup(d); ok || got != (ttlbuckets.Bucket{}) {
			t.Errorf("Lookup(%v) = %v, %v; want no match", d, got, ok)
		}
	}
	var zero ttlbuckets.Buckets
	if _, ok := zero.Lookup(time.Second); ok || len(zero.List()) != 0 {
		t.Error("zero Buckets is not empty")
	}
	if none, err := ttlbuckets.NewBuckets(); err != nil || len(none.List()) != 0 {
		t.Errorf("NewBuckets() = %v, %v", none, err)
	}
	maxDelay := time.Duration(ttlbuckets.MaxQueueTTL) * time.Millisecond
	if b, err := ttlbuckets.NewBuckets(maxDelay); err != nil || b.List()[0].TTL != ttlbuckets.MaxQueueTTL {
		t.Errorf("NewBuckets(MaxQueueTTL) = %v, %v", b, err)
	}
}

func TestNewBucketsErrors(t *testing.T) {
	maxDelay := time.Duration(ttlbuckets.MaxQueueTTL) * time.Millisecond
	for _, tc := range []struct {
		name   string
		delays []time.Duration
		want   []string
	}{
		{"zero", []time.Duration{0}, []string{"delay #0 0s: allowed 1ms to 87600h0m0s (315360000000 ms, RabbitMQ's x-message-ttl limit)"}},
		{"negative", []time.Duration{time.Second, -time.Second}, []string{"delay #1 -1s: allowed 1ms to"}},
		{"not whole ms", []time.Duration{1500 * time.Microsecond}, []string{"delay #0 1.5ms: allowed a whole number of milliseconds (x-message-ttl's resolution), 1ms to 315360000000 ms"}},
		{"below 1ms", []time.Duration{time.Nanosecond}, []string{"delay #0 1ns: allowed a whole number of milliseconds"}},
		{"above TTL limit", []time.Duration{maxDelay + time.Millisecond}, []string{"delay #0 87600h0m0.001s: allowed 1ms to 87600h0m0s"}},
		{"duplicate", []time.Duration{time.Second, time.Minute, 1000 * time.Millisecond}, []string{"delay #2 1s: duplicate of delay #0; allowed each delay once"}},
		{"triplicate", []time.Duration{time.Second, time.Second, time.Second}, []string{"delay #1 1s: duplicate of delay #0", "delay #2 1s: duplicate of delay #0"}},
		{"all at once", []time.Duration{0, time.Second, 1, time.Second, -1}, []string{"delay #0 0s", "delay #2 1ns", "delay #3 1s: duplicate of delay #1", "delay #4 -1ns"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, err := ttlbuckets.NewBuckets(tc.delays...)
			if !errors.Is(err, ttlbuckets.ErrInvalidBuckets) || len(b.List()) != 0 {
				t.Fatalf("NewBuckets = %v, %v; want ErrInvalidBuckets and an empty set", b, err)
			}
			errs := unwrapAll(err)
			if len(errs) != len(tc.want) {
				t.Fatalf("%d problems, want %d:\n%v", len(errs), len(tc.want), err)
			}
			for i, e := range errs {
				if !errors.Is(e, ttlbuckets.ErrInvalidBuckets) || !strings.HasPrefix(e.Error(), "ttlbuckets: invalid buckets: ") || !strings.Contains(e.Error(), tc.want[i]) {
					t.Errorf("problem %d = %q, want %q", i, e, tc.want[i])
				}
			}
		})
	}
}
