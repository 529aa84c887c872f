//go:build integration

package declare

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/delaykit/rabbitdelay/integration/brokertest"
	"github.com/delaykit/rabbitdelay/internal/admin"
	"github.com/delaykit/rabbitdelay/internal/delayspec"
	"github.com/delaykit/rabbitdelay/internal/pluginprobe"
	"github.com/delaykit/rabbitdelay/plugin"
)

// applyOrFail runs `rabbitdelay apply` with the variables e and fails the test unless it exits 0.
// Without a test vhost of its own (no management API) it tears the topology and the target
// exchange down when the test ends.
func applyOrFail(t *testing.T, env *brokertest.Env, e map[string]string, target string) {
	t.Helper()
	if r := declare(t, e, "apply"); r.code != 0 {
		t.Fatalf("apply: %d %s", r.code, r.stderr)
	}
	if env.VHost == "/" {
		t.Cleanup(func() {
			declare(t, e, "teardown", "--force")
			_ = env.Channel(t).ExchangeDelete(target, false, false)
		})
	}
}

// vars is the environment of a test: its own vhost and prefix, the management API.
func vars(e *brokertest.Env, extra ...string) map[string]string {
	m := map[string]string{"AMQPDELAY_URL": e.URL, "AMQPDELAY_PREFIX": e.Prefix, "AMQPDELAY_PLUGIN": "off"}
	if e.Broker.ManagementURL != "" {
		m["AMQPDELAY_MANAGEMENT_URL"] = e.Broker.ManagementURL
	}
	for i := 0; i+1 < len(extra); i += 2 {
		m[extra[i]] = extra[i+1]
	}
	return m
}

// objects lists the exchanges and queues of the env's vhost whose names start with the prefix.
func objects(t *testing.T, e *brokertest.Env) []string {
	t.Helper()
	if e.Broker.ManagementURL == "" {
		return nil
	}
	var out []string
	for _, kind := range []string{"exchanges", "queues"} {
		var list []struct{ Name string }
		if err := e.Broker.Management("GET", "api/"+kind+"/"+url.PathEscape(e.VHost), nil, &list); err != nil {
			t.Fatal(err)
		}
		for _, x := range list {
			if strings.HasPrefix(x.Name, e.Prefix) {
				out = append(out, kind+" "+x.Name)
			}
		}
	}
	return out
}

