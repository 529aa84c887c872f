package consumer

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/delaykit/rabbitdelay/amqpdelay"
	"github.com/delaykit/rabbitdelay/internal/amqpconn"
	"github.com/delaykit/rabbitdelay/internal/route"
)

func noop(context.Context, amqp.Delivery) error { return nil }

func TestNewValidates(t *testing.T) {
	cfg := amqpdelay.Config{}
	_, err := New(cfg, "", nil, Options{Concurrency: -1, Lease: time.Millisecond, Keep: time.Hour, SettleTimeout: time.Microsecond,
		HandlerTimeout: -time.Second, Store: &MemoryStore{}, NoStore: true})
	if !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("err = %v, want ErrInvalidConfig", err)
	}
	for _, want := range []string{"queue name", "nil handler", "Options.Concurrency -1", "Options.Lease 1ms", "Options.SettleTimeout 1µs",
		"Options.HandlerTimeout -1s", "Options.NoStore with a Store"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %q", err, want)
		}
	}
	short := 65535 * time.Millisecond // a ladder of radix 16 and 4 levels
	if _, err := newOn(short, Options{Backoff: Backoff{Max: time.Hour}}); !errors.Is(err, ErrInvalidConfig) ||
		!strings.Contains(err.Error(), "the topology's ladder carries") {
		t.Errorf("a back-off beyond the ladder: %v", err)
	}
	c, err := newOn(short, Options{}) // the default back-off is lowered to fit
	if err != nil {
		t.Fatal(err)
	}
	if c.o.SettleTimeout != DefaultSettleTimeout {
		t.Errorf("default settle timeout %v, want %v", c.o.SettleTimeout, DefaultSettleTimeout)
	}
	if c2, err := newOn(short, Options{SettleTimeout: 2 * time.Second}); err != nil || c2.o.SettleTimeout != 2*time.Second {
		t.Errorf("Options.SettleTimeout 2s: err %v", err)
	}
	// The zero value of each field is its default; a negative shutdown timeout is none, and
	// NoStore turns deduplication off.
	if c.o.Concurrency != DefaultConcurrency || c.o.Lease != DefaultLease || c.o.Keep != DefaultKeep || c.o.ShutdownTimeout != DefaultShutdownTimeout ||
		c.o.ConnectionName != "rabbitdelay-consumer" || c.o.ReconnectMin != amqpconn.DefaultReconnectMin ||
		c.o.ReconnectMax != amqpconn.DefaultReconnectMax || c.o.NoRetryBinding || c.o.NoRevocations ||
		c.o.IDFunc == nil || c.o.HandlerTimeout != 0 {
		t.Errorf("Options{} resolved to %+v, want the defaults", c.o)
	}
	if _, ok := c.o.Store.(*MemoryStore); !ok {
		t.Errorf("Options{}: store %T, want a *MemoryStore", c.o.Store)
	}
	c3, err := New(cfg, "q", noop, Options{ShutdownTimeout: -1, NoStore: true, Lease: 48 * time.Hour, ReconnectMin: 10 * time.Second})
	if err != nil || c3.o.ShutdownTimeout != 0 || c3.o.Store != nil || c3.o.Keep != 48*time.Hour || c3.o.ReconnectMax != 10*time.Second {
		t.Errorf("Options{ShutdownTimeout: -1, NoStore: true, Lease: 48h, ReconnectMin: 10s}: %+v, store %v, %v", c3.o, c3.o.Store, err)
	}
	if longest := time.Duration(float64(c.o.Backoff.Max) * (1 + c.o.Backoff.Jitter)); longest > 65535*time.Millisecond {
		t.Errorf("default back-off reaches %v beyond the ladder", longest)
	}
	if err := c.Run(nil); !errors.Is(err, ErrInvalidConfig) { //nolint:staticcheck // a nil context is refused
		t.Errorf("Run(nil) = %v", err)
	}
}

func TestRestoreAndHeaders(t *testing.T) {
	c := &Consumer{queue: "work"}
	orig := amqp.Table{route.TargetHeader: "orders", route.DueHeader: int64(1234), "app": "x"}
	h := c.failureHeaders(orig, "o.1", Info{}, errors.New(strings.Repeat("e", 2000)), time.UnixMilli(5000))
	if h[HeaderRoutingKey] != "o.1" || h[HeaderTarget] != "orders" || h[HeaderDue] != int64(1234) || h[HeaderQueue] != "work" ||
		h[HeaderFirstFailure] != int64(5000) || len(h[HeaderError].(string)) != MaxErrorLen || h["app"] != "x" {
		t.Fatalf("failure headers %v", h)
	}
	// A retry of a retry keeps the first values.
	h2 := c.failureHeaders(amqp.Table(h), "work", Info{}, errors.New("again"), time.UnixMilli(9000))
	if h2[HeaderRoutingKey] != "o.1" || h2[HeaderFirstFailure] != int64(5000) || h2[HeaderLastFailure] != int64(9000) {
		t.Fatalf("second failure headers %v", h2)
	}
	d := amqp.Delivery{RoutingKey: "work", Headers: amqp.Table{HeaderRoutingKey: "o.1", HeaderTarget: "", route.TargetHeader: "rabbitdelay.retry"}}
	restore(&d)
	if d.RoutingKey != "o.1" {
		t.Errorf("routing key %q", d.RoutingKey)
	}
	if _, ok := d.Headers[route.TargetHeader]; ok {
		t.Errorf("target header kept although the first delivery had none: %v", d.Headers)
	}
	r := replayHeaders(amqp.Table(h2))
	for _, k := range []string{HeaderAttempt, HeaderError, HeaderFirstFailure, HeaderQueue} {
		if _, ok := r[k]; ok {
			t.Errorf("replayed headers keep %s", k)
		}
	}
	if r[HeaderRoutingKey] != "o.1" || r[HeaderReplayed] == nil {
		t.Errorf("replayed headers %v", r)
	}
}

