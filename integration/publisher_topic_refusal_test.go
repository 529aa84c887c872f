//go:build integration

package integration

import (
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/delaykit/rabbitdelay/amqpdelay"
	"github.com/delaykit/rabbitdelay/integration/brokertest"
	"github.com/delaykit/rabbitdelay/internal/delayspec"
)

// TestPublisherTrustedExchangeRefusals: refusals on an exchange that has already taken direct
// publishes on the connection, sent while 8 goroutines publish on the same one-channel
// Publisher (4 delayed, 4 direct: to another target and to allowed keys of the same topic
// exchange). A routing key the user's topic permission refuses (403), whether the Publisher
// read the topic permissions with Config.Management or learns them from this refusal, and a
// publish to an exchange deleted after it took publishes (404): each bad publish gets its own
// refusal (ErrAccessRefused, ErrExchangeNotFound) and no victim fails, the first time too (a
// publish in flight on the shared channel that such a refusal closed is sent again alone).
func TestPublisherTrustedExchangeRefusals(t *testing.T) {
	t.Parallel()
	env := brokertest.NewEnv(t)
	needUsers(t, env)
	ch := env.Channel(t)
	target, topic, doomed := env.Name("orders"), env.Name("topic-target"), env.Name("doomed")
	for _, x := range []string{topic, doomed} {
		if err := ch.ExchangeDeclare(x, "topic", true, false, false, false, nil); err != nil {
			t.Fatal(err)
		}
	}
	spec := testSpec(env, delayspec.Target{Name: target, Type: "direct"}, delayspec.Target{Name: topic})
	if _, _, err := polApply(t, env, topoNeedManagement(t, env), spec); err != nil { // with the policies Config.Management checks
		t.Fatalf("apply: %v", err)
	}
	declareReadyQueue(t, env, env.Name("ready"), target, "k")
	declareReadyQueue(t, env, env.Name("topic-ready"), topic, "#")
	declareReadyQueue(t, env, env.Name("doomed-ready"), doomed, "#")

	user := env.Prefix + "-topic"
	// {username} is expanded by the broker: the keys "allowed.<user>.*" only.
	weakURL := brokerUser(t, env, user, ".*", topic, `^allowed\.{username}\.`)
	allowed := "allowed." + user + ".1"

	type victims struct{ delayed, direct *canary }
	start := func(p *amqpdelay.Publisher, directTo string, directKey string) victims {
		ctx := pubCtx(t)
		v := victims{
			delayed: startCanary(4, func() error {
				_, err := p.Publish(ctx, target, "k", textMsg("victim"), time.Minute)
				return err
			}),
			direct: startCanary(4, func() error {
				if _, err := p.Publish(ctx, target, "k", textMsg("direct victim"), 0); err != nil {
					return err
				}
				_, err := p.Publish(ctx, directTo, directKey, textMsg("direct victim"), 0)
				return err
			}),
		}
		time.Sleep(100 * time.Millisecond)
		return v
	}
	warm := func(p *amqpdelay.Publisher, exchange, key string) {
		t.Helper()
		if _, err := p.Publish(pubCtx(t), exchange, key, textMsg("warm"), 0); err != nil {
			t.Fatalf("direct publish to %s with %q: %v", exchange, key, err)
		}
	}

	// refusedAlone publishes to exchange with key twice beside fresh victims (their direct
	// publishes to victimTo with victimKey): each is refused with want alone, no victim fails.
	refusedAlone := func(t *testing.T, p *amqpdelay.Publisher, exchange, key string, want error, victimTo, victimKey, what string) {
		t.Helper()
		v := start(p, victimTo, victimKey)
		for i := range 2 {
			if _, err := p.Publish(pubCtx(t), exchange, key, textMsg("bad"), 0); !errors.Is(err, want) || errors.Is(err, amqpdelay.ErrConnectionLost) {
				t.Errorf("%s, publish %d: %v, want %v alone", what, i+1, err, want)
			}
		}
		time.Sleep(100 * time.Millisecond)
		v.delayed.check(t, what+" (delayed victims)")
		v.direct.check(t, what+" (direct victims)")
	}

	t.Run("topic permission read with Config.Management", func(t *testing.T) {
		p := newPublisherURL(t, weakURL, spec, amqpdelay.Config{Channels: 1, Management: management(t, env)})
		warm(p, topic, allowed)
		refusedAlone(t, p, topic, "denied.1", amqpdelay.ErrAccessRefused, topic, allowed, "a refused topic key")
	})

	t.Run("topic permission learnt from a refusal", func(t *testing.T) {
		p := newPublisherURL(t, weakURL, spec, amqpdelay.Config{Channels: 1})
		warm(p, topic, allowed)
		refusedAlone(t, p, topic, "denied.1", amqpdelay.ErrAccessRefused, topic, allowed, "the first refused topic key")
		refusedAlone(t, p, topic, "denied.2", amqpdelay.ErrAccessRefused, topic, allowed, "a refused topic key after the first")
	})

	t.Run("exchange deleted after it took publishes", func(t *testing.T) {
		p := newPublisherURL(t, env.URL, spec, amqpdelay.Config{Channels: 1})
		warm(p, doomed, "k")
		if err := env.Channel(t).ExchangeDelete(doomed, false, false); err != nil {
			t.Fatal(err)
		}
		refusedAlone(t, p, doomed, "k", amqpdelay.ErrExchangeNotFound, topic, "any", "the first publish to a deleted exchange")
		refusedAlone(t, p, doomed, "k", amqpdelay.ErrExchangeNotFound, topic, "any", "publishes to a deleted exchange after the first")
	})
}