// TestBadInput: every bad input that only the broker can reveal (a target that does not
// exist, a wrong password, a missing vhost or permission, ...) gets a clear message, a
// non-zero exit code, and nothing is declared. TestUsageErrors has the others.
func TestBadInput(t *testing.T) {
	t.Parallel()
	env := brokertest.NewEnv(t)
	u, _ := url.Parse(env.URL)
	host := u.Host
	const secret = "s3cr3t-Pa55word"
	badPassword := "amqp://guest:" + secret + "@" + host + u.EscapedPath()

	// A user without configure permission on the vhost.
	weakUser := ""
	if env.Broker.ManagementURL != "" {
		weakUser = env.Prefix + "-weak"
		if err := env.Broker.Management("PUT", "api/users/"+url.PathEscape(weakUser), map[string]string{"password": "weakpw", "tags": ""}, nil); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = env.Broker.Management("DELETE", "api/users/"+url.PathEscape(weakUser), nil, nil) })
		perm := map[string]string{"configure": "^$", "write": ".*", "read": ".*"}
		if err := env.Broker.Management("PUT", "api/permissions/"+url.PathEscape(env.VHost)+"/"+url.PathEscape(weakUser), perm, nil); err != nil {
			t.Fatal(err)
		}
	}
	weakURL := "amqp://" + weakUser + ":weakpw@" + host + u.EscapedPath()

	cases := []struct {
		name     string
		env      map[string]string
		args     []string
		code     int
		want     []string
		mgmt     bool // needs the management API
		noPlugin bool // needs a broker without the delayed-message plugin
		notWants []string
	}{
		{name: "target does not exist", args: []string{"apply", "--target", "nope-missing"}, code: 2, want: []string{"nope-missing", "does not exist", "nope-missing:topic"}},
		{name: "ready queue exchange does not exist", args: []string{"apply", "--target", "o:topic", "--ready-queue", "rq=ghost:k"}, code: 2, want: []string{"ghost"}},
		{name: "broker unreachable", env: map[string]string{"AMQPDELAY_URL": "amqp://guest:" + secret + "@127.0.0.1:1/"}, args: []string{"apply", "--target", "o:topic"},
			code: 1, want: []string{"connect to", "127.0.0.1:1"}, notWants: []string{secret}},
		{name: "wrong password", env: map[string]string{"AMQPDELAY_URL": badPassword}, args: []string{"apply", "--target", "o:topic"},
			code: 1, want: []string{"password"}, notWants: []string{secret}},
		{name: "wrong password in flag", args: []string{"status", "--target", "o:topic", "--url", badPassword},
			code: 1, want: []string{"password"}, notWants: []string{secret}},
		{name: "vhost does not exist", env: map[string]string{"AMQPDELAY_URL": brokertest.WithVHost(env.Broker.URL, "nope-"+env.Prefix)}, args: []string{"apply", "--target", "o:topic"},
			code: 1, want: []string{"vhost", "nope-" + env.Prefix}},
		{name: "user without configure permission", mgmt: true, env: map[string]string{"AMQPDELAY_URL": weakURL}, args: []string{"apply", "--target", "o:topic"},
			code: 1, want: []string{"access refused", "configure permission"}, notWants: []string{"weakpw"}},
		{name: "user without configure permission, plugin probe", mgmt: true, env: map[string]string{"AMQPDELAY_URL": weakURL, "AMQPDELAY_PLUGIN": "auto", "AMQPDELAY_MANAGEMENT_URL": ""},
			args: []string{"apply", "--target", "o:topic"}, code: 1, want: []string{"access refused", "configure permission"}},
		{name: "missing amq.* target", args: []string{"apply", "--target", "amq.rdt-missing"}, code: 2,
			want: []string{`"amq.rdt-missing"`, "RabbitMQ's own exchanges", "another name"}, notWants: []string{"amq.rdt-missing:topic"}},
		{name: "missing amq.* and other targets", args: []string{"apply", "--target", "amq.rdt-missing", "--target", "rdt-missing-x"}, code: 2,
			want: []string{"RabbitMQ's own exchanges", "rdt-missing-x:topic"}, notWants: []string{"amq.rdt-missing:topic"}},
		{name: "plugin on without the plugin", args: []string{"apply", "--target", "o:topic", "--plugin", "on"}, code: 1, want: []string{"plugin"}, noPlugin: true},
	}
	hasPlugin, err := pluginprobe.Probe(context.Background(), func(ctx context.Context) (*amqp.Connection, error) {
		return amqp.DialConfig(env.URL, amqp.Config{Dial: amqp.DefaultDial(10 * time.Second)})
	}, env.Prefix+".plugin-probe")
	if err != nil {
		t.Fatalf("probing the broker for the delayed-message plugin: %v", err)
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if c.mgmt && env.Broker.ManagementURL == "" {
				t.Skip("needs the management API to create a user")
			}
			if c.noPlugin && hasPlugin {
				t.Skip("needs a broker without the delayed-message plugin; this one has it (AMQP_URL)")
			}
			e := vars(env)
			for k, v := range c.env {
				e[k] = v
			}
			r := declare(t, e, c.args...)
			if r.code != c.code {
				t.Errorf("exit code %d, want %d\nstdout: %s\nstderr: %s", r.code, c.code, r.stdout, r.stderr)
			}
			for _, w := range c.want {
				if !strings.Contains(r.stderr, w) {
					t.Errorf("stderr lacks %q:\n%s", w, r.stderr)
				}
			}
			for _, nw := range c.notWants {
				if strings.Contains(r.stderr+r.stdout, nw) {
					t.Errorf("output contains %q:\n%s%s", nw, r.stdout, r.stderr)
				}
			}
			// On RabbitMQ 4.3 the plugin cannot be enabled: the error says so instead of "enable it".
			v := admin.ServerVersion(env.Dial(t))
			if c.noPlugin && plugin.ErrUnsupported(v) != nil && !strings.Contains(r.stderr, "Mnesia, which RabbitMQ 4.3 removed") {
				t.Errorf("RabbitMQ %s, --plugin on: the error does not say 4.3 cannot load the plugin:\n%s", v, r.stderr)
			}
			if got := objects(t, env); len(got) != 0 {
				t.Fatalf("objects were declared: %v", got)
			}
		})
	}
}

