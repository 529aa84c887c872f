// Package brokertest gives integration tests and benchmarks a real RabbitMQ.
//
// Where the broker comes from, in this order:
//
//  1. AMQP_URL (and AMQP_MANAGEMENT_URL for the management API, when the broker has it), as set by
//     `make test` through scripts/broker, or by hand.
//  2. A RabbitMQ container started with testcontainers-go, when a Docker engine answers.
//  3. Nothing: the test is skipped with a message that says to run `make test` - except when CI=true,
//     where a missing broker fails the test instead.
//
// A broker that is named (AMQP_URL) but does not answer always fails the test: the caller asked
// for it. Each test gets its own vhost (created and deleted through the management API) or, where
// there is no management API, its own name prefix, so tests run in parallel and leave nothing
// behind.
//
// The delayed-message plugin is not in Debian's package, so [PluginURL] reads AMQP_PLUGIN_URL
// and skips (in CI too) when it is unset.
package brokertest

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	tcrabbit "github.com/testcontainers/testcontainers-go/modules/rabbitmq"

	"github.com/delaykit/rabbitdelay/internal/amqpconn"
)

// HowToRun is the advice a skipped integration test prints.
const HowToRun = "run `make test` (it starts a real RabbitMQ), or set AMQP_URL to a broker (and AMQP_MANAGEMENT_URL to its management API)"

// Broker is a reachable RabbitMQ.
type Broker struct {
	// URL is the AMQP URL of the broker's default vhost ("/").
	URL string
	// ManagementURL is the base URL of the management HTTP API with credentials
	// (http://user:pass@host:15672/), or "" when there is none.
	ManagementURL string
}

var (
	once      sync.Once
	shared    *Broker
	sharedErr error
	skipWhy   string
	container *tcrabbit.RabbitMQContainer
)

// InCI reports whether CI=true (or any true-like value) is set.
func InCI() bool {
	v := strings.ToLower(os.Getenv("CI"))
	return v == "true" || v == "1" || v == "yes"
}

// Get returns the broker for this test binary, finding or starting it on first use. It skips the
// test (outside CI) or fails it (CI=true, or AMQP_URL set but unreachable) when there is none.
func Get(tb testing.TB) *Broker {
	tb.Helper()
	once.Do(find)
	if sharedErr != nil {
		tb.Fatalf("brokertest: %v", sharedErr)
	}
	if shared == nil {
		if InCI() {
			tb.Fatalf("brokertest: no broker and CI=true, so this is a failure, not a skip: %s; %s", skipWhy, HowToRun)
		}
		tb.Skipf("brokertest: no broker (%s); %s", skipWhy, HowToRun)
	}
	return shared
}

func find() {
	if u := os.Getenv("AMQP_URL"); u != "" {
		if err := ping(u); err != nil {
			sharedErr = fmt.Errorf("AMQP_URL %s does not answer: %v", amqpconn.Redact(u), err)
			return
		}
		shared = &Broker{URL: u, ManagementURL: os.Getenv("AMQP_MANAGEMENT_URL")}
		return
	}
	if !dockerAnswers() {
		skipWhy = "AMQP_URL is not set and no Docker engine answers"
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c, err := tcrabbit.Run(ctx, "rabbitmq:4.1-management")
	if err != nil {
		sharedErr = fmt.Errorf("start RabbitMQ with testcontainers: %v", err)
		return
	}
	container = c
	amqpURL, err := c.AmqpURL(ctx)
	if err != nil {
		sharedErr = err
		return
	}
	httpURL, err := c.HttpURL(ctx)
	if err != nil {
		sharedErr = err
		return
	}
	mu, _ := url.Parse(httpURL)
	mu.User = url.UserPassword(c.AdminUsername, c.AdminPassword)
	shared = &Broker{URL: amqpURL, ManagementURL: mu.String() + "/"}
}

// Main runs the tests of a package and stops the container that Get may have started. Call it
// from TestMain: func TestMain(m *testing.M) { brokertest.Main(m) }.
func Main(m *testing.M) {
	code := m.Run()
	if container != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		_ = container.Terminate(ctx)
		cancel()
	}
	os.Exit(code)
}

