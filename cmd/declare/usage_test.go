package declare

// The tests of this file need no broker: what the CLI reads, refuses and prints before it
// connects.

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"os"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/kelseyhightower/envconfig"

	"github.com/delaykit/rabbitdelay/internal/admin"
	"github.com/delaykit/rabbitdelay/internal/delayspec"
)

// TestUsageErrors: every input that is wrong whatever the broker holds exits 2 before any
// connection (the URL names a closed port: a connection attempt would exit 1), with a message
// naming the flag (with its dashes) or the variable the user set, and what to write instead.
func TestUsageErrors(t *testing.T) {
	t.Parallel()
	const closed = "amqp://guest:guest@127.0.0.1:1/"
	cases := []struct {
		name     string
		env      map[string]string
		args     []string
		want     []string // in stderr
		notWants []string // in stdout and stderr
	}{
		{name: "unknown flag", args: []string{"apply", "--target", "o:topic", "--bogus"}, want: []string{"rabbitdelay apply: unknown flag --bogus", "rabbitdelay apply --help"}},
		{name: "flag without its value", args: []string{"apply", "--target", "o:topic", "--radix"}, want: []string{"--radix needs a value"}},
		{name: "argument", args: []string{"apply", "orders"}, want: []string{`unexpected argument "orders"`}},
		{name: "unknown command", args: []string{"deploy"}, want: []string{`unknown command "deploy"`, "plan, apply, status", "rabbitdelay --help"}},
		{name: "no arguments", args: nil, want: []string{"Usage: rabbitdelay <command>"}},
		{name: "export with a URL that does not parse", args: []string{"export", "--target", "o:topic", "--url", "amqp://u:p#w@h/prod"},
			want: []string{"percent-encode", "--vhost"}, notWants: []string{"p#w"}},
		{name: "unparsable bucket", args: []string{"apply", "--target", "o:topic", "--bucket", "30s", "--bucket", "5x"},
			want: []string{`--bucket 5x: bucket "5x": not a duration`}},
		{name: "unparsable bucket variable", env: map[string]string{"AMQPDELAY_BUCKETS": "30s,5x"}, args: []string{"plan", "--target", "o"},
			want: []string{`AMQPDELAY_BUCKETS="30s,5x": bucket "5x": not a duration`}},
		{name: "maximum delay beyond a Go duration", args: []string{"plan", "--target", "o:topic", "--max-delay", "10000000h"},
			want: []string{"--max-delay 10000000h: too long", "2562047h"}},
		{name: "unparsable unit", args: []string{"apply", "--target", "o:topic", "--unit", "abc"}, want: []string{"--unit abc: not a duration", "1ms"}},
		{name: "unit not whole milliseconds", args: []string{"apply", "--target", "o:topic", "--unit", "1500us"},
			want: []string{"--unit 1500us: want a whole number of milliseconds"}},
		{name: "unparsable variable", env: map[string]string{"AMQPDELAY_LADDER_MAX": "forever"}, args: []string{"apply", "--target", "o:topic"},
			want: []string{`AMQPDELAY_LADDER_MAX="forever": not a duration`}},
		{name: "radix 7", args: []string{"apply", "--target", "o:topic", "--radix", "7"}, want: []string{"--radix 7: want 2, 4, 8, 16, 32 or 64"}},
		{name: "radix variable 7", env: map[string]string{"AMQPDELAY_LADDER_RADIX": "7"}, args: []string{"plan", "--target", "o"},
			want: []string{`AMQPDELAY_LADDER_RADIX="7": want 2, 4, 8, 16, 32 or 64`}},
		{name: "explicit radix 0", args: []string{"apply", "--target", "o:topic", "--radix", "0"},
			want: []string{"--radix 0: want 2, 4, 8, 16, 32 or 64 (leave it unset"}},
		{name: "radix variable 0", env: map[string]string{"AMQPDELAY_LADDER_RADIX": "0"}, args: []string{"apply", "--target", "o:topic"},
			want: []string{`AMQPDELAY_LADDER_RADIX="0": want 2, 4, 8, 16, 32 or 64`}},
		{name: "explicit unit 0", args: []string{"apply", "--target", "o:topic", "--unit", "0"},
			want: []string{"--unit 0: want a whole number of milliseconds, at least 1ms"}},
		{name: "explicit max-delay 0", args: []string{"apply", "--target", "o:topic", "--max-delay", "0s"},
			want: []string{"--max-delay 0s: want at least one ladder unit"}},
		{name: "bad order", args: []string{"plan", "--target", "o", "--order", "sideways"},
			want: []string{"--order sideways: want top-split (the default), shortest-first, longest-first or top-first"}},
		{name: "max beyond the TTL limit", args: []string{"apply", "--target", "o:topic", "--max-delay", "100000h"}, want: []string{"Max 100000h0m0s", "allowed"}},
		{name: "no target", args: []string{"apply"}, want: []string{"no target exchange", "AMQPDELAY_TARGETS", "--target"}},
		{name: "bad target type", args: []string{"plan", "--target", "o:stream"},
			want: []string{`--target o:stream: target "o:stream": exchange type "stream": want direct, fanout, topic or headers`}},
		{name: "bad ready queue", args: []string{"apply", "--target", "o:topic", "--ready-queue", "rq-without-exchange"},
			want: []string{`--ready-queue rq-without-exchange: ready queue "rq-without-exchange": want queue=exchange:bindingkey`}},
		{name: "bad prefix", args: []string{"apply", "--target", "o:topic", "--prefix", "bad prefix/ü"}, want: []string{"prefix", "letters, digits"}},
		{name: "bad queue type", args: []string{"apply", "--target", "o:topic", "--queue-type", "stream"},
			want: []string{"--queue-type stream: want quorum (the default) or classic"}},
		{name: "bad plugin variable", env: map[string]string{"AMQPDELAY_PLUGIN": "yes"}, args: []string{"plan", "--target", "o"},
			want: []string{`AMQPDELAY_PLUGIN="yes": want off, auto (the default) or on`}},
		{name: "bad ready delivery limit", args: []string{"plan", "--target", "o", "--ready-delivery-limit", "0"},
			want: []string{"--ready-delivery-limit 0: want a positive number of returns"}},
		{name: "bad policy priority variable", env: map[string]string{"AMQPDELAY_POLICY_PRIORITY": "high"}, args: []string{"plan", "--target", "o"},
			want: []string{`AMQPDELAY_POLICY_PRIORITY="high": want a positive integer`}},
		{name: "bad management URL", args: []string{"apply", "--target", "o:topic", "--management-url", "ftp://x"}, want: []string{"management", "http://"}},
		{name: "bad log level", args: []string{"plan", "--target", "o", "--log-level", "loud"},
			want: []string{"--log-level loud: want trace, debug, info (the default), warn or error"}},
		{name: "bad log level variable", env: map[string]string{"AMQPDELAY_LOG_LEVEL": "abc"}, args: []string{"plan", "--target", "o"},
			want: []string{`AMQPDELAY_LOG_LEVEL="abc": want trace, debug, info (the default), warn or error`}},
		{name: "bad log format variable", env: map[string]string{"AMQPDELAY_LOG_FORMAT": "xml"}, args: []string{"plan", "--target", "o"},
			want: []string{`AMQPDELAY_LOG_FORMAT="xml": want console (the default) or json`}},
		{name: "timeout 0", args: []string{"apply", "--target", "o:topic", "--timeout", "0"}, want: []string{"--timeout 0: want a positive duration"}},
		{name: "negative timeout variable", env: map[string]string{"AMQPDELAY_TIMEOUT": "-1s"}, args: []string{"apply", "--target", "o:topic"},
			want: []string{`AMQPDELAY_TIMEOUT="-1s": want a positive duration`}},
		{name: "bad boolean", args: []string{"apply", "--target", "o:topic", "--dry-run=maybe"}, want: []string{"--dry-run maybe: want true or false"}},
		{name: "target named like the topology's own exchange", args: []string{"apply", "--target", "rabbitdelay.ladder.00:topic"},
			want: []string{`target "rabbitdelay.ladder.00"`, "topology's own objects", "another prefix", "another target name"}},
		{name: "ready queue named like the parking queue", args: []string{"apply", "--target", "o:topic", "--ready-queue", "rabbitdelay.parking=o:k"},
			want: []string{`ready queue "rabbitdelay.parking"`, "another queue name"}},
		{name: "target name over 255 bytes", args: []string{"apply", "--target", strings.Repeat("t", 300) + ":topic"},
			want: []string{"target", "300 bytes", "at most 255"}},
		{name: "ready queue binding key over 255 bytes", args: []string{"apply", "--target", "o:topic", "--ready-queue", "rq=o:" + strings.Repeat("k", 256)},
			want: []string{`ready queue "rq=o:`, "binding key is 256 bytes"}},
		{name: "management URL with a password and a wrong scheme", args: []string{"apply", "--target", "o:topic", "--management-url", "ftp://u:mgmtpw@h/"},
			want: []string{`"ftp://***@h/"`, "user:password@host:15672/"}, notWants: []string{"mgmtpw", "%22"}},
		{name: "unescaped # in the URL password", args: []string{"apply", "--target", "o:topic", "--url", "amqp://attack-user:S3cret#PW@127.0.0.1:1/v"},
			want: []string{`"amqp://***@127.0.0.1:1/v"`, "user:password@host:port/vhost", "percent-encode"}, notWants: []string{"S3c", "ret", "PW@"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			e := map[string]string{"AMQPDELAY_URL": closed, "AMQPDELAY_PLUGIN": "off"}
			for k, v := range c.env {
				e[k] = v
			}
			r := declare(t, e, c.args...)
			if r.code != 2 {
				t.Errorf("exit code %d, want 2\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
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
		})
	}
}

// TestFlagsWin: a flag wins over its variable; a repeated flag replaces the variable's whole
// list; a variable set but empty counts as unset.
func TestFlagsWin(t *testing.T) {
	t.Parallel()
	e := map[string]string{"AMQPDELAY_TARGETS": "from-env:topic", "AMQPDELAY_BUCKETS": "30s,5m", "AMQPDELAY_LADDER_RADIX": "8",
		"AMQPDELAY_PREFIX": "", "AMQPDELAY_LADDER_UNIT": "", "AMQPDELAY_PLUGIN": "off"}
	r := declare(t, e, "plan", "--target", "a", "--target", "b:topic", "--radix", "4")
	if r.code != 0 {
		t.Fatalf("plan: exit %d\n%s", r.code, r.stderr)
	}
	for _, want := range []string{
		"# prefix rabbitdelay; ladder unit 1ms, radix 4,",                    // flag; empty variables: defaults
		"MUST ALREADY EXIST (not declared): a\n",                             // flags, not the variable's from-env
		"\nb  ", "rabbitdelay.bucket.30000ms", "rabbitdelay.bucket.300000ms", // the variable, no flag
	} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("plan lacks %q:\n%s", want, r.stdout)
		}
	}
	if strings.Contains(r.stdout, "from-env") {
		t.Errorf("the variable's target is in the plan:\n%s", r.stdout)
	}
}