// TestApplyTwice: apply declares the topology, a second apply reports everything unchanged;
// flags win over variables. It uses classic queues and a shorter ladder to keep the shared
// broker's load down; integration.BenchmarkApplyDefault times the default topology.
func TestApplyTwice(t *testing.T) {
	t.Parallel()
	env := brokertest.NewEnv(t)
	if env.Broker.ManagementURL == "" {
		t.Skip("needs the management API to report bindings as unchanged")
	}
	e := vars(env, "AMQPDELAY_PREFIX", "from-env", "AMQPDELAY_TARGETS", "ignored:topic", "AMQPDELAY_BUCKETS", "30s,5m",
		"AMQPDELAY_QUEUE_TYPE", "classic", "AMQPDELAY_LADDER_RADIX", "8", "AMQPDELAY_LADDER_MAX", "24h")
	args := []string{"apply", "--prefix", env.Prefix, "--target", "orders:topic", "--ready-queue", "orders.timeouts=orders:order.timeout.#"}
	first := declare(t, e, args...)
	if first.code != 0 {
		t.Fatalf("apply: exit %d\n%s\n%s", first.code, first.stdout, first.stderr)
	}
	t.Logf("first apply: %v", first.elapsed)
	if strings.Contains(first.stdout, "from-env") || strings.Contains(first.stdout, "ignored") {
		t.Error("variables won over flags")
	}
	if !strings.Contains(first.stdout, env.Prefix+".bucket.300000ms") {
		t.Error("AMQPDELAY_BUCKETS (no flag) not applied")
	}
	if strings.Contains(first.stdout, "unchanged,") || !strings.Contains(first.stdout, ", 0 unchanged") {
		t.Errorf("first apply on an empty vhost reports unchanged objects:\n%s", first.stdout)
	}
	second := declare(t, e, args...)
	if second.code != 0 {
		t.Fatalf("second apply: exit %d\n%s", second.code, second.stderr)
	}
	// Nothing changed: no row, one line counting the unchanged objects, the summary.
	lines := strings.Split(strings.TrimSpace(second.stdout), "\n")
	if len(lines) != 2 || !strings.HasSuffix(lines[0], " objects unchanged, not listed (--verbose lists them)") {
		t.Errorf("second apply prints more than the count of unchanged objects and the summary:\n%s", second.stdout)
	}
	if !strings.HasPrefix(lines[len(lines)-1], "apply: 0 created, ") || strings.Contains(lines[len(lines)-1], "bound") {
		t.Errorf("second apply summary: %q", lines[len(lines)-1])
	}
	verbose := declare(t, e, append(args, "-v")...)
	if verbose.code != 0 || !regexpLine(verbose.stdout, "unchanged", "queue") || strings.Contains(verbose.stdout, "not listed") {
		t.Errorf("apply -v lists no unchanged object: exit %d\n%s", verbose.code, verbose.stdout)
	}
	// --dry-run on an existing topology: all unchanged, nothing to declare.
	dry := declare(t, e, append(args, "--dry-run")...)
	if dry.code != 0 || !strings.Contains(dry.stdout, "apply --dry-run (nothing declared): 0 created, ") || strings.Contains(dry.stdout, "to declare") {
		t.Errorf("dry run: exit %d\n%s", dry.code, dry.stdout)
	}
}

