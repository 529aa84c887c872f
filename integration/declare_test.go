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

	"github.com/delaykit/rabbitdelay/integration/brokertest"
)

// TestDeclareBinary builds the CLI (cmd/rabbitdelay) and runs it as operators do, configured only through
// AMQPDELAY_* variables, checking the documented exit codes of the real process: plan 0, apply
// with a missing target 2, apply 0 twice (the second changes nothing), status 0, teardown
// --force 0, status of the torn-down topology 1, saying it is not declared.
func TestDeclareBinary(t *testing.T) {
	t.Parallel()
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("the go tool is not on PATH; cannot build cmd/rabbitdelay")
	}
	env := brokertest.NewEnv(t)
	bin := filepath.Join(t.TempDir(), "rabbitdelay")
	build := exec.Command(goTool, "build", "-o", bin, "../cmd/rabbitdelay")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/rabbitdelay: %v\n%s", err, out)
	}
	vars := []string{
		"AMQPDELAY_URL=" + env.URL, "AMQPDELAY_PREFIX=" + env.Prefix, "AMQPDELAY_PLUGIN=off",
		"AMQPDELAY_QUEUE_TYPE=classic", "AMQPDELAY_LADDER_RADIX=4", "AMQPDELAY_LADDER_MAX=10m",
	}
	target := env.Name("orders")
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
		mgmt   bool // with the management API only
	}
	steps := []step{
		{args: []string{"plan"}, extra: "AMQPDELAY_TARGETS=" + target, code: 0, stdout: "MUST ALREADY EXIST (not declared): " + target, stderr: ""},
		{args: []string{"apply"}, extra: "AMQPDELAY_TARGETS=" + target, code: 2, stdout: "", stderr: "does not exist"},
		{args: []string{"apply"}, extra: "AMQPDELAY_TARGETS=" + target + ":topic", code: 0, stdout: " created, 0 unchanged", stderr: ""},
		{args: []string{"apply"}, extra: "AMQPDELAY_TARGETS=" + target + ":topic", code: 0, stdout: "apply: 0 created, ", stderr: ""},
		{args: []string{"status"}, extra: "AMQPDELAY_TARGETS=" + target + ":topic", code: 0, stdout: "exchanges: ", stderr: ""},
		{args: []string{"status"}, extra: "AMQPDELAY_TARGETS=" + target + ":topic", stdout: "exchanges: ", mgmt: true},
		{args: []string{"teardown", "--force"}, extra: "AMQPDELAY_TARGETS=" + target + ":topic", code: 0, stdout: "left untouched: " + target, stderr: ""},
		{args: []string{"status"}, extra: "AMQPDELAY_TARGETS=" + target + ":topic", code: 1, stdout: "NOT DECLARED", stderr: "the topology is not declared"},
	}
	for _, s := range steps {
		if s.mgmt && mgmt == "" {
			continue
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
			t.Fatalf("rabbitdelay %v (%s): exit %d, want %d\nstdout:\n%s\nstderr:\n%s", s.args, s.extra, code, s.code, out.String(), errb.String())
		}
	}
	if env.VHost == "/" {
		_ = env.Channel(t).ExchangeDelete(target, false, false)
	}
}
