//go:build integration

package integration

import (
	"os"
	"testing"

	"github.com/delaykit/rabbitdelay/integration/brokertest"
)

// TestMain runs the tests, or, in a consumer process a test started (consumer_proc_test.go),
// that process's consumer.
func TestMain(m *testing.M) {
	if os.Getenv(procEnv) != "" {
		os.Exit(consumerProcMain())
	}
	brokertest.Main(m)
}
