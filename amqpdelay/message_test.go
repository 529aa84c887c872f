package amqpdelay

import (
	"encoding/hex"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/delaykit/rabbitdelay/internal/route"
	"github.com/delaykit/rabbitdelay/plugin"
	"github.com/delaykit/rabbitdelay/ttlbuckets"
)

// retryHeaders is what a consumer re-publishing a delivery (a retry) typically sends back.
func retryHeaders() amqp.Table {
	return amqp.Table{
		"x-death":                []any{amqp.Table{"queue": "rabbitdelay.ladder.00.03", "reason": "expired", "count": int64(1)}},
		"x-first-death-queue":    "rabbitdelay.ladder.00.03",
		"x-first-death-reason":   "expired",
		"x-first-death-exchange": "rabbitdelay.ladder.00",
		"x-last-death-queue":     "rabbitdelay.ladder.01.02",
		"x-last-death-reason":    "expired",
		"x-last-death-exchange":  "rabbitdelay.ladder.01",
		"x-delay":                int32(-5000),
		route.DigitHeader(0):     int64(3),
		route.DigitHeader(9):     int64(7), // from a ladder with more levels
		route.TargetHeader:       "old-target",
		route.DueHeader:          int64(1),
		route.BucketHeader:       int64(30000),
		"tenant":                 "acme",
		"attempt":                int64(2),
		"x-custom":               "kept",
		"rabbitdelay-attempt":    int64(3), // a consumer's retry record: not a routing header
		"rabbitdelay-copy":       "c1",
	}
}

func TestBuildHeadersStripsDelayHeadersAndKeepsTheRest(t *testing.T) {
	l := ttlbuckets.Ladder{Order: ttlbuckets.ShortestFirst}.WithDefaults() // DecodeDigits reads back Digits; a top-split route carries its last hop's digit
	plan, err := l.Plan(90*time.Minute, ttlbuckets.Strict)
	if err != nil {
		t.Fatal(err)
	}
	due := time.UnixMilli(1_700_000_000_123)
	for _, c := range []choice{
		{path: PathLadder, plan: plan, effective: plan.Effective},
		{path: PathBucket, bucketTTL: 30000, effective: 30 * time.Second},
		{path: PathPlugin, pluginMs: 2_592_000_000, effective: 30 * 24 * time.Hour},
	} {
		t.Run(c.path.String(), func(t *testing.T) {
			in := retryHeaders()
			before := retryHeaders()
			out := buildHeaders(in, &c, l, "orders", due)
			if !reflect.DeepEqual(in, before) {
				t.Fatalf("caller's headers were modified:\n got %v\nwant %v", in, before)
			}
			for k := range out {
				if route.IsDelayHeader(k) {
					switch {
					case k == route.TargetHeader, k == route.DueHeader:
					case k == route.BucketHeader && c.path == PathBucket:
					case k == route.LastLevelHeader && c.path == PathLadder:
					case k == plugin.DelayHeader && c.path == PathPlugin:
					case len(k) > len("rabbitdelay-digit-") && k[:len("rabbitdelay-digit-")] == "rabbitdelay-digit-" && c.path == PathLadder:
					default:
						t.Errorf("stale delay header %q = %v kept", k, out[k])
					}
				}
			}
			for _, k := range []string{"tenant", "attempt", "x-custom", "rabbitdelay-attempt", "rabbitdelay-copy"} {
				if !reflect.DeepEqual(out[k], before[k]) {
					t.Errorf("header %q = %v, want %v (the caller's)", k, out[k], before[k])
				}
			}
			if out[route.TargetHeader] != "orders" {
				t.Errorf("target header = %v", out[route.TargetHeader])
			}
			if got, ok := out[route.DueHeader].(int64); !ok || got != 1_700_000_000_123 {
				t.Errorf("due header = %#v, want int64 1700000000123", out[route.DueHeader])
			}
			if err := out.Validate(); err != nil {
				t.Errorf("headers do not encode: %v", err)
			}
			switch c.path {
			case PathLadder:
				digits, err := route.DecodeDigits(l, out)
				if err != nil || !reflect.DeepEqual(digits, plan.Digits) {
					t.Errorf("digits = %v, %v; want %v", digits, err, plan.Digits)
				}
				if _, ok := out[route.DigitHeader(9)]; ok {
					t.Errorf("stale digit of level 9 kept")
				}
				if v, has := out[route.LastLevelHeader]; !has || v != int64(route.LastLevel(plan)) {
					t.Errorf("last-level header %v (present %v), want int64 %d", v, has, route.LastLevel(plan))
				}
			case PathBucket:
				if v, ok := out[route.BucketHeader].(int64); !ok || v != 30000 {
					t.Errorf("bucket header = %#v, want int64 30000", out[route.BucketHeader])
				}
			}
		})
	}
}

