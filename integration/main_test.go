package integration

import (
	"testing"

	"github.com/delaykit/rabbitdelay/integration/brokertest"
)

func TestMain(m *testing.M) { brokertest.Main(m) }
