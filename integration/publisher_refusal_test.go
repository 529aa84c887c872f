//go:build integration

package integration

import (
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/delaykit/rabbitdelay/amqpdelay"
	"github.com/delaykit/rabbitdelay/integration/brokertest"
	"github.com/delaykit/rabbitdelay/internal/delayspec"
)

// brokerMajor returns the major version of the broker of env, from the connection's server
// properties.
func brokerMajor(t testing.TB, env *brokertest.Env) int {
	t.Helper()
	conn := env.Dial(t)
	v, _ := conn.Properties["version"].(string)
	major, err := strconv.Atoi(strings.SplitN(v, ".", 2)[0])
	if err != nil {
		t.Fatalf("broker version %q: %v", v, err)
	}
	return major
}

// brokerAtLeast reports whether the broker under test runs RabbitMQ major.minor or later (the
// connection's server properties).
func brokerAtLeast(t testing.TB, env *brokertest.Env, major, minor int) bool {
	t.Helper()
	v, _ := env.Dial(t).Properties["version"].(string)
	var ma, mi int
	if _, err := fmt.Sscanf(v, "%d.%d", &ma, &mi); err != nil {
		t.Fatalf("broker version %q: %v", v, err)
	}
	return ma > major || ma == major && mi >= minor
}

// TestPublisherChannelRefusals: every check RabbitMQ makes on basic.publish that closes the
// channel (see amqpdelay/refusal.go), each sent while 8 goroutines publish delayed messages on
// the same one-channel Publisher. The bad publish gets an error that says nothing was stored;
// no delayed publish beside it fails.
func TestPublisherChannelRefusals(t *testing.T) {
	t.Parallel()
	env := brokertest.NewEnv(t)
	major := brokerMajor(t, env)
	ch := env.Channel(t)

	target := env.Name("orders")
	internal := env.Name("internal-target")
	topic := env.Name("topic-target")
	noWrite := env.Name("nowrite")
	if err := ch.ExchangeDeclare(internal, "direct", true, false, true, false, nil); err != nil {
		t.Fatal(err)
	}
	for _, x := range []string{topic, noWrite} {
		if err := ch.ExchangeDeclare(x, "topic", true, false, false, false, nil); err != nil {
			t.Fatal(err)
		}
	}
	spec := testSpec(env, delayspec.Target{Name: target, Type: "direct"}, delayspec.Target{Name: internal}, delayspec.Target{Name: topic})
	declareTopology(t, env, spec)
	declareReadyQueue(t, env, env.Name("ready"), target, "k")
	declareReadyQueue(t, env, env.Name("topic-ready"), topic, "#")

	// A user that may write everywhere but to noWrite, and to topic only with keys "allowed.*".
	weakURL := ""
	if env.Broker.ManagementURL != "" {
		user := env.Prefix + "-weak"
		if err := env.Broker.Management("PUT", "api/users/"+url.PathEscape(user), map[string]string{"password": "weakpw", "tags": ""}, nil); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = env.Broker.Management("DELETE", "api/users/"+url.PathEscape(user), nil, nil) })
		perm := map[string]string{"configure": "^$", "write": "^(?!" + regexp.QuoteMeta(noWrite) + "$).*", "read": ".*"}
		if err := env.Broker.Management("PUT", "api/permissions/"+url.PathEscape(env.VHost)+"/"+url.PathEscape(user), perm, nil); err != nil {
			t.Fatal(err)
		}
		tp := map[string]string{"exchange": topic, "write": `^allowed\.`, "read": ".*"}
		if err := env.Broker.Management("PUT", "api/topic-permissions/"+url.PathEscape(env.VHost)+"/"+url.PathEscape(user), tp, nil); err != nil {
			t.Fatal(err)
		}
		u, _ := url.Parse(env.URL)
		u.User = url.UserPassword(user, "weakpw")
		weakURL = u.String()
	}

	// The broker's default max_message_size: 16 MiB since 4.0, 128 MiB before.
	brokerMax := 128 << 20
	if major >= 4 {
		brokerMax = 16 << 20
	}

	type attempt struct {
		exchange, key string
		msg           amqp.Publishing
		delay         time.Duration
	}
	cases := []struct {
		name string
		weak bool // publish as the user with limited permissions
		// bad is sent twice: the second time the Publisher may refuse it before sending.
		bad  attempt
		want error
		code int // the broker's reply code the error wraps (0: refused before sending)
		text string
	}{
		{name: "expiration above 10 years", bad: attempt{exchange: target, key: "k", msg: amqp.Publishing{Expiration: "315360000001"}},
			want: amqpdelay.ErrInvalidInput, text: "315360000000"},
		{name: "PublishAt in the past to an internal target", bad: attempt{exchange: internal, key: "k", delay: -time.Second},
			want: amqpdelay.ErrAccessRefused, code: amqp.AccessRefused, text: "internal"},
		{name: "missing exchange", bad: attempt{exchange: env.Name("missing"), key: "k"},
			want: amqpdelay.ErrExchangeNotFound, code: amqp.NotFound},
		{name: "no write permission", weak: true, bad: attempt{exchange: noWrite, key: "k"},
			want: amqpdelay.ErrAccessRefused, code: amqp.AccessRefused, text: noWrite},
		{name: "no topic permission for the routing key", weak: true, bad: attempt{exchange: topic, key: "denied.1"},
			want: amqpdelay.ErrAccessRefused, code: amqp.AccessRefused, text: "denied.1"},
		{name: "user_id of another user, direct", bad: attempt{exchange: target, key: "k", msg: amqp.Publishing{UserId: "somebody-else"}},
			want: amqpdelay.ErrInvalidInput, code: amqp.PreconditionFailed, text: "user_id"},
		{name: "user_id of another user, delayed", bad: attempt{exchange: target, key: "k", msg: amqp.Publishing{UserId: "somebody-else"}, delay: time.Minute},
			want: amqpdelay.ErrInvalidInput, code: amqp.PreconditionFailed, text: "user_id"},
		{name: "body above the broker's max_message_size", bad: attempt{exchange: target, key: "k", msg: amqp.Publishing{Body: make([]byte, brokerMax+1)}, delay: time.Minute},
			want: amqpdelay.ErrInvalidInput, code: amqp.PreconditionFailed, text: strconv.Itoa(brokerMax)},
		{name: "CC header not an array", bad: attempt{exchange: target, key: "k", msg: amqp.Publishing{Headers: amqp.Table{"CC": "k"}}, delay: time.Minute},
			want: amqpdelay.ErrInvalidInput, text: "array"},
		{name: "delivery mode 3", bad: attempt{exchange: target, key: "k", msg: amqp.Publishing{DeliveryMode: 3}},
			want: amqpdelay.ErrInvalidInput, text: "DeliveryMode"},
		{name: "expiration not an integer", bad: attempt{exchange: target, key: "k", msg: amqp.Publishing{Expiration: "1.5"}},
			want: amqpdelay.ErrInvalidInput, text: "Expiration"},
		{name: "expiration negative", bad: attempt{exchange: target, key: "k", msg: amqp.Publishing{Expiration: "-1"}},
			want: amqpdelay.ErrInvalidInput, text: "Expiration"},
		{name: "BCC header not an array, direct", bad: attempt{exchange: target, key: "k", msg: amqp.Publishing{Headers: amqp.Table{"BCC": int32(5)}}},
			want: amqpdelay.ErrInvalidInput, text: "array"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			u := env.URL
			if tc.weak {
				if weakURL == "" {
					if brokertest.InCI() {
						t.Fatal("needs the management API to create a user, and CI's broker has one")
					}
					t.Skip("needs the management API to create a user")
				}
				u = weakURL
			}
			p := newPublisherURL(t, u, spec, amqpdelay.Config{Channels: 1, MaxMessageSize: amqpdelay.MaxMessageSizeLimit})
			ctx := pubCtx(t)
			// Victims: due in about a minute, so nothing falls due while the test runs.
			c := startCanary(8, func() error {
				_, err := p.Publish(ctx, target, "k", textMsg("victim"), time.Minute)
				return err
			})
			time.Sleep(100 * time.Millisecond)
			for i := range 2 {
				b := tc.bad
				_, err := p.Publish(ctx, b.exchange, b.key, b.msg, b.delay)
				if !errors.Is(err, tc.want) {
					t.Fatalf("publish %d: err = %v, want %v", i+1, err, tc.want)
				}
				if tc.text != "" && !strings.Contains(err.Error(), tc.text) {
					t.Errorf("publish %d: err = %v, want it to name %q", i+1, err, tc.text)
				}
				var ae *amqp.Error
				if i == 0 && tc.code != 0 && (!errors.As(err, &ae) || ae.Code != tc.code) {
					t.Errorf("publish %d: err = %v, want the broker's %d wrapped", i+1, err, tc.code)
				}
				if errors.Is(err, amqpdelay.ErrConnectionLost) {
					t.Errorf("publish %d: err = %v: a refusal is not an unknown outcome", i+1, err)
				}
				time.Sleep(50 * time.Millisecond)
			}
			time.Sleep(100 * time.Millisecond)
			c.check(t, tc.name)
		})
	}

	// The topic permission allows other keys on the same exchange, and the refused key did not
	// make the Publisher refuse the exchange.
	if weakURL != "" {
		p := newPublisherURL(t, weakURL, spec)
		ctx := pubCtx(t)
		if _, err := p.Publish(ctx, topic, "denied.2", textMsg("x"), 0); !errors.Is(err, amqpdelay.ErrAccessRefused) {
			t.Fatalf("denied key: err = %v, want ErrAccessRefused", err)
		}
		if _, err := p.Publish(ctx, topic, "allowed.1", textMsg("x"), 0); err != nil {
			t.Errorf("allowed key after a denied one: %v", err)
		}
	}
}
