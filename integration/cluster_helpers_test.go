//go:build integration

package integration

import (
	"context"
	"errors"
	"fmt"
	neturl "net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/delaykit/rabbitdelay/integration/brokertest"
	"github.com/delaykit/rabbitdelay/internal/admin"
)

// clusterHowTo is the advice a skipped cluster test prints.
const clusterHowTo = "run `make cluster-test` (or `make test`, whose cluster phase runs them; it starts a 3-node RabbitMQ cluster with " +
	"`BROKER_NODES=3 scripts/broker run -- ...`), or run the tests under `eval \"$(BROKER_STATE=... scripts/broker env)\"` " +
	"of a cluster that scripts/broker started"

// testCluster is the cluster of private nodes that scripts/broker started (BROKER_NODES >= 3):
// the tests reach every node and kill and restart them through scripts/broker.
type testCluster struct {
	// URLs are the AMQP URLs of the nodes' default vhost, node 1 first (AMQP_URLS).
	URLs []string
	// Broker is node 1's (AMQP_URL and its management API).
	Broker *brokertest.Broker
	state  string
	root   string
}

// getCluster returns the cluster the environment names, or skips the test: AMQP_URLS must list
// at least 3 URLs and BROKER_STATE name the state directory of the scripts/broker that started
// them. In the cluster phase of `make test` and in `make cluster-test`, which start a cluster and
// set RABBITDELAY_CLUSTER_TESTS=1, a missing cluster fails the test instead (in CI too, where
// .ci/run sets CI=true): a skip there would hide that the cluster tests did not run. The
// single-node phase of `make test` runs without a cluster, and there they skip.
func getCluster(t *testing.T) *testCluster {
	t.Helper()
	if clusterRequired() {
		return findCluster(t, t.Fatalf)
	}
	return findCluster(t, t.Skipf)
}

// clusterRequired reports whether the run was started to test a cluster
// (RABBITDELAY_CLUSTER_TESTS=1, set by the Makefile's cluster phases).
func clusterRequired() bool { return os.Getenv("RABBITDELAY_CLUSTER_TESTS") == "1" }

// findCluster is getCluster with miss (t.Skipf or t.Fatalf) for a missing cluster.
func findCluster(t *testing.T, miss func(format string, args ...any)) *testCluster {
	t.Helper()
	var urls []string
	for _, u := range strings.Split(os.Getenv("AMQP_URLS"), ",") {
		if u = strings.TrimSpace(u); u != "" {
			urls = append(urls, u)
		}
	}
	state := os.Getenv("BROKER_STATE")
	if len(urls) < 3 || state == "" {
		miss("no cluster: AMQP_URLS lists %d URLs (want 3 or more) and BROKER_STATE is %q; %s", len(urls), state, clusterHowTo)
	}
	_, file, _, _ := runtime.Caller(0)
	c := &testCluster{URLs: urls, state: state, root: filepath.Dir(filepath.Dir(file))}
	if out, err := c.script("node-url", "1"); err != nil || strings.TrimSpace(out) != urls[0] {
		miss("no cluster of scripts/broker in BROKER_STATE=%s (node-url 1: %v: %s); %s", state, err, clusterTailLine(out), clusterHowTo)
	}
	c.Broker = &brokertest.Broker{URL: os.Getenv("AMQP_URL"), ManagementURL: os.Getenv("AMQP_MANAGEMENT_URL")}
	if c.Broker.URL == "" {
		c.Broker.URL = urls[0]
	}
	return c
}

// script runs scripts/broker with args on the cluster's state directory (a generous deadline:
// restarting a node on a busy 2-core machine can take minutes).
func (c *testCluster) script(args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(c.root, "scripts", "broker"), args...)
	cmd.Env = append(os.Environ(), "BROKER_STATE="+c.state)
	out, err := cmd.CombinedOutput()
	if err != nil && errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return string(out), ctx.Err()
	}
	return string(out), err
}

// kill kills node i (1-based) with kill -9 of its VM.
func (c *testCluster) kill(t *testing.T, i int) {
	t.Helper()
	start := time.Now()
	out, err := c.script("kill", fmt.Sprint(i))
	if err != nil {
		t.Fatalf("scripts/broker kill %d: %v\n%s", i, err, out)
	}
	t.Logf("kill %d took %v: %s", i, time.Since(start), clusterTailLine(out))
}