// TestSettlePublishTimeout: when the settle timeout ends, settlePublish's error names both why
// the publishes failed and the timeout, whether the timeout ended during a back-off wait or
// during a publish that then returned ctx's error.
func TestSettlePublishTimeout(t *testing.T) {
	c := &Consumer{o: options{Options: Options{Logger: zerolog.Nop()}}}
	for _, tc := range []struct {
		name    string
		publish func(ctx context.Context, n int) error
	}{
		{"ends in a wait", func(context.Context, int) error { return amqpdelay.ErrUnroutable }},
		{"ends in a publish", func(ctx context.Context, n int) error {
			if n == 1 {
				return amqpdelay.ErrUnroutable
			}
			<-ctx.Done()
			return fmt.Errorf("publish: %w", ctx.Err())
		}},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		n := 0
		_, err := c.settlePublish(ctx, Info{ID: "m"}, func() (amqpdelay.Receipt, error) {
			n++
			return amqpdelay.Receipt{}, tc.publish(ctx, n)
		})
		cancel()
		if !errors.Is(err, amqpdelay.ErrUnroutable) || !errors.Is(err, context.DeadlineExceeded) || n < 2 {
			t.Errorf("%s: err %v after %d publishes; want ErrUnroutable and context.DeadlineExceeded after 2 or more", tc.name, err, n)
		}
	}
	// An error that publishing again cannot mend stops at once, unwrapped.
	n := 0
	_, err := c.settlePublish(context.Background(), Info{ID: "m"}, func() (amqpdelay.Receipt, error) {
		n++
		return amqpdelay.Receipt{}, amqpdelay.ErrInvalidInput
	})
	if !errors.Is(err, amqpdelay.ErrInvalidInput) || n != 1 || strings.Contains(err.Error(), "settle timeout") {
		t.Errorf("ErrInvalidInput: err %v after %d publishes; want it returned after 1", err, n)
	}
}

// TestIsUnreadable: amqp091-go closes the connection with a FrameError on every read error; only
// its parse errors mean an unreadable delivery, not a reset, an EOF or a missed heartbeat (which
// sent the Consumer into one-at-a-time reading and advised removing a message by hand).
func TestIsUnreadable(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{&amqp.Error{Code: amqp.FrameError, Reason: amqp.ErrSyntax.Error()}, true},
		{&amqp.Error{Code: amqp.FrameError, Reason: amqp.ErrFrame.Error()}, true},
		{fmt.Errorf("consumer: consuming %q ended: %w", "q", &amqp.Error{Code: amqp.FrameError, Reason: amqp.ErrSyntax.Error()}), true},
		{&amqp.Error{Code: amqp.FrameError, Reason: "read tcp 127.0.0.1:1->127.0.0.1:2: read: connection reset by peer"}, false},
		{&amqp.Error{Code: amqp.FrameError, Reason: "EOF"}, false},
		{&amqp.Error{Code: amqp.FrameError, Reason: "read tcp: i/o timeout"}, false},
		{&amqp.Error{Code: amqp.FrameError, Reason: amqp.ErrSyntax.Error(), Server: true}, false},
		{&amqp.Error{Code: amqp.ConnectionForced, Reason: "CONNECTION_FORCED - broker forced connection closure", Server: true}, false},
		{errors.New("the broker closed the consuming channel"), false},
	} {
		if got := isUnreadable(tc.err); got != tc.want {
			t.Errorf("isUnreadable(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}

// TestRunRefusesUnreachableStore: a RedisStore whose Redis does not answer (here a port nothing
// listens on) stops Run at start with ErrStore, before any connection to RabbitMQ; ctx bounds
// the ping.
func TestRunRefusesUnreachableStore(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close() // nothing listens there now
	client := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	defer client.Close()
	cfg := amqpdelay.Config{URL: "amqp://guest:guest@127.0.0.1:1/"}
	c, err := New(cfg, "q", noop, Options{Store: NewRedisStore(client, "")})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err = c.Run(ctx)
	if !errors.Is(err, ErrStore) || !strings.Contains(err.Error(), "does not answer") || !strings.Contains(err.Error(), addr) {
		t.Fatalf("Run = %v, want ErrStore naming %s", err, addr)
	}
	if strings.Contains(err.Error(), "127.0.0.1:1") {
		t.Errorf("Run dialed RabbitMQ before pinging the store: %v", err)
	}
}