// TestApplyConflictExit2: a queue pre-declared with another TTL: exit 2, the message names the
// queue, the argument and both values; its message is still there; nothing else declared.
func TestApplyConflictExit2(t *testing.T) {
	t.Parallel()
	env := brokertest.NewEnv(t)
	ch := env.Channel(t)
	names := delayspec.Names{Prefix: env.Prefix}
	victim := names.LadderQueue(2, 3)
	if _, err := ch.QueueDeclare(victim, true, false, false, false, amqp.Table{"x-queue-type": "quorum", "x-message-ttl": int64(999_999)}); err != nil {
		t.Fatal(err)
	}
	if env.VHost == "/" {
		t.Cleanup(func() { _, _ = env.Channel(t).QueueDelete(victim, false, false, false) })
	}
	if err := ch.Publish("", victim, false, false, amqp.Publishing{Body: []byte("still here")}); err != nil {
		t.Fatal(err)
	}
	r := declare(t, vars(env), "apply", "--target", env.Name("t")+":topic")
	if r.code != 2 {
		t.Fatalf("exit %d, want 2\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	// The broker names the first argument that differs (here the dead-letter exchange, which the
	// pre-declared queue lacks); both values are quoted.
	for _, want := range []string{victim, "exists with", "wants", "delete_queue", "apply never deletes"} {
		if !strings.Contains(r.stderr, want) {
			t.Errorf("stderr lacks %q:\n%s", want, r.stderr)
		}
	}
	if !regexpLine(r.stdout, "conflict", victim) || strings.Contains(r.stdout, "\nunchanged ") {
		t.Errorf("report lacks the conflict, or lists unchanged objects:\n%s", r.stdout)
	}
	time.Sleep(100 * time.Millisecond)
	q, err := env.Channel(t).QueueDeclarePassive(victim, true, false, false, false, nil)
	if err != nil || q.Messages != 1 {
		t.Errorf("victim: %+v %v; want its message", q, err)
	}
	if got := objects(t, env); len(got) != 1 {
		t.Errorf("objects after a conflict: %v; want only the pre-declared queue", got)
	}
}

// lastLine is out's last non-empty line.
func lastLine(out string) string {
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	return lines[len(lines)-1]
}

func regexpLine(out, prefix, contains string) bool {
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, prefix+" ") && strings.Contains(l, contains) {
			return true
		}
	}
	return false
}

// TestExportCLI: export writes definitions for the URL's vhost (or --vhost), leaving out the
// plugin exchange under --plugin auto and including it under --plugin on.
func TestExportCLI(t *testing.T) {
	t.Parallel()
	e := map[string]string{"AMQPDELAY_URL": "amqp://u:p@h:5672/prod", "AMQPDELAY_TARGETS": "orders:topic"}
	for _, c := range []struct {
		args   []string
		vhost  string
		plugin bool
	}{
		{[]string{"export"}, "prod", false},
		{[]string{"export", "--vhost", "other", "--plugin", "on"}, "other", true},
	} {
		r := declare(t, e, c.args...)
		if r.code != 0 {
			t.Fatalf("%v: %d %s", c.args, r.code, r.stderr)
		}
		var d admin.Definitions
		if err := json.Unmarshal([]byte(r.stdout), &d); err != nil {
			t.Fatal(err)
		}
		hasPlugin := false
		for _, x := range d.Exchanges {
			if x.VHost != c.vhost {
				t.Errorf("%v: exchange %s in vhost %q, want %q", c.args, x.Name, x.VHost, c.vhost)
			}
			hasPlugin = hasPlugin || x.Type == admin.PluginExchangeType
		}
		if hasPlugin != c.plugin {
			t.Errorf("%v: plugin exchange exported: %v, want %v", c.args, hasPlugin, c.plugin)
		}
	}
}

