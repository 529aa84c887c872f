//go:build integration

package integration

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/delaykit/rabbitdelay/integration/brokertest"
	"github.com/delaykit/rabbitdelay/internal/admin"
)

// runDeclare runs the CLI binary (buildDeclare) with the process's environment plus vars, and returns its
// exit code, stdout and stderr.
func runDeclare(t *testing.T, bin string, vars []string, args ...string) (int, string, string) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	// The CLI reads AMQPDELAY_* from its environment: only vars set them, not the caller's shell.
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "AMQPDELAY_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, vars...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return 0, out.String(), errb.String()
	case errors.As(err, &ee):
		return ee.ExitCode(), out.String(), errb.String()
	}
	t.Fatalf("rabbitdelay %v: %v", args, err)
	return -1, "", ""
}

// TestStatusExportImport: `rabbitdelay export` asks the broker its version (through the AMQP
// connection, or the management API when given one) and writes definitions that the same
// broker imports (POST /api/definitions); the imported topology is then what apply declares:
// status finds no problem and apply creates nothing. Each queue type, with buckets and a ready
// queue. --rabbitmq-version overrides the broker's answer: definitions for the other major
// version are refused by a 3.x broker ("-1 is not a valid delivery limit"), and on 4.x leave the
// delay-queue policy short of its delivery-limit (status names the policy).
func TestStatusExportImport(t *testing.T) {
	t.Parallel()
	if brokertest.Get(t).ManagementURL == "" {
		t.Skip("needs the management API (AMQP_MANAGEMENT_URL) to import definitions")
	}
	bin := buildDeclare(t)
	for _, c := range []struct {
		name, queueType string
		mgmt            bool // export asks the management API, not the AMQP connection
	}{
		{"quorum", "quorum", false},
		{"classic", "classic", false},
		{"quorum-management", "quorum", true},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			env := brokertest.NewEnv(t)
			conn := env.Dial(t)
			version := admin.ServerVersion(conn)
			_ = conn.Close()
			target := env.Name("orders")
			vars := []string{"AMQPDELAY_URL=" + env.URL, "AMQPDELAY_PREFIX=" + env.Prefix, "AMQPDELAY_TARGETS=" + target + ":topic",
				"AMQPDELAY_QUEUE_TYPE=" + c.queueType, "AMQPDELAY_LADDER_RADIX=8", "AMQPDELAY_LADDER_MAX=1h", "AMQPDELAY_BUCKETS=30s",
				"AMQPDELAY_READY_QUEUES=" + env.Name("ready") + "=" + target + ":k", "AMQPDELAY_PLUGIN=auto", "AMQPDELAY_MANAGEMENT_URL="}
			exportVars := vars
			if c.mgmt {
				exportVars = append(append([]string{}, vars...), "AMQPDELAY_MANAGEMENT_URL="+env.Broker.ManagementURL)
			}
			code, defs, stderr := runDeclare(t, bin, exportVars, "export")
			if code != 0 || !strings.Contains(stderr, "rabbitmq_version="+version) {
				t.Fatalf("export: exit %d, want 0 with the broker's version %s in the log\n%s", code, version, stderr)
			}
			if err := env.Broker.Management("POST", "api/definitions", json.RawMessage(defs), nil); err != nil {
				t.Fatalf("RabbitMQ %s refused the definitions export wrote for it: %v", version, err)
			}
			mvars := append(append([]string{}, vars...), "AMQPDELAY_MANAGEMENT_URL="+env.Broker.ManagementURL)
			// Definitions hold no messages, so the spec record is not among them: status names it
			// as the one thing missing, and apply writes it, creating nothing.
			code, out, stderr := runDeclare(t, bin, mvars, "status")
			if code != 1 || !strings.Contains(out, "1 object missing") || !strings.Contains(out, "spec record (stream "+env.Prefix+".spec holds none)") {
				t.Errorf("status after the import on %s: exit %d, want 1 naming the spec record alone\n%s\n%s", version, code, out, stderr)
			}
			code, out, stderr = runDeclare(t, bin, mvars, "apply")
			if code != 0 || !strings.Contains(out, "apply: 0 created, ") {
				t.Errorf("apply after the import on %s: exit %d, want nothing created\n%s\n%s", version, code, out, stderr)
			}
			code, out, stderr = runDeclare(t, bin, mvars, "status")
			if code != 0 || !strings.Contains(out, "problems: none") {
				t.Errorf("status after the import and apply on %s: exit %d, want 0\n%s\n%s", version, code, out, stderr)
			}
		})
	}
	t.Run("override", func(t *testing.T) {
		t.Parallel()
		env := brokertest.NewEnv(t)
		conn := env.Dial(t)
		version := admin.ServerVersion(conn)
		_ = conn.Close()
		major, _, _ := admin.ParseVersion(version)
		other := map[bool]string{true: "4", false: "3"}[major < 4]
		vars := []string{"AMQPDELAY_URL=" + env.URL, "AMQPDELAY_PREFIX=" + env.Prefix, "AMQPDELAY_TARGETS=" + env.Name("orders") + ":topic",
			"AMQPDELAY_LADDER_RADIX=16", "AMQPDELAY_LADDER_MAX=1m", "AMQPDELAY_PLUGIN=off", "AMQPDELAY_MANAGEMENT_URL="}
		code, defs, stderr := runDeclare(t, bin, vars, "export", "--rabbitmq-version", other)
		if code != 0 || strings.Contains(stderr, "rabbitmq_version=") {
			t.Fatalf("export --rabbitmq-version %s: exit %d, want 0 without asking the broker\n%s", other, code, stderr)
		}
		err := env.Broker.Management("POST", "api/definitions", json.RawMessage(defs), nil)
		if major < 4 {
			if err == nil || !strings.Contains(err.Error(), "delivery limit") {
				t.Errorf("RabbitMQ %s imported definitions written for 4.x: %v; want the delivery-limit refusal", version, err)
			}
			return
		}
		if err != nil {
			t.Fatalf("RabbitMQ %s refused definitions written for 3.x: %v", version, err)
		}
		mvars := append(append([]string{}, vars...), "AMQPDELAY_MANAGEMENT_URL="+env.Broker.ManagementURL)
		code, out, _ := runDeclare(t, bin, mvars, "status")
		if policy := "policy " + env.Prefix + ".delay-queues (queues, priority 1000000): DIFFERS"; code != 1 || !strings.Contains(out, policy) {
			t.Errorf("status on %s after importing 3.x definitions: exit %d, want 1 with %q\n%s", version, code, policy, out)
		}
	})
}