// TestDelayedPublishKeepsPermissions: a delayed message reaches its target by dead-lettering,
// which RabbitMQ does not check against the user's permissions; the Publisher asks the broker
// (a publish in a rolled-back transaction) so that a delayed publish is refused exactly where
// the same direct publish would be. Members: a routing key the user's topic permission on a
// topic target refuses (read with Config.Management; learnt by the Publisher's own probe even when
// the first key is allowed, for an allow-list of prefixes and of key shapes; on 4.x a CC key
// too; 600 in flight at once, one in five refused), and a target the user has no write
// permission on. Each is refused with ErrAccessRefused and nothing arrives; allowed keys are
// delivered when due, and other publishes on the Publisher lose nothing.
func TestDelayedPublishKeepsPermissions(t *testing.T) {
	t.Parallel()
	env := brokertest.NewEnv(t)
	needUsers(t, env)
	target, topic := env.Name("orders"), env.Name("topic-target")
	spec := testSpec(env, delayspec.Target{Name: target, Type: "direct"}, delayspec.Target{Name: topic, Type: "topic"})
	if _, _, err := polApply(t, env, topoNeedManagement(t, env), spec); err != nil {
		t.Fatalf("apply: %v", err)
	}
	declareReadyQueue(t, env, env.Name("ready"), target, "k")
	declareReadyQueue(t, env, env.Name("topic-ready"), topic, "#")
	got := consumeQueue(t, env, env.Name("topic-ready"))

	topicURL := brokerUser(t, env, env.Prefix+"-keys", ".*", topic, `^allowed\.`)
	twoURL := brokerUser(t, env, env.Prefix+"-two", ".*", topic, `^[^.]+\.[^.]+$`) // keys of two words only
	// Write permission on the delay topology's exchanges only: not on the targets.
	noWriteURL := brokerUser(t, env, env.Prefix+"-nowrite", `^`+regexp.QuoteMeta(env.Prefix)+`\.(ladder|buckets|dispatch|plugin)`, "", "")

	refused := func(t *testing.T, p *amqpdelay.Publisher, exchange, key string, msg amqp.Publishing, what string) {
		t.Helper()
		for _, d := range []time.Duration{300 * time.Millisecond, 5 * time.Second} {
			if _, err := p.Publish(pubCtx(t), exchange, key, msg, d); !errors.Is(err, amqpdelay.ErrAccessRefused) {
				t.Errorf("%s, delay %v: %v, want ErrAccessRefused", what, d, err)
			}
		}
	}
	sent := map[string]bool{}
	allowed := func(t *testing.T, p *amqpdelay.Publisher, key string) {
		t.Helper()
		if _, err := p.Publish(pubCtx(t), topic, key, textMsg(key), 300*time.Millisecond); err != nil {
			t.Errorf("allowed key %s: %v", key, err)
		}
		sent[key] = true
	}

	t.Run("topic permission read with Config.Management", func(t *testing.T) {
		p := newPublisherURL(t, topicURL, spec, amqpdelay.Config{Management: management(t, env)})
		refused(t, p, topic, "denied.1", textMsg("denied.1"), "a refused key")
		allowed(t, p, "allowed.1")
	})
	t.Run("topic permission found by the Publisher, allowed key first", func(t *testing.T) {
		p := newPublisherURL(t, topicURL, spec)
		v := startCanary(4, func() error {
			_, err := p.Publish(pubCtx(t), topic, "allowed.canary", textMsg("allowed.canary"), time.Minute)
			return err
		})
		allowed(t, p, "allowed.2")
		refused(t, p, topic, "denied.2", textMsg("denied.2"), "a refused key after an allowed one")
		if brokerMajor(t, env) >= 4 { // 4.x checks CC and BCC keys against the topic permission
			m := textMsg("denied.cc")
			m.Headers = amqp.Table{"CC": []any{"denied.cc"}}
			refused(t, p, topic, "allowed.3", m, "an allowed key with a refused CC key")
		}
		allowed(t, p, "allowed.4")
		v.check(t, "delayed publishes beside the refused ones")
	})
	t.Run("topic permission found by the Publisher, an allow-list of key shapes", func(t *testing.T) {
		p := newPublisherURL(t, twoURL, spec)
		allowed(t, p, "allowed.5")
		refused(t, p, topic, "denied.6.x", textMsg("denied.6.x"), "a three-word key after a two-word one")
	})
	t.Run("many refused and allowed keys in flight at once", func(t *testing.T) {
		// A refusal closes the probe's channel; a call meeting the closed channel must still
		// learn the refusal, never let the message through.
		p := newPublisherURL(t, topicURL, spec)
		ctx := pubCtx(t)
		type pending struct {
			key string
			d   *amqpdelay.Deferred
		}
		var all []pending
		for i := range 600 {
			key := fmt.Sprintf("allowed.many.%d", i)
			if i%5 == 0 {
				key = fmt.Sprintf("denied.many.%d", i)
			}
			d, err := p.PublishDeferred(ctx, topic, key, textMsg(key), 300*time.Millisecond)
			if err != nil {
				t.Fatal(err)
			}
			all = append(all, pending{key, d})
		}
		for _, x := range all {
			_, err := x.d.Wait(ctx)
			switch {
			case strings.HasPrefix(x.key, "denied") && !errors.Is(err, amqpdelay.ErrAccessRefused):
				t.Errorf("%s: %v, want ErrAccessRefused", x.key, err)
			case strings.HasPrefix(x.key, "allowed") && err != nil:
				t.Errorf("%s: %v", x.key, err)
			}
		}
	})
	t.Run("no write permission on the target", func(t *testing.T) {
		p := newPublisherURL(t, noWriteURL, spec)
		refused(t, p, target, "k", textMsg("no write"), "a target without write permission")
		if _, err := p.Publish(pubCtx(t), target, "k", textMsg("no write"), 0); !errors.Is(err, amqpdelay.ErrAccessRefused) {
			t.Errorf("the same publish direct: %v, want ErrAccessRefused", err)
		}
	})

	// The allowed keys arrive; no refused one does.
	deadline := time.After(maxLateness)
	for len(sent) > 0 {
		select {
		case a := <-got:
			body := string(a.d.Body)
			if strings.HasPrefix(body, "denied") {
				t.Errorf("refused message %q was delivered", body)
			}
			delete(sent, body)
		case <-deadline:
			t.Fatalf("not delivered: %v", sent)
		}
	}
}

