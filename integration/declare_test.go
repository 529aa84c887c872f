//go:build integration

package integration

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/delaykit/rabbitdelay/integration/brokertest"
	"github.com/delaykit/rabbitdelay/topology"
	"github.com/delaykit/rabbitdelay/ttlbuckets"
)

// TestDeclareBinary builds cmd/declare and runs it as operators do, configured only through
// AMQPDELAY_* variables, checking the documented exit codes of the real process: plan 0, apply
// with a missing target 2, apply 0 twice (the second changes nothing), status 0, teardown
// --force 0, status of the torn-down topology 1, saying it is not declared.
func TestDeclareBinary(t *testing.T) {
	t.Parallel()
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("the go tool is not on PATH; cannot build cmd/declare")
	}
	env := brokertest.NewEnv(t)
	bin := filepath.Join(t.TempDir(), "declare")
	build := exec.Command(goTool, "build", "-o", bin, "../cmd/declare")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/declare: %v\n%s", err, out)
	}
	vars := []string{
		"AMQPDELAY_URL=" + env.URL, "AMQPDELAY_PREFIX=" + env.Prefix, "AMQPDELAY_PLUGIN=off",
		"AMQPDELAY_QUEUE_TYPE=classic", "AMQPDELAY_LADDER_RADIX=4", "AMQPDELAY_LADDER_MAX=10m",
	}
	target := env.Name("orders")
	// An obsolete binding of an earlier version (topology.Plan.Obsolete), made by hand: status
	// names it and exits 1, apply removes it. Listing bindings needs the management API.
	spec := topology.Spec{Prefix: env.Prefix, Targets: topology.Targets{{Name: target, Type: "topic"}}, Plugin: topology.PluginOff,
		QueueType: topology.Classic, Ladder: ttlbuckets.Ladder{Radix: 4, Max: 10 * time.Minute}}
	p, err := topology.NewPlan(spec)
	if err != nil {
		t.Fatal(err)
	}
	bindObsolete := func() {
		b := p.Obsolete[0]
		if err := env.Channel(t).QueueBind(b.Destination, b.RoutingKey, b.Source, false, b.Args); err != nil {
			t.Fatalf("bind %s: %v", b, err)
		}
	}
	mgmt := ""
	if env.Broker.ManagementURL != "" {
		mgmt = "AMQPDELAY_MANAGEMENT_URL=" + env.Broker.ManagementURL
	}
	type step struct {
		args   []string
		extra  string // one more variable
		code   int
		stdout string // substring
		stderr string
		before func()
		mgmt   bool // with the management API only
	}
	steps := []step{
		{args: []string{"plan"}, extra: "AMQPDELAY_TARGETS=" + target, code: 0, stdout: "MUST ALREADY EXIST (not declared): " + target, stderr: ""},
		{args: []string{"apply"}, extra: "AMQPDELAY_TARGETS=" + target, code: 2, stdout: "", stderr: "does not exist"},
		{args: []string{"apply"}, extra: "AMQPDELAY_TARGETS=" + target + ":topic", code: 0, stdout: " created, 0 unchanged", stderr: ""},
		{args: []string{"apply"}, extra: "AMQPDELAY_TARGETS=" + target + ":topic", code: 0, stdout: "apply: 0 created, ", stderr: ""},
		{args: []string{"status"}, extra: "AMQPDELAY_TARGETS=" + target + ":topic", code: 0, stdout: "exchanges: ", stderr: ""},
		{args: []string{"status"}, extra: "AMQPDELAY_TARGETS=" + target + ":topic", code: 1, stdout: "OBSOLETE BINDINGS: 1 binding", before: bindObsolete, mgmt: true},
		{args: []string{"apply"}, extra: "AMQPDELAY_TARGETS=" + target + ":topic", stdout: "1 obsolete binding of an earlier version removed", mgmt: true},
		{args: []string{"status"}, extra: "AMQPDELAY_TARGETS=" + target + ":topic", stdout: "exchanges: ", mgmt: true},
		{args: []string{"teardown", "--force"}, extra: "AMQPDELAY_TARGETS=" + target + ":topic", code: 0, stdout: "left untouched: " + target, stderr: ""},
		{args: []string{"status"}, extra: "AMQPDELAY_TARGETS=" + target + ":topic", code: 1, stdout: "NOT DECLARED", stderr: "the topology is not declared"},
	}
	for _, s := range steps {
		if s.mgmt && mgmt == "" {
			continue
		}
		if s.before != nil {
			s.before()
		}
		cmd := exec.Command(bin, s.args...)
		cmd.Env = append(append(os.Environ(), vars...), s.extra)
		if s.mgmt {
			cmd.Env = append(cmd.Env, mgmt)
		}
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		err := cmd.Run()
		code := 0
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		if code != s.code || !strings.Contains(out.String(), s.stdout) || !strings.Contains(errb.String(), s.stderr) {
			t.Fatalf("declare %v (%s): exit %d, want %d\nstdout:\n%s\nstderr:\n%s", s.args, s.extra, code, s.code, out.String(), errb.String())
		}
	}
	if env.VHost == "/" {
		_ = env.Channel(t).ExchangeDelete(target, false, false)
	}
}