// TestNoPasswordInOutput: whatever the URL password holds (# ? / @ : % space, raw or
// percent-encoded), no 3-byte piece of it appears in the CLI's output, at log level trace in
// both log formats (JSON-decoded too). Raw passwords with # ? / % or space fail validation
// (exit 2, no connection); the percent-encoded wrong password reaches the broker (exit 1).
func TestNoPasswordInOutput(t *testing.T) {
	t.Parallel()
	env := brokertest.NewEnv(t)
	u, _ := url.Parse(env.URL)
	passwords := []string{"S3cretQ#PWzk", "Zq7?Kx9vWy", "Zq7/Kx9vWy", "Zq7@Kx9@vWy", "Zq7:Kx9:vWy", "Zq7%Kx9vWy", "Zq7 Kx9 vWy", "Zq#7?K/x@9:v%W y", "123/456#789"}
	// ':' and '@' are valid raw (the last '@' ends the user information), so these URLs reach
	// the broker, which answers a wrong password after about 3 s: one format each.
	oneFormat := map[string]string{"Zq7@Kx9@vWy": "json", "Zq7:Kx9:vWy": "console"}
	for _, pw := range passwords {
		raw := "amqp://attack-user:" + pw + "@" + u.Host + u.EscapedPath()
		encoded := (&url.URL{Scheme: "amqp", User: url.UserPassword("attack-user", pw), Host: u.Host, Path: u.Path}).String()
		urls := []string{raw}
		if pw == "Zq#7?K/x@9:v%W y" { // one broker round trip per format: the broker is shared
			urls = append(urls, encoded)
		}
		for _, format := range []string{"json", "console"} {
			for i, target := range urls {
				if f, ok := oneFormat[pw]; ok && target == raw && f != format {
					continue // valid raw: it reaches the broker, so once (in one format) is enough
				}
				t.Run(fmt.Sprintf("%s/%s/%d", pw, format, i), func(t *testing.T) {
					t.Parallel() // the broker answers a wrong password after about 3 s
					r := declare(t, vars(env), "apply", "--target", "o:topic", "--log-level", "trace", "--log-format", format, "--url", target)
					out := r.stdout + r.stderr
					if format == "json" {
						out += jsonStrings(t, r.stderr)
					}
					// The host and the test's vhost (a random hex suffix) are not the password: a
					// suffix holding "456" must not count as a piece of "123/456#789".
					scan := strings.ReplaceAll(out, u.Host, "")
					if env.VHost != "/" {
						scan = strings.ReplaceAll(scan, env.VHost, "")
					}
					if l := pieces(scan, pw); len(l) > 0 {
						t.Errorf("%s, %s: output shows password %q (pieces %q):\n%s", Redacted(target), format, pw, l, out)
					}
					if r.code == 0 {
						t.Errorf("%s: exit 0", Redacted(target))
					}
					if target == encoded && (r.code != 1 || !strings.Contains(out, "password")) {
						t.Errorf("encoded wrong password: exit %d\n%s", r.code, out)
					}
				})
			}
		}
	}
}

// Redacted names a test URL in a failure message without its password.
func Redacted(u string) string {
	if i := strings.LastIndex(u, "@"); i >= 0 {
		return "...@" + u[i+1:]
	}
	return u
}

// pieces returns the substrings of at least 3 bytes of pw that hold a letter or digit and that
// out contains.
func pieces(out, pw string) []string {
	var found []string
	for i := 0; i+3 <= len(pw); i++ {
		for j := i + 3; j <= len(pw); j++ {
			p := pw[i:j]
			if strings.ContainsAny(p, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789") && strings.Contains(out, p) {
				found = append(found, p)
			}
		}
	}
	return found
}

// jsonStrings decodes each JSON log line and returns its string values, one a line.
func jsonStrings(t *testing.T, logs string) string {
	var b strings.Builder
	for _, line := range strings.Split(strings.TrimSpace(logs), "\n") {
		if line == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Errorf("log line is not JSON: %q", line)
			continue
		}
		for _, v := range m {
			if s, ok := v.(string); ok {
				b.WriteString(s + "\n")
			}
		}
	}
	return b.String()
}

