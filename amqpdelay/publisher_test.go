package amqpdelay

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/delaykit/rabbitdelay/internal/amqpconn"
	"github.com/delaykit/rabbitdelay/internal/delayspec"
	"github.com/delaykit/rabbitdelay/ttlbuckets"
)

func TestNewPublisherRefusesBadConfig(t *testing.T) {
	cfg := Config{Prefix: "amq.bad", URL: "http://user:s3cret@localhost/", Channels: 65, Strategy: Strategy(42), MaxInFlight: -1}
	_, err := NewPublisher(context.Background(), cfg)
	if !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("err = %v, want ErrInvalidConfig", err)
	}
	for _, want := range []string{"prefix", "Config.Channels", "Config.Strategy", "Config.MaxInFlight", "URL"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error does not report the %s problem:\n%v", want, err)
		}
	}
	if strings.Contains(err.Error(), "s3cret") {
		t.Errorf("error shows the password: %v", err)
	}
}

func TestNewPublisherNilContext(t *testing.T) {
	//nolint:staticcheck // nil on purpose
	if _, err := NewPublisher(nil, Config{}); !errors.Is(err, ErrInvalidInput) {
		t.Errorf("err = %v, want ErrInvalidInput", err)
	}
}

// TestNewPublisherDialErrorHidesPassword: a broker that does not answer gives an error (when
// ctx ends at the latest) that never shows the URL's password.
func TestNewPublisherDialErrorHidesPassword(t *testing.T) {
	cfg := Config{URL: "amqp://user:s3cret@127.0.0.1:1/vh"}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	start := time.Now()
	_, err := NewPublisher(ctx, cfg)
	if err == nil {
		t.Fatal("NewPublisher succeeded without a broker")
	}
	if strings.Contains(err.Error(), "s3cret") {
		t.Errorf("error shows the password: %v", err)
	}
	if time.Since(start) > time.Minute { // a hang bound: the context ends after 5 s
		t.Errorf("NewPublisher took %v, far past its context", time.Since(start))
	}
}

// TestConfigResolve: every Publisher field of Config out of its range is refused with
// ErrInvalidConfig naming the field, and the zero fields take the defaults.
func TestConfigResolve(t *testing.T) {
	for _, c := range []struct {
		cfg   Config
		field string
	}{
		{Config{Channels: 65}, "Config.Channels"},
		{Config{Channels: -1}, "Config.Channels"},
		{Config{ReconnectMin: -1, ReconnectMax: time.Second}, "Config.ReconnectMin"},
		{Config{ReconnectMin: time.Second, ReconnectMax: time.Millisecond}, "Config.ReconnectMin"},
		{Config{ReconnectMin: time.Second, ReconnectMax: MaxReconnectBackoff + 1}, "Config.ReconnectMax"},
		{Config{ReconnectMin: time.Second, ReconnectMax: math.MaxInt64}, "Config.ReconnectMax"},
		{Config{ReconnectMin: -time.Second, ReconnectMax: -time.Millisecond}, "Config.ReconnectMin"},
		{Config{ReconnectMin: MaxReconnectBackoff + 1}, "Config.ReconnectMin"},
		{Config{Strategy: -1}, "Config.Strategy"},
		{Config{MaxMessageSize: -1}, "Config.MaxMessageSize"},
		{Config{MaxMessageSize: MaxMessageSizeLimit + 1}, "Config.MaxMessageSize"},
		{Config{MaxInFlight: -1}, "Config.MaxInFlight"},
	} {
		if _, err := c.cfg.resolve(); !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), c.field) {
			t.Errorf("%+v: err = %v, want ErrInvalidConfig naming %s", c.cfg, err, c.field)
		}
	}
	o, err := Config{}.resolve()
	if err != nil || o.Channels != DefaultChannels || o.Strategy != Auto || o.ReconnectMin != amqpconn.DefaultReconnectMin ||
		o.ReconnectMax != amqpconn.DefaultReconnectMax || o.MaxMessageSize != DefaultMaxMessageSize || o.MaxInFlight != DefaultMaxInFlight ||
		o.ConnectionName != "rabbitdelay-publisher" {
		t.Errorf("the zero Config resolves to %+v, %v; want the defaults", o, err)
	}
	o, err = Config{Channels: 64, ReconnectMin: time.Millisecond, ReconnectMax: MaxReconnectBackoff, MaxMessageSize: MaxMessageSizeLimit,
		MaxInFlight: 1, Strategy: LadderOnly, ConnectionName: "pub"}.resolve()
	if err != nil || o.Channels != 64 || o.ReconnectMin != time.Millisecond || o.ReconnectMax != MaxReconnectBackoff || o.MaxMessageSize != MaxMessageSizeLimit ||
		o.MaxInFlight != 1 || o.Strategy != LadderOnly || o.ConnectionName != "pub" {
		t.Errorf("in-range fields resolve to %+v, %v", o, err)
	}
}