// startNode starts node i again; scripts/broker returns once it accepts connections and sees
// another node running.
func (c *testCluster) startNode(t *testing.T, i int) {
	t.Helper()
	start := time.Now()
	out, err := c.script("start-node", fmt.Sprint(i))
	if err != nil {
		t.Fatalf("scripts/broker start-node %d: %v\n%s", i, err, out)
	}
	t.Logf("start-node %d took %v: %s", i, time.Since(start), clusterTailLine(out))
}

// nodeOf returns the 1-based index of the node named name (rabbitdelay-c<i>-<amqp port>@host),
// found by its AMQP port; 0 when none matches.
func (c *testCluster) nodeOf(name string) int {
	for i, u := range c.URLs {
		p, err := neturl.Parse(u)
		if err == nil && strings.Contains(name, "-"+p.Port()+"@") {
			return i + 1
		}
	}
	return 0
}

// nodeURL returns node i's AMQP URL of vhost.
func (c *testCluster) nodeURL(i int, vhost string) string {
	return brokertest.WithVHost(c.URLs[i-1], vhost)
}

// vhostURLs returns every node's AMQP URL of vhost, node 1 first.
func (c *testCluster) vhostURLs(vhost string) []string {
	out := make([]string, len(c.URLs))
	for i, u := range c.URLs {
		out[i] = brokertest.WithVHost(u, vhost)
	}
	return out
}

// clusterDial opens a connection to url with a deadline of its own.
func clusterDial(url string) (*amqp.Connection, error) {
	return amqp.DialConfig(url, amqp.Config{Dial: amqp.DefaultDial(30 * time.Second), Heartbeat: 10 * time.Second})
}

// clusterPublish publishes each body (persistent) to queue through a fresh connection to url
// and waits for the broker's confirm of every one. Any nack, closed channel or expired ctx is an
// error; the caller may retry the bodies that are not confirmed.
func clusterPublish(ctx context.Context, url, queue string, bodies ...string) error {
	conn, err := clusterDial(url)
	if err != nil {
		return fmt.Errorf("dial: %w", err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		return fmt.Errorf("channel: %w", err)
	}
	if err := ch.Confirm(false); err != nil {
		return fmt.Errorf("confirm mode: %w", err)
	}
	closed := ch.NotifyClose(make(chan *amqp.Error, 1))
	confs := make([]*amqp.DeferredConfirmation, 0, len(bodies))
	for _, b := range bodies {
		dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, "", queue, false, false, amqp.Publishing{
			DeliveryMode: amqp.Persistent, ContentType: "text/plain", Body: []byte(b),
		})
		if err != nil {
			return fmt.Errorf("publish %q: %w", b, err)
		}
		confs = append(confs, dc)
	}
	for i, dc := range confs {
		select {
		case <-dc.Done():
			if !dc.Acked() {
				select {
				case e := <-closed:
					return fmt.Errorf("%q not confirmed: channel closed: %v", bodies[i], e)
				default:
					return fmt.Errorf("%q nacked by the broker", bodies[i])
				}
			}
		case <-ctx.Done():
			return fmt.Errorf("%q: no confirm: %w", bodies[i], ctx.Err())
		}
	}
	return nil
}

// clusterPublishUntilConfirmed retries clusterPublish through url (a fresh connection each time)
// until the broker confirms all of bodies or within passes; a failure after that fails the test.
// It returns how many attempts failed (logged).
func clusterPublishUntilConfirmed(t *testing.T, url, queue string, within time.Duration, bodies ...string) int {
	t.Helper()
	deadline := time.Now().Add(within)
	for failed := 0; ; failed++ {
		ctx, cancel := context.WithTimeout(context.Background(), time.Until(deadline))
		err := clusterPublish(ctx, url, queue, bodies...)
		cancel()
		if err == nil {
			return failed
		}
		if time.Now().After(deadline) {
			t.Fatalf("publishing %d messages to %s through %s: not confirmed within %v (%d earlier attempts failed): %v",
				len(bodies), queue, clusterRedact(url), within, failed, err)
		}
		t.Logf("publishing through %s, attempt %d: %v; retrying", clusterRedact(url), failed+1, err)
		time.Sleep(time.Second)
	}
}