// TestPolicyCLI: without the management API apply declares everything and prints the
// rabbitmqctl commands for the policies it cannot set; with it, apply sets them; an operator
// policy that makes delays early makes apply and status exit 1 naming the policy, key, value,
// object and effect; teardown deletes the policies.
func TestPolicyCLI(t *testing.T) {
	t.Parallel()
	env := brokertest.NewEnv(t)
	if env.Broker.ManagementURL == "" {
		t.Skip("needs the management API")
	}
	target := env.Name("orders")
	e := vars(env, "AMQPDELAY_TARGETS", target+":topic", "AMQPDELAY_LADDER_RADIX", "4", "AMQPDELAY_LADDER_MAX", "1m")
	noMgmt := vars(env, "AMQPDELAY_TARGETS", target+":topic", "AMQPDELAY_LADDER_RADIX", "4", "AMQPDELAY_LADDER_MAX", "1m")
	delete(noMgmt, "AMQPDELAY_MANAGEMENT_URL")
	r := declare(t, noMgmt, "apply")
	queuesPolicy := env.Prefix + ".delay-queues"
	if r.code != 0 || !strings.Contains(r.stdout, "policies are NOT set") ||
		!strings.Contains(r.stdout, "rabbitmqctl set_policy -p '"+env.VHost+"' --apply-to queues --priority 1000000 '"+queuesPolicy+"'") ||
		!strings.Contains(lastLine(r.stdout), "; 3 policies NOT set (see the WARNING above)") {
		t.Fatalf("apply without the management API: exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	// The printed delay-queue policy is this broker's: on 4.x with delivery-limit -1, which
	// Apply sets through the management API there (and 3.x refuses).
	if four := admin.ServerMajor(env.Dial(t)) >= 4; four != strings.Contains(r.stdout, `"delivery-limit":-1`) {
		t.Errorf("apply without the management API on RabbitMQ %d prints the policies:\n%s", admin.ServerMajor(env.Dial(t)), r.stdout)
	}
	r = declare(t, e, "apply")
	if r.code != 0 || !regexpLine(r.stdout, "created", queuesPolicy) || !regexpLine(r.stdout, "created", env.Prefix+".targets") ||
		!strings.Contains(lastLine(r.stdout), "; 3 policies in place") {
		t.Fatalf("apply with the management API: exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	if err := env.Broker.Management("PUT", "api/operator-policies/"+url.PathEscape(env.VHost)+"/op",
		map[string]any{"pattern": ".*", "apply-to": "queues", "definition": map[string]any{"message-ttl": 1000}}, nil); err != nil {
		t.Fatal(err)
	}
	want := `operator policy "op" sets message-ttl = 1000 on queue "` + env.Prefix + `.ladder.`
	for _, cmd := range []string{"apply", "status"} {
		r = declare(t, e, cmd)
		if r.code != 1 || !strings.Contains(r.stderr, want) || !strings.Contains(r.stderr, ": early: ") || !strings.Contains(r.stdout, "POLICY PROBLEMS") {
			t.Errorf("%s under an operator message-ttl: exit %d, want 1 naming it\n%s\n%s", cmd, r.code, r.stdout, r.stderr)
		}
	}
	r = declare(t, e, "teardown", "--force")
	if r.code != 0 || !regexpLine(r.stdout, "deleted", queuesPolicy) {
		t.Errorf("teardown: exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	_ = env.Channel(t).ExchangeDelete(target, false, false)
}

// TestApplyMistypedReadyQueueExchange: a ready queue whose exchange is a typo of a target
// (shops for shop) makes apply exit 2 naming the ready queue and the variable it comes from
// (AMQPDELAY_READY_QUEUES, --ready-queue), not the targets', and the target it resembles, which
// this apply would declare; nothing is declared.
func TestApplyMistypedReadyQueueExchange(t *testing.T) {
	t.Parallel()
	env := brokertest.NewEnv(t)
	target := env.Name("shop")
	typo := target + "s"
	q := env.Name("plain")
	e := vars(env, "AMQPDELAY_TARGETS", target+":topic", "AMQPDELAY_READY_QUEUES", q+"="+typo+":order.#", "AMQPDELAY_LADDER_MAX", "1m")
	before := objects(t, env)
	ap := declare(t, e, "apply")
	for _, want := range []string{`ready queue "` + q + `" binds to exchange "` + typo + `"`, "AMQPDELAY_READY_QUEUES, --ready-queue",
		`the targets declare "` + target + `", similar to "` + typo + `"`} {
		if ap.code != 2 || !strings.Contains(ap.stderr, want) {
			t.Errorf("apply with a mistyped ready queue exchange: exit %d, want 2 saying %q\n%s", ap.code, want, ap.stderr)
		}
	}
	if strings.Contains(ap.stderr, "AMQPDELAY_TARGETS, --target") {
		t.Errorf("apply points at the targets for a ready queue's typo:\n%s", ap.stderr)
	}
	if after := objects(t, env); !slices.Equal(before, after) {
		t.Errorf("apply declared something: %d objects before, %d after", len(before), len(after))
	}
}

// TestApplyRefusesAnotherPrefixsObjects: with prefix B's topology applied in the vhost, an apply
// of prefix A whose target is one of B's exchanges, or whose ready queue is one of B's queues
// (delay queue, parking queue, revocation stream) or is bound to one of B's exchanges, exits 2
// naming the object and prefix B, and declares nothing; a name of that shape for a prefix with
// no topology is the user's, and applies.
func TestApplyRefusesAnotherPrefixsObjects(t *testing.T) {
	t.Parallel()
	env := brokertest.NewEnv(t)
	b := env.Prefix + "-b"
	nb := delayspec.Names{Prefix: b}
	eb := vars(env, "AMQPDELAY_PREFIX", b, "AMQPDELAY_TARGETS", env.Name("b-orders")+":topic", "AMQPDELAY_LADDER_MAX", "1m")
	applyOrFail(t, env, eb, env.Name("b-orders"))
	target := env.Name("a-orders")
	for _, c := range []struct{ name, targets, ready, object string }{
		{"target: B's dispatch exchange", nb.Dispatch() + ":headers", "", nb.Dispatch()},
		{"target: B's entry exchange", nb.LadderEntryExchange(nb.LadderQueue(0, 1)) + ":fanout", "", nb.LadderEntryExchange(nb.LadderQueue(0, 1))},
		{"ready queue: B's ladder queue", target + ":topic", nb.LadderQueue(0, 1) + "=" + target + ":#", nb.LadderQueue(0, 1)},
		{"ready queue: B's parking queue", target + ":topic", nb.Parking() + "=" + target + ":#", nb.Parking()},
		{"ready queue: B's revocation stream", target + ":topic", nb.Revoked() + "=" + target + ":#", nb.Revoked()},
		{"ready queue bound to B's dispatch exchange", target + ":topic", env.Name("q") + "=" + nb.Dispatch() + ":#", nb.Dispatch()},
	} {
		e := vars(env, "AMQPDELAY_TARGETS", c.targets, "AMQPDELAY_READY_QUEUES", c.ready, "AMQPDELAY_LADDER_MAX", "1m")
		before := objects(t, env)
		r := declare(t, e, "apply")
		if r.code != 2 || !strings.Contains(r.stderr, strconv.Quote(c.object)) || !strings.Contains(r.stderr, `prefix "`+b+`"`) {
			t.Errorf("%s: exit %d, want 2 naming %q and prefix %q\n%s", c.name, r.code, c.object, b, r.stderr)
		}
		if after := objects(t, env); !slices.Equal(before, after) {
			t.Errorf("%s: apply declared something: %d objects before, %d after", c.name, len(before), len(after))
		}
	}
	lookalike := env.Name("shop") + ".dispatch" // no topology of prefix <env>.shop
	e := vars(env, "AMQPDELAY_TARGETS", lookalike+":topic", "AMQPDELAY_LADDER_MAX", "1m")
	if r := declare(t, e, "apply"); r.code != 0 {
		t.Errorf("apply with target %q (no topology of its prefix): exit %d\n%s", lookalike, r.code, r.stderr)
	}
}

// testMain runs the tests against the broker brokertest finds or starts.
func testMain(m *testing.M) { brokertest.Main(m) }
