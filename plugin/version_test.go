package plugin

import (
	"strings"
	"testing"
)

func TestErrUnsupported(t *testing.T) {
	for v, want := range map[string]bool{
		"3.10.8": false, "4.0.5": false, "4.2.4": false, "4.2": false, "": false, "unknown": false,
		"4.3": true, "4.3.0": true, "4.3.6": true, "4.10.1": true, "5.0.0": true,
	} {
		err := ErrUnsupported(v)
		if (err != nil) != want || err != nil && !(strings.Contains(err.Error(), "RabbitMQ "+v) && strings.Contains(err.Error(), "Mnesia")) {
			t.Errorf("ErrUnsupported(%q) = %v, want an error naming the version and Mnesia: %v", v, err, want)
		}
	}
}