// clusterGetAll takes messages from queue through url (basic.get with acks; a new connection after any
// failure) until every body of want has arrived or within passes. It returns how often each body
// arrived (a body outside want included).
func clusterGetAll(t *testing.T, url, queue string, within time.Duration, want []string) map[string]int {
	t.Helper()
	got := map[string]int{}
	missing := func() int {
		n := 0
		for _, w := range want {
			if got[w] == 0 {
				n++
			}
		}
		return n
	}
	deadline := time.Now().Add(within)
	var lastErr error
	for missing() > 0 && time.Now().Before(deadline) {
		lastErr = func() error {
			conn, err := clusterDial(url)
			if err != nil {
				return err
			}
			defer conn.Close()
			ch, err := conn.Channel()
			if err != nil {
				return err
			}
			for missing() > 0 && time.Now().Before(deadline) {
				d, ok, err := ch.Get(queue, false)
				if err != nil {
					return err
				}
				if !ok {
					time.Sleep(100 * time.Millisecond)
					continue
				}
				if err := d.Ack(false); err != nil {
					return err
				}
				got[string(d.Body)]++
			}
			return nil
		}()
		if lastErr != nil {
			t.Logf("getting from %s through %s: %v; retrying", queue, clusterRedact(url), lastErr)
			time.Sleep(time.Second)
		}
	}
	if n := missing(); n > 0 {
		t.Fatalf("%d of %d messages never arrived from %s through %s within %v (last error: %v)",
			n, len(want), queue, clusterRedact(url), within, lastErr)
	}
	return got
}

// clusterRedact returns url without its password.
func clusterRedact(u string) string {
	p, err := neturl.Parse(u)
	if err != nil {
		return "(unparsable URL)"
	}
	return p.Redacted()
}

// clusterQueueInfo is what the management API tells of a quorum queue's members.
type clusterQueueInfo struct {
	Leader  string   `json:"leader"`
	Members []string `json:"members"`
	Online  []string `json:"online"`
}

// queueMembers asks the management API (node 1's) about queue in vhost.
func (c *testCluster) queueMembers(vhost, queue string) (clusterQueueInfo, error) {
	var q clusterQueueInfo
	err := c.Broker.Management("GET", "api/queues/"+neturl.PathEscape(vhost)+"/"+neturl.PathEscape(queue), nil, &q)
	return q, err
}

// waitQueueMembers polls queueMembers until cond holds or within passes (then it fails the test
// with the last answer).
func (c *testCluster) waitQueueMembers(t *testing.T, vhost, queue string, within time.Duration, what string, cond func(clusterQueueInfo) bool) clusterQueueInfo {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		q, err := c.queueMembers(vhost, queue)
		if err == nil && cond(q) {
			return q
		}
		if time.Now().After(deadline) {
			t.Fatalf("queue %s: %s: not within %v (last answer %+v, error %v)", queue, what, within, q, err)
		}
		time.Sleep(time.Second)
	}
}

// runningNodes returns the names of the nodes that the management API (node 1's) reports running.
func (c *testCluster) runningNodes() ([]string, error) {
	var nodes []struct {
		Name    string `json:"name"`
		Running bool   `json:"running"`
	}
	if err := c.Broker.Management("GET", "api/nodes?columns=name,running", nil, &nodes); err != nil {
		return nil, err
	}
	var out []string
	for _, n := range nodes {
		if n.Running {
			out = append(out, n.Name)
		}
	}
	return out, nil
}

// clusterTailLine returns the last non-empty line of a command's output.
func clusterTailLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

// buildDeclare builds the CLI (cmd/rabbitdelay, the code of cmd/declare) into a temporary
// directory, as `go install` names it, and returns the binary's path (skips when the go tool is
// not on PATH).
func buildDeclare(t *testing.T) string {
	t.Helper()
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("the go tool is not on PATH; cannot build cmd/rabbitdelay")
	}
	bin := filepath.Join(t.TempDir(), "rabbitdelay")
	if out, err := exec.Command(goTool, "build", "-o", bin, "../cmd/rabbitdelay").CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/rabbitdelay: %v\n%s", err, out)
	}
	return bin
}

// clusterMgmtEnv returns a vhost of its own on the cluster and node 1's management API for it
// (skips without AMQP_MANAGEMENT_URL).
func clusterMgmtEnv(t *testing.T) (*brokertest.Env, *admin.Management) {
	t.Helper()
	env := brokertest.NewEnv(t)
	if env.Broker.ManagementURL == "" {
		t.Skip("needs the management API of node 1 (AMQP_MANAGEMENT_URL)")
	}
	m, err := admin.NewManagement(env.Broker.ManagementURL, env.VHost)
	if err != nil {
		t.Fatal(err)
	}
	return env, m
}