func dockerAnswers() bool {
	if _, err := exec.LookPath("docker"); err != nil {
		return false
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return exec.CommandContext(ctx, "docker", "info").Run() == nil
}

func ping(u string) error {
	conn, err := amqp.DialConfig(u, amqp.Config{Dial: amqp.DefaultDial(5 * time.Second)})
	if err != nil {
		return err
	}
	return conn.Close()
}

// Env is one test's private corner of the broker.
type Env struct {
	Broker *Broker
	// URL is the AMQP URL of the test's own vhost (or of "/" when there is no management API).
	URL string
	// VHost is the vhost name ("/" when there is no management API).
	VHost string
	// Prefix is unique to the test; name every exchange and queue with it.
	Prefix string
}

var unsafe = regexp.MustCompile(`[^a-zA-Z0-9_.-]+`)

// NewEnv gives the test its own vhost (deleted, with everything in it, when the test ends) and a
// unique name prefix. Without a management API the vhost is "/" and only the prefix is unique;
// the test must then delete what it declares.
func NewEnv(tb testing.TB) *Env {
	tb.Helper()
	b := Get(tb)
	var rnd [4]byte
	_, _ = rand.Read(rnd[:])
	name := unsafe.ReplaceAllString(tb.Name(), "-")
	if len(name) > 60 {
		name = name[:60]
	}
	id := "rdt-" + strings.ToLower(name) + "-" + hex.EncodeToString(rnd[:])
	e := &Env{Broker: b, Prefix: id, VHost: "/", URL: b.URL}
	if b.ManagementURL == "" {
		return e
	}
	if err := b.CreateVHost(id); err != nil {
		tb.Fatalf("brokertest: %v", err)
	}
	tb.Cleanup(func() {
		if err := b.DeleteVHost(id); err != nil {
			tb.Errorf("brokertest: %v", err)
		}
	})
	e.VHost = id
	e.URL = WithVHost(b.URL, id)
	return e
}

// WithVHost returns the AMQP URL u pointed at vhost.
func WithVHost(u, vhost string) string {
	p, err := url.Parse(u)
	if err != nil {
		return u
	}
	p.Path = "/" + vhost
	p.RawPath = "/" + url.PathEscape(vhost)
	return p.String()
}

// Dial opens a connection to the test's vhost and closes it when the test ends.
func (e *Env) Dial(tb testing.TB) *amqp.Connection {
	tb.Helper()
	conn, err := amqp.DialConfig(e.URL, amqp.Config{Dial: amqp.DefaultDial(10 * time.Second)})
	if err != nil {
		tb.Fatalf("brokertest: dial %s: %v", amqpconn.Redact(e.URL), err)
	}
	tb.Cleanup(func() { _ = conn.Close() })
	return conn
}

// Channel opens a channel on a new connection to the test's vhost.
func (e *Env) Channel(tb testing.TB) *amqp.Channel {
	tb.Helper()
	ch, err := e.Dial(tb).Channel()
	if err != nil {
		tb.Fatalf("brokertest: open channel: %v", err)
	}
	return ch
}

// Name returns the test's prefix joined with suffix: a name no other test uses.
func (e *Env) Name(suffix string) string { return e.Prefix + "." + suffix }

// CreateVHost creates a vhost and gives the management user full permissions on it.
func (b *Broker) CreateVHost(name string) error {
	if err := b.mgmt(http.MethodPut, "api/vhosts/"+url.PathEscape(name), nil, nil); err != nil {
		return fmt.Errorf("create vhost %q: %w", name, err)
	}
	user := b.mgmtUser()
	perm := map[string]string{"configure": ".*", "write": ".*", "read": ".*"}
	if err := b.mgmt(http.MethodPut, "api/permissions/"+url.PathEscape(name)+"/"+url.PathEscape(user), perm, nil); err != nil {
		return fmt.Errorf("set permissions on vhost %q: %w", name, err)
	}
	return nil
}

// DeleteVHost deletes a vhost and everything in it. Deleting a vhost of many quorum queues on
// a busy cluster can take minutes (seen: over 30 s on a 3-node RabbitMQ 4.3.6 cluster under a
// load average of 20): each try waits up to 2 minutes, and a 404 after a try that timed out
// means that try's deletion finished.
func (b *Broker) DeleteVHost(name string) error {
	var err error
	for try := 0; try < 3; try++ {
		err = b.mgmtWithin(2*time.Minute, http.MethodDelete, "api/vhosts/"+url.PathEscape(name), nil, nil)
		if err == nil || try > 0 && strings.Contains(err.Error(), "404") {
			return nil
		}
		if !errors.Is(err, context.DeadlineExceeded) {
			break
		}
	}
	return fmt.Errorf("delete vhost %q: %w", name, err)
}

// Management calls the management API: method on path (relative, like "api/queues/vh/q"),
// with body encoded as JSON when not nil, decoding the JSON answer into out when not nil.
func (b *Broker) Management(method, path string, body, out any) error {
	return b.mgmt(method, path, body, out)
}

func (b *Broker) mgmtUser() string {
	p, err := url.Parse(b.ManagementURL)
	if err != nil || p.User == nil {
		return "guest"
	}
	return p.User.Username()
}

func (b *Broker) mgmt(method, path string, body, out any) error {
	return b.mgmtWithin(30*time.Second, method, path, body, out)
}

func (b *Broker) mgmtWithin(timeout time.Duration, method, path string, body, out any) error {
	if b.ManagementURL == "" {
		return fmt.Errorf("no management API (set AMQP_MANAGEMENT_URL)")
	}
	base, err := url.Parse(b.ManagementURL)
	if err != nil {
		return err
	}
	user := base.User
	base.User = nil
	var rd io.Reader
	if body != nil {
		js, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(js)
	}
	full := strings.TrimSuffix(base.String(), "/") + "/" + path
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, full, rd)
	if err != nil {
		return err
	}
	if user != nil {
		pw, _ := user.Password()
		req.SetBasicAuth(user.Username(), pw)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	if resp.StatusCode >= 300 {
		return fmt.Errorf("%s %s: %s: %s", method, path, resp.Status, bytes.TrimSpace(data))
	}
	if out != nil && len(data) > 0 {
		return json.Unmarshal(data, out)
	}
	return nil
}

// PluginURL returns AMQP_PLUGIN_URL, the URL of a broker that has the delayed-message plugin, or
// skips the test (in CI too: the plugin is not in Debian's rabbitmq-server package).
func PluginURL(tb testing.TB) string {
	tb.Helper()
	u := os.Getenv("AMQP_PLUGIN_URL")
	if u == "" {
		tb.Skip("brokertest: AMQP_PLUGIN_URL is not set: these tests need a broker with the rabbitmq_delayed_message_exchange plugin " +
			"(not in Debian's package); start one with `docker compose up -d` and set AMQP_PLUGIN_URL=amqp://guest:guest@localhost:5672/, " +
			"or without Docker run `BROKER_PLUGINS_DIR=<dir with the plugin release> scripts/broker run -- go test -tags integration ./...`")
	}
	return u
}