// TestPluginDelayHeaderIsInt64 checks the built headers: 30 days is 2,592,000,000 ms, which a Go
// int would send as a negative 32-bit value.
func TestPluginDelayHeaderIsInt64(t *testing.T) {
	c, err := chooser{ladder: ttlbuckets.Ladder{}.WithDefaults(), strategy: PluginOnly, pluginOK: true}.choose(30 * 24 * time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	out := buildHeaders(amqp.Table{"x-delay": 5}, &c, ttlbuckets.Ladder{}.WithDefaults(), "orders", time.Now())
	v, ok := out[plugin.DelayHeader].(int64)
	if !ok || v != 2_592_000_000 {
		t.Fatalf("x-delay = %#v (%T), want int64(2592000000)", out[plugin.DelayHeader], out[plugin.DelayHeader])
	}
}

func TestDirectHeadersKeepCallerHeaders(t *testing.T) {
	in := retryHeaders()
	c := choice{path: PathDirect}
	now := time.UnixMilli(1_700_000_000_000)
	out := buildHeaders(in, &c, ttlbuckets.Ladder{}.WithDefaults(), "orders", now)
	if _, ok := out["x-death"]; !ok {
		t.Error("direct path dropped x-death: a direct publish is the caller's message as given")
	}
	if _, ok := out[route.TargetHeader]; ok {
		t.Error("direct path kept a stale target header")
	}
	if _, ok := out[route.DigitHeader(0)]; ok {
		t.Error("direct path kept a stale digit header")
	}
	if due, ok := Due(amqp.Delivery{Headers: out}); !ok || !due.Equal(now) {
		t.Errorf("due = %v, %v; want %v", due, ok, now)
	}
	if !reflect.DeepEqual(in, retryHeaders()) {
		t.Error("caller's headers modified")
	}
	// nil headers get a table with the due time only.
	out = buildHeaders(nil, &c, ttlbuckets.Ladder{}.WithDefaults(), "orders", now)
	if len(out) != 1 {
		t.Errorf("headers for a message without headers = %v", out)
	}
}

func TestDue(t *testing.T) {
	want := time.UnixMilli(1_700_000_000_123)
	for _, v := range []any{int64(1_700_000_000_123), int(1_700_000_000_123), uint64(1_700_000_000_123)} {
		got, ok := Due(amqp.Delivery{Headers: amqp.Table{route.DueHeader: v}})
		if !ok || !got.Equal(want) {
			t.Errorf("Due(%T) = %v, %v; want %v", v, got, ok, want)
		}
	}
	if got, ok := Due(amqp.Delivery{Headers: amqp.Table{route.DueHeader: int32(1000)}}); !ok || got.UnixMilli() != 1000 {
		t.Errorf("Due(int32) = %v, %v", got, ok)
	}
	for _, h := range []amqp.Table{nil, {}, {route.DueHeader: "1700000000123"}, {route.DueHeader: 1.5}, {route.DueHeader: uint64(1 << 63)}} {
		if got, ok := Due(amqp.Delivery{Headers: h}); ok {
			t.Errorf("Due(%v) = %v, true; want false", h, got)
		}
	}
}

func BenchmarkBuildHeadersLadder(b *testing.B) {
	l := ttlbuckets.Ladder{}.WithDefaults()
	h := amqp.Table{"tenant": "acme"}
	now := time.Now()
	b.ReportAllocs()
	for b.Loop() {
		c, _ := chooser{ladder: l}.choose(90 * time.Minute)
		_ = buildHeaders(h, &c, l, "orders", now)
	}
}

// TestGeneratedIDs: the Publisher's message ids are version-4 UUIDs and its copy tags 16 hex
// digits (a fixed length: the frame_max checks rely on it), none repeated over many calls from
// many goroutines.
func TestGeneratedIDs(t *testing.T) {
	const goroutines, each = 8, 2000
	ids := make(chan [2]string, goroutines*each)
	var wg sync.WaitGroup
	for range goroutines {
		wg.Go(func() {
			for range each {
				ids <- [2]string{newMessageID(), newCopyTag()}
			}
		})
	}
	wg.Wait()
	close(ids)
	seen := make(map[string]bool, 2*goroutines*each)
	for pair := range ids {
		id, tag := pair[0], pair[1]
		u, err := uuid.Parse(id)
		if err != nil || u.Version() != 4 || u.Variant() != uuid.RFC4122 || len(id) != 36 {
			t.Fatalf("message id %q: not a version-4 UUID (%v)", id, err)
		}
		if _, err := hex.DecodeString(tag); err != nil || len(tag) != 16 {
			t.Fatalf("copy tag %q: want 16 hex digits", tag)
		}
		if seen[id] || seen[tag] {
			t.Fatalf("repeated: %q / %q", id, tag)
		}
		seen[id], seen[tag] = true, true
	}
}
