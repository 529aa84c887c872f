//go:build !integration

package declare

import (
	"os"
	"testing"
)

// testMain runs the tests that need no broker (the broker's are behind the integration build tag).
func testMain(m *testing.M) { os.Exit(m.Run()) }