// TestPlural: the CLI's counts agree with their nouns.
func TestPlural(t *testing.T) {
	for _, c := range []struct {
		n          int
		noun, want string
	}{{0, "object", "0 objects"}, {1, "object", "1 object"}, {2, "policy", "2 policies"}, {1, "policy", "1 policy"}, {3, "key", "3 keys"}} {
		if got := plural(c.n, c.noun); got != c.want {
			t.Errorf("plural(%d, %q) = %q, want %q", c.n, c.noun, got, c.want)
		}
	}
}

// TestPlanCLI: plan needs no broker and prints JSON matching the package's plan, and a table.
func TestPlanCLI(t *testing.T) {
	t.Parallel()
	e := map[string]string{"AMQPDELAY_URL": "amqp://guest:guest@127.0.0.1:1/", "AMQPDELAY_TARGETS": "orders"}
	r := declare(t, e, "plan", "--output", "json")
	if r.code != 0 {
		t.Fatalf("plan: %d %s", r.code, r.stderr)
	}
	var p struct {
		Exchanges []admin.Exchange
		Queues    []admin.Queue
		Bindings  []admin.Binding
		Existing  []string `json:"existing_exchanges"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &p); err != nil {
		t.Fatal(err)
	}
	if len(p.Exchanges) < 14 || len(p.Queues) != 123+105+105 || len(p.Bindings) < 132+105+105 || len(p.Existing) != 1 {
		t.Errorf("plan: %d exchanges, %d queues, %d bindings, existing %v", len(p.Exchanges), len(p.Queues), len(p.Bindings), p.Existing)
	}
	tab := declare(t, e, "plan")
	for _, want := range []string{"rabbitdelay.ladder.07.15", "rabbitdelay.dispatch", "MUST ALREADY EXIST (not declared): orders", "top-split (8 levels, 120 queues and 105 last-hop queues, 105 first-hop queues); 0 buckets"} {
		if !strings.Contains(tab.stdout, want) {
			t.Errorf("plan table lacks %q:\n%s", want, tab.stdout)
		}
	}
}

// BenchmarkPlan: the whole CLI in process (reading the variables and flags, planning the
// default topology, writing the table), as an operator waits for it.
func BenchmarkPlan(b *testing.B) {
	b.Setenv("AMQPDELAY_TARGETS", "orders")
	ctx := context.Background()
	for b.Loop() {
		if code := run(ctx, []string{"plan"}, io.Discard, io.Discard); code != 0 {
			b.Fatalf("plan: exit %d", code)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Microseconds())/1000/float64(b.N), "ms/plan")
}

// TestHelpListsEveryVariable: the variables `rabbitdelay --help` names are exactly those the one
// reader reads (delayspec.ReadEnv of the CLI's variables, which embed delayspec.Env, the
// library's), each of them set alone reaches the settings, and every command's help works.
func TestHelpListsEveryVariable(t *testing.T) {
	r := declare(t, nil, "--help")
	if r.code != 0 {
		t.Fatalf("--help: exit %d", r.code)
	}
	var listed []string
	for _, m := range regexp.MustCompile(`env (AMQPDELAY_[A-Z_]+)`).FindAllStringSubmatch(r.stdout, -1) {
		listed = append(listed, m[1])
	}
	read := envKeys(t, &variables{})
	sort.Strings(listed)
	sort.Strings(read)
	if strings.Join(listed, " ") != strings.Join(read, " ") || len(read) < 20 {
		t.Errorf("--help lists\n%v\nthe reader reads\n%v", listed, read)
	}
	for _, v := range envKeys(t, &delayspec.Env{}) {
		if !slices.Contains(listed, v) {
			t.Errorf("--help does not list %s, which the library reads", v)
		}
	}
	sample := map[string]string{
		"AMQPDELAY_URL": "amqp://u:p@h/v", "AMQPDELAY_TLS_CA": "ca.pem", "AMQPDELAY_TLS_CERT": "c.pem", "AMQPDELAY_TLS_KEY": "k.pem",
		"AMQPDELAY_PREFIX": "p", "AMQPDELAY_TARGETS": "o", "AMQPDELAY_BUCKETS": "5s", "AMQPDELAY_LADDER_UNIT": "2ms",
		"AMQPDELAY_LADDER_RADIX": "8", "AMQPDELAY_LADDER_MAX": "1h", "AMQPDELAY_LADDER_ORDER": "longest-first", "AMQPDELAY_PLUGIN": "on",
		"AMQPDELAY_QUEUE_TYPE": "classic", "AMQPDELAY_READY_QUEUES": "q=o:k", "AMQPDELAY_READY_DELIVERY_LIMIT": "5",
		"AMQPDELAY_POLICY_PRIORITY": "5", "AMQPDELAY_SHARDS": "3", "AMQPDELAY_MANAGEMENT_URL": "http://h:15672/", "AMQPDELAY_TIMEOUT": "5s",
		"AMQPDELAY_LOG_FORMAT": "json", "AMQPDELAY_LOG_LEVEL": "debug",
	}
	for _, v := range listed {
		t.Setenv(v, "") // restored when the test ends
		os.Unsetenv(v)
	}
	parsed := func() []any { // what the commands use
		var s settings
		if _, err := parse("plan", commonOptions(&s), nil, &s); err != nil {
			t.Fatal(err)
		}
		v := s.vars
		return []any{v.Conn(), v.Spec(), v.ManagementURL, v.Timeout, v.LogFormat, v.LogLevel}
	}
	unset := parsed()
	for _, v := range listed {
		val, ok := sample[v]
		if !ok {
			t.Errorf("%s has no sample value in this test: add one", v)
			continue
		}
		t.Setenv(v, val)
		if reflect.DeepEqual(parsed(), unset) {
			t.Errorf("%s=%q changes nothing: the reader does not read it", v, val)
		}
		os.Unsetenv(v)
	}
	for _, c := range commands() {
		h := declare(t, nil, c.name, "--help")
		if h.code != 0 || !strings.Contains(h.stdout, "Usage: rabbitdelay "+c.name) || !strings.Contains(h.stdout, "--url") {
			t.Errorf("%s --help: exit %d\n%s", c.name, h.code, h.stdout)
		}
	}
	if r := declare(t, nil); r.code != 2 {
		t.Errorf("no arguments: exit %d, want 2", r.code)
	}
}

// envKeys lists the variables envconfig reads into spec.
func envKeys(t *testing.T, spec any) []string {
	t.Helper()
	var keys bytes.Buffer
	if err := envconfig.Usagef("", spec, &keys, "{{range .}}{{usage_key .}}\n{{end}}"); err != nil {
		t.Fatal(err)
	}
	return strings.Fields(keys.String())
}