// TestIsExchangeNotFound: only RabbitMQ's 404 naming the plugin exchange marks the plugin as gone;
// a 404 for a target exchange (a direct publish to a missing exchange) does not.
func TestIsExchangeNotFound(t *testing.T) {
	const x = "app.plugin"
	notFound := func(name string) error {
		return fmt.Errorf("%w: %w", ErrConnectionLost, &amqp.Error{Code: amqp.NotFound, Reason: "NOT_FOUND - no exchange '" + name + "' in vhost '/'"})
	}
	cases := []struct {
		name string
		err  error
		want bool
	}{
		{"404 for the plugin exchange, wrapped", notFound(x), true},
		{"404 for a target exchange", notFound("app.orders"), false},
		{"404 for an exchange whose name contains the plugin's", notFound("x" + x), false},
		{"another code naming the plugin exchange", &amqp.Error{Code: amqp.AccessRefused, Reason: "ACCESS_REFUSED - exchange '" + x + "'"}, false},
		{"no amqp error", errors.New("no exchange '" + x + "'"), false},
		{"404 whose reply text RabbitMQ cut off inside a long name", truncated(x), true},
		{"nil", nil, false},
	}
	for _, c := range cases {
		if got := isExchangeNotFound(c.err, x); got != c.want {
			t.Errorf("%s: isExchangeNotFound = %v, want %v", c.name, got, c.want)
		}
	}
	// A 240-byte name: RabbitMQ's reply text stops at 255 bytes, inside the name.
	long := strings.Repeat("n", 240)
	if !isExchangeNotFound(truncated(long), long) {
		t.Errorf("the cut-off 404 of a 240-byte name does not match it")
	}
	// (Two names that differ only past the cut cannot be told apart: the reply does not say.)
	if other := strings.Repeat("n", 200) + strings.Repeat("m", 40); isExchangeNotFound(truncated(other), long) {
		t.Errorf("the cut-off 404 of another 240-byte name, different before the cut, matches")
	}
	if isExchangeNotFound(notFound(long[:100]), long) {
		t.Errorf("a whole 404 for a shorter name matches a longer one that starts with it")
	}
}

// truncated is RabbitMQ's 404 for exchange name in a vhost, its reply text cut off as RabbitMQ
// cuts a reply text longer than an AMQP short string: to 252 bytes and "..." (3.10.8).
func truncated(name string) error {
	reason := "NOT_FOUND - no exchange '" + name + "' in vhost 'rdt-some-test-vhost-0123456789abcdef'"
	if len(reason) > 255 {
		reason = reason[:252] + "..."
	}
	return fmt.Errorf("%w: %w", ErrConnectionLost, &amqp.Error{Code: amqp.NotFound, Reason: reason})
}

// TestLadderDestination: a ladder publish goes to the entry exchange of its first queue: the
// last-hop queue's when its one hop is at a level with a next level, the level's queue when the
// hop is at the level where the order ends or the message has more hops; in the copy given.
func TestLadderDestination(t *testing.T) {
	n := delayspec.Names{Prefix: "d"}
	cases := []struct {
		order ttlbuckets.Order
		delay time.Duration
		queue func(shard int) string // the first queue
	}{
		// Shortest-first, radix 16: level 7 ends the order.
		{ttlbuckets.ShortestFirst, 3 * time.Millisecond, func(k int) string { return n.LadderLastHopQueueShard(0, 3, k) }},
		{ttlbuckets.ShortestFirst, 0x33 * time.Millisecond, func(k int) string { return n.LadderQueueShard(0, 3, k) }},
		{ttlbuckets.ShortestFirst, 0x20000000 * time.Millisecond, func(k int) string { return n.LadderQueueShard(7, 2, k) }},
		// Longest-first: level 0 ends the order.
		{ttlbuckets.LongestFirst, 3 * time.Millisecond, func(k int) string { return n.LadderQueueShard(0, 3, k) }},
		{ttlbuckets.LongestFirst, 0x300 * time.Millisecond, func(k int) string { return n.LadderLastHopQueueShard(2, 3, k) }},
		{ttlbuckets.LongestFirst, 0x301 * time.Millisecond, func(k int) string { return n.LadderQueueShard(2, 3, k) }},
	}
	for _, tc := range cases {
		l := ttlbuckets.Ladder{Unit: time.Millisecond, Radix: 16, Order: tc.order}.WithDefaults()
		plan, err := l.Plan(tc.delay, ttlbuckets.Strict)
		if err != nil {
			t.Fatal(err)
		}
		c := choice{path: PathLadder, plan: plan}
		for _, shard := range []int{0, 2} {
			p := &Publisher{names: n, ladder: l}
			dest, hops, mandatory := p.destination(c, "orders", shard)
			want := n.LadderEntryExchange(tc.queue(shard))
			if dest != want || hops != len(plan.Hops) || !mandatory {
				t.Errorf("%v %v, copy %d: destination %q, %d hops, mandatory %v; want %q, %d, true",
					tc.order, tc.delay, shard, dest, hops, mandatory, want, len(plan.Hops))
			}
		}
	}
}
