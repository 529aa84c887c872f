//go:build integration

package declare

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"maps"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/delaykit/rabbitdelay/integration/brokertest"
)

// TestExporterCommand runs `rabbitdelay exporter --listen 127.0.0.1:0` as an operator would, reads
// the address it logs, scrapes /metrics over HTTP, and stops it with SIGTERM (exit 0). Without
// --management-url it is a usage error (exit 2).
func TestExporterCommand(t *testing.T) {
	t.Parallel()
	env := brokertest.NewEnv(t)
	if env.Broker.ManagementURL == "" {
		t.Skip("needs the management API (AMQP_MANAGEMENT_URL)")
	}
	target := env.Name("orders")
	e := vars(env, "AMQPDELAY_TARGETS", target+":topic", "AMQPDELAY_LADDER_MAX", "1m")
	applyOrFail(t, env, e, target)
	noMgmt := vars(env, "AMQPDELAY_TARGETS", target+":topic")
	delete(noMgmt, "AMQPDELAY_MANAGEMENT_URL")
	if r := declare(t, noMgmt, "exporter", "--listen", "127.0.0.1:0"); r.code != exitUsage || !strings.Contains(r.stderr, "--management-url") {
		t.Errorf("exporter without the management API: exit %d, want 2 naming --management-url\n%s", r.code, r.stderr)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	x := startExporter(t, ctx, e)
	body := x.scrape(t, ctx)
	for _, want := range []string{"\nrabbitdelay_up 1\n", "\nrabbitdelay_missing_queues 0\n", "\nrabbitdelay_node_delay_queue_leaders{node="} {
		if !strings.Contains("\n"+body, want) {
			t.Errorf("scrape lacks %q:\n%s", want, body)
		}
	}
	if err := x.stop(); err != nil {
		t.Errorf("exporter after SIGTERM: %v, want exit 0", err)
	}
}

// TestExporterCommandLogsScrapeErrors: an exporter whose management API refuses it (a wrong
// password) or does not answer (nothing listens) says so in its log at start, naming the API
// and what to check, without the password, and serves rabbitdelay_up 0.
func TestExporterCommandLogsScrapeErrors(t *testing.T) {
	t.Parallel()
	env := brokertest.NewEnv(t)
	if env.Broker.ManagementURL == "" {
		t.Skip("needs the management API (AMQP_MANAGEMENT_URL)")
	}
	target := env.Name("orders")
	e := vars(env, "AMQPDELAY_TARGETS", target+":topic", "AMQPDELAY_LADDER_MAX", "1m")
	applyOrFail(t, env, e, target)
	mu, err := url.Parse(e["AMQPDELAY_MANAGEMENT_URL"])
	if err != nil {
		t.Fatal(err)
	}
	const pw = "Wr0ngPassw0rdQz"
	mu.User = url.UserPassword(mu.User.Username(), pw)
	ln, err := net.Listen("tcp", "127.0.0.1:0") // a port nothing answers on once closed
	if err != nil {
		t.Fatal(err)
	}
	closedPort := ln.Addr().String()
	_ = ln.Close()
	for _, c := range []struct{ name, url, want string }{
		{"wrong password", mu.String(), "401"},
		{"nothing listening", "http://guest:" + pw + "@" + closedPort + "/", "connection refused"},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			e2 := maps.Clone(e)
			e2["AMQPDELAY_MANAGEMENT_URL"] = c.url
			x := startExporter(t, ctx, e2)
			for range 5 {
				if !strings.Contains("\n"+x.scrape(t, ctx), "\nrabbitdelay_up 0\n") {
					t.Errorf("scrape: no rabbitdelay_up 0")
				}
			}
			err := x.stop()
			logs := strings.Join(x.before, "\n") + "\n" + x.rest()
			if err != nil {
				t.Errorf("exporter after SIGTERM: %v, want exit 0", err)
			}
			if n := strings.Count(logs, `"level":"error"`); n != 1 {
				t.Errorf("%d error lines for 6 failed scrapes within a minute, want 1 (at most one a minute):\n%s", n, logs)
			}
			if !strings.Contains(logs, `"level":"error"`) || !strings.Contains(logs, "management API") || !strings.Contains(logs, c.want) {
				t.Errorf("no error naming the management API and %q in the log:\n%s", c.want, logs)
			}
			if strings.Contains(logs, pw) {
				t.Errorf("the log shows the password:\n%s", logs)
			}
		})
	}
}

// runningExporter is a `rabbitdelay exporter` child process (startExporter).
type runningExporter struct {
	cmd    *exec.Cmd
	addr   string
	before []string // the log lines up to the one with the address
	mu     sync.Mutex
	after  bytes.Buffer // the rest of its stderr
	done   chan struct{}
}

// startExporter runs `rabbitdelay exporter --listen 127.0.0.1:0 --log-format json` with the
// variables e, and returns once it logged the address it serves on.
func startExporter(t *testing.T, ctx context.Context, e map[string]string) *runningExporter {
	t.Helper()
	x := &runningExporter{cmd: exec.CommandContext(ctx, os.Args[0], "exporter", "--listen", "127.0.0.1:0", "--log-format", "json"),
		done: make(chan struct{})}
	x.cmd.Env = []string{childEnv + "=1"}
	for k, v := range e {
		x.cmd.Env = append(x.cmd.Env, k+"="+v)
	}
	stderr, err := x.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := x.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(stderr)
	for x.addr == "" && sc.Scan() {
		x.before = append(x.before, sc.Text())
		var line struct{ Address string }
		if json.Unmarshal(sc.Bytes(), &line) == nil {
			x.addr = line.Address
		}
	}
	if x.addr == "" {
		_ = x.cmd.Process.Kill()
		_ = x.cmd.Wait()
		t.Fatalf("exporter logged no address:\n%s", strings.Join(x.before, "\n"))
	}
	go func() {
		defer close(x.done)
		buf := make([]byte, 4096)
		for {
			n, err := stderr.Read(buf)
			x.mu.Lock()
			x.after.Write(buf[:n])
			x.mu.Unlock()
			if err != nil {
				return
			}
		}
	}()
	return x
}

// scrape GETs /metrics and returns the body.
func (x *runningExporter) scrape(t *testing.T, ctx context.Context) string {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+x.addr+"/metrics", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("scrape: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	return string(body)
}

// stop ends the exporter with SIGTERM and returns its exit error.
func (x *runningExporter) stop() error {
	if err := x.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		return err
	}
	<-x.done
	return x.cmd.Wait()
}

// rest is what the exporter wrote to stderr after its address.
func (x *runningExporter) rest() string {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.after.String()
}