// needUsers fails the test in CI, and skips it elsewhere, when env's broker has no management
// API to create users with (brokerUser).
func needUsers(t *testing.T, env *brokertest.Env) {
	t.Helper()
	if env.Broker.ManagementURL == "" {
		if brokertest.InCI() {
			t.Fatal("needs the management API to create a user, and CI's broker has one")
		}
		t.Skip("needs the management API to create a user")
	}
}

// brokerUser creates a user name (password "pw", deleted with the test) with write permission
// write in env's vhost (configure none, read all) and, when topicExchange is not "", a topic
// permission on it with write pattern topicWrite, and returns env's URL with that user.
func brokerUser(t *testing.T, env *brokertest.Env, name, write, topicExchange, topicWrite string) string {
	t.Helper()
	u := brokerUserPerm(t, env, name, write, ".*")
	if topicExchange != "" {
		tp := map[string]string{"exchange": topicExchange, "write": topicWrite, "read": ".*"}
		if err := env.Broker.Management("PUT", "api/topic-permissions/"+url.PathEscape(env.VHost)+"/"+url.PathEscape(name), tp, nil); err != nil {
			t.Fatal(err)
		}
	}
	return u
}

// brokerUserPerm creates a user name (password "pw", deleted with the test) with the write and
// read permission patterns given in env's vhost (configure none), and returns env's URL with
// that user.
func brokerUserPerm(t *testing.T, env *brokertest.Env, name, write, read string) string {
	t.Helper()
	if err := env.Broker.Management("PUT", "api/users/"+url.PathEscape(name), map[string]string{"password": "pw", "tags": ""}, nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Broker.Management("DELETE", "api/users/"+url.PathEscape(name), nil, nil) })
	perm := map[string]string{"configure": "^$", "write": write, "read": read}
	if err := env.Broker.Management("PUT", "api/permissions/"+url.PathEscape(env.VHost)+"/"+url.PathEscape(name), perm, nil); err != nil {
		t.Fatal(err)
	}
	u, _ := url.Parse(env.URL)
	u.User = url.UserPassword(name, "pw")
	return u.String()
}
