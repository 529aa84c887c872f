package declare

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"testing"
	"time"
)

// childEnv set to 1 makes the test binary run the CLI instead of the tests (see declare).
const childEnv = "DECLARE_TEST_CHILD"

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) == "1" {
		Main() // os.Args[1:] are the CLI's arguments; Main exits
	}
	testMain(m)
}

type result struct {
	code           int
	stdout, stderr string
	elapsed        time.Duration
}

// declare runs the CLI as a process of its own (this test binary, see TestMain) with env as its
// only environment, as an operator's shell would: the CLI reads the real environment.
func declare(t testing.TB, env map[string]string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], args...)
	cmd.Env = []string{childEnv + "=1"}
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	start := time.Now()
	err := cmd.Run()
	code := 0
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		code = exit.ExitCode()
	} else if err != nil {
		t.Fatalf("running declare %v: %v", args, err)
	}
	return result{code: code, stdout: out.String(), stderr: errb.String(), elapsed: time.Since(start)}
}
