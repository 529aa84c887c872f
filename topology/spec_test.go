package topology

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/delaykit/rabbitdelay/ttlbuckets"
)

// TestValidateOwnNamesAndLengths: targets, ready queues and ready-queue exchanges named with
// the topology's own prefix, and names or binding keys over 255 bytes, are refused with
// ErrInvalidSpec naming the thing and the fix; names just inside the limits pass.
func TestValidateOwnNamesAndLengths(t *testing.T) {
	long := strings.Repeat("n", MaxNameLen+1)
	limit := strings.Repeat("n", MaxNameLen)
	cases := []struct {
		name string
		spec Spec
		want []string // "" for a valid spec
	}{
		{"target is a ladder exchange", Spec{Prefix: "p6", Targets: Targets{{Name: "p6.ladder.00", Type: "topic"}}},
			[]string{`target "p6.ladder.00"`, "topology's own objects", `prefix "p6"`, "another prefix", "another target name"}},
		{"target under the default prefix", Spec{Targets: Targets{{Name: "rabbitdelay.dispatch"}}},
			[]string{`target "rabbitdelay.dispatch"`, `prefix "rabbitdelay"`}},
		{"target on a ladder level this ladder lacks", Spec{Prefix: "p6", Targets: Targets{{Name: "p6.ladder.42", Type: "topic"}}},
			[]string{`target "p6.ladder.42"`}},
		{"target named like a bucket queue", Spec{Prefix: "p6", Targets: Targets{{Name: "p6.bucket.5ms"}}},
			[]string{`target "p6.bucket.5ms"`}},
		{"target under the prefix, not the naming rule's", Spec{Prefix: "p6", Targets: Targets{{Name: "p6.orders", Type: "topic"}}}, nil},
		{"target equal to the prefix", Spec{Prefix: "p6", Targets: Targets{{Name: "p6", Type: "topic"}}}, nil},
		{"target sharing the prefix's first letters", Spec{Prefix: "p6", Targets: Targets{{Name: "p6x.orders", Type: "topic"}}}, nil},
		{"ready queue is the parking queue", Spec{Prefix: "p6", Targets: Targets{{Name: "o"}},
			ReadyQueues: ReadyQueues{{Queue: "p6.parking", Exchange: "o", BindingKey: "#"}}},
			[]string{`ready queue "p6.parking"`, "another queue name"}},
		{"ready queue bound to the topology's exchange", Spec{Prefix: "p6", Targets: Targets{{Name: "o"}},
			ReadyQueues: ReadyQueues{{Queue: "rq", Exchange: "p6.unroutable"}}},
			[]string{`ready queue "rq"`, `exchange "p6.unroutable"`}},
		{"ready queue bound to a target", Spec{Prefix: "p6", Targets: Targets{{Name: "o"}},
			ReadyQueues: ReadyQueues{{Queue: "rq", Exchange: "o", BindingKey: "k"}}}, nil},
		{"target name too long", Spec{Targets: Targets{{Name: "t" + long, Type: "topic"}}},
			[]string{"target", "257 bytes", "at most 255"}},
		{"target name at the limit", Spec{Targets: Targets{{Name: limit, Type: "topic"}}}, nil},
		{"ready queue name too long", Spec{Targets: Targets{{Name: "o"}}, ReadyQueues: ReadyQueues{{Queue: long, Exchange: "o"}}},
			[]string{"ready queue", "queue name is 256 bytes"}},
		{"ready queue exchange too long", Spec{Targets: Targets{{Name: "o"}}, ReadyQueues: ReadyQueues{{Queue: "rq", Exchange: long}}},
			[]string{`ready queue "rq=`, "exchange name is 256 bytes"}},
		{"binding key too long", Spec{Targets: Targets{{Name: "o"}}, ReadyQueues: ReadyQueues{{Queue: "rq", Exchange: "o", BindingKey: long}}},
			[]string{`ready queue "rq=o:`, "binding key is 256 bytes"}},
		{"binding key at the limit", Spec{Targets: Targets{{Name: "o"}}, ReadyQueues: ReadyQueues{{Queue: "rq", Exchange: "o", BindingKey: limit}}}, nil},
		{"ready queue listed twice", Spec{Targets: Targets{{Name: "o"}}, ReadyQueues: ReadyQueues{{Queue: "rq", Exchange: "o", BindingKey: "a"}, {Queue: "rq", Exchange: "o", BindingKey: "a"}}},
			[]string{`ready queue "rq=o:a" is listed twice`}},
		{"target not UTF-8", Spec{Targets: Targets{{Name: "bad\xff", Type: "topic"}}},
			[]string{`target "bad\xff" is not valid UTF-8`}},
		{"target with a line feed", Spec{Targets: Targets{{Name: "orders\n"}}},
			[]string{`target "orders\n" holds a control character (U+000A at byte 6)`}},
		{"target in another script", Spec{Targets: Targets{{Name: "заказы", Type: "topic"}}}, nil},
		{"ready queue name with a tab", Spec{Targets: Targets{{Name: "o"}}, ReadyQueues: ReadyQueues{{Queue: "r\tq", Exchange: "o"}}},
			[]string{"the queue name holds a control character (U+0009 at byte 1)"}},
		{"ready queue exchange not UTF-8", Spec{Targets: Targets{{Name: "o"}}, ReadyQueues: ReadyQueues{{Queue: "rq", Exchange: "o\xfe"}}},
			[]string{"the exchange name is not valid UTF-8"}},
		{"binding key not UTF-8", Spec{Targets: Targets{{Name: "o"}}, ReadyQueues: ReadyQueues{{Queue: "rq", Exchange: "o", BindingKey: "k\xff"}}},
			[]string{"the binding key is not valid UTF-8"}},
		{"binding key with a tab", Spec{Targets: Targets{{Name: "o"}}, ReadyQueues: ReadyQueues{{Queue: "rq", Exchange: "o", BindingKey: "k\tx"}}}, nil},
		{"one queue, two binding keys", Spec{Targets: Targets{{Name: "o"}}, ReadyQueues: ReadyQueues{{Queue: "rq", Exchange: "o", BindingKey: "a"}, {Queue: "rq", Exchange: "o", BindingKey: "b"}}}, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := c.spec.Validate()
			if c.want == nil {
				if err != nil {
					t.Fatalf("Validate: %v; want nil", err)
				}
				return
			}
			if !errors.Is(err, ErrInvalidSpec) {
				t.Fatalf("Validate: %v; want ErrInvalidSpec", err)
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Validate: %v\nlacks %q", err, w)
				}
			}
			if len(err.Error()) > 1000 {
				t.Errorf("message of %d bytes: long names are not shortened", len(err.Error()))
			}
		})
	}
}

// TestConfigFromEnvRejectsExplicitZero: AMQPDELAY_LADDER_UNIT, _RADIX and _MAX set to zero are
// refused naming the variable and the allowed values; unset they take the defaults.
func TestConfigFromEnvRejectsExplicitZero(t *testing.T) {
	for _, c := range []struct{ name, value, want string }{
		{"AMQPDELAY_LADDER_RADIX", "0", "2, 4, 8, 16, 32 or 64"},
		{"AMQPDELAY_LADDER_UNIT", "0s", "milliseconds"},
		{"AMQPDELAY_LADDER_MAX", "0", "at least one ladder unit"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Setenv(c.name, c.value)
			_, err := ConfigFromEnv()
			if !errors.Is(err, ErrInvalidSpec) || !strings.Contains(err.Error(), c.name) || !strings.Contains(err.Error(), c.want) {
				t.Errorf("ConfigFromEnv with %s=%s: %v", c.name, c.value, err)
			}
		})
	}
	for _, name := range []string{"AMQPDELAY_LADDER_RADIX", "AMQPDELAY_LADDER_UNIT", "AMQPDELAY_LADDER_MAX"} {
		t.Setenv(name, "") // restored after the test
		os.Unsetenv(name)
	}
	if c, err := ConfigFromEnv(); err != nil || c.Ladder.Radix != 0 {
		t.Errorf("unset: %+v %v", c.Ladder, err)
	}
}

// TestConfigFromEnvEmptyIsUnset: a ladder variable that is set but empty takes the default, as
// in the declare CLI (envconfig alone refused an empty duration or integer); one that does not
// parse, a blank one included (the CLI refuses it too), is refused naming it.
func TestConfigFromEnvEmptyIsUnset(t *testing.T) {
	for _, name := range []string{"AMQPDELAY_LADDER_UNIT", "AMQPDELAY_LADDER_RADIX", "AMQPDELAY_LADDER_MAX", "AMQPDELAY_LADDER_ORDER"} {
		t.Setenv(name, "")
	}
	c, err := ConfigFromEnv()
	if err != nil || c.Ladder != (ttlbuckets.Ladder{}) {
		t.Fatalf("set-but-empty ladder variables: %+v, %v; want the zero ladder (defaults) and no error", c.Ladder, err)
	}
	t.Setenv("AMQPDELAY_LADDER_RADIX", " ")
	if _, err := ConfigFromEnv(); !errors.Is(err, ErrInvalidSpec) || !strings.Contains(err.Error(), "AMQPDELAY_LADDER_RADIX") {
		t.Errorf("AMQPDELAY_LADDER_RADIX=\" \": %v; want ErrInvalidSpec naming it", err)
	}
	t.Setenv("AMQPDELAY_LADDER_UNIT", "10ms")
	t.Setenv("AMQPDELAY_LADDER_MAX", "24h")
	t.Setenv("AMQPDELAY_LADDER_ORDER", "longest-first")
	t.Setenv("AMQPDELAY_LADDER_RADIX", "32")
	want := ttlbuckets.Ladder{Unit: 10 * time.Millisecond, Radix: 32, Max: 24 * time.Hour, Order: ttlbuckets.LongestFirst}
	if c, err := ConfigFromEnv(); err != nil || c.Ladder != want {
		t.Errorf("ladder variables: %+v, %v; want %+v", c.Ladder, err, want)
	}
	t.Setenv("AMQPDELAY_LADDER_MAX", "forever")
	t.Setenv("AMQPDELAY_LADDER_ORDER", "sideways")
	_, err = ConfigFromEnv()
	for _, w := range []string{"AMQPDELAY_LADDER_MAX", "forever", "AMQPDELAY_LADDER_ORDER", "sideways"} {
		if !errors.Is(err, ErrInvalidSpec) || !strings.Contains(fmt.Sprint(err), w) {
			t.Errorf("unparsable MAX and ORDER: %v; want ErrInvalidSpec naming %q", err, w)
		}
	}
}

// TestConfigFromEnvReadsOnlyItsVariables: envconfig falls back from AMQPDELAY_NAME to a bare
// NAME variable; ConfigFromEnv must not pick up a stray URL, PREFIX or TARGETS of another
// program, and reads the radix in decimal as the CLI does ("010" is 10, not 8).
func TestConfigFromEnvReadsOnlyItsVariables(t *testing.T) {
	for _, name := range []string{"AMQPDELAY_URL", "AMQPDELAY_PREFIX", "AMQPDELAY_TARGETS", "AMQPDELAY_BUCKETS", "AMQPDELAY_PLUGIN",
		"AMQPDELAY_QUEUE_TYPE", "AMQPDELAY_READY_QUEUES", "AMQPDELAY_TLS_CA", "AMQPDELAY_LADDER_RADIX"} {
		t.Setenv(name, "") // restored after the test
		os.Unsetenv(name)
	}
	stray := map[string]string{"URL": "https://example.com/webhook", "PREFIX": "other", "TARGETS": "x:topic", "BUCKETS": "5s",
		"PLUGIN": "on", "QUEUE_TYPE": "classic", "READY_QUEUES": "q=x:#", "TLS_CA": "/nowhere.pem"}
	for k, v := range stray {
		t.Setenv(k, v)
	}
	c, err := ConfigFromEnv()
	if err != nil {
		t.Fatalf("ConfigFromEnv with stray variables: %v", err)
	}
	if c.URL != "" || c.TLSCA != "" || c.Prefix != DefaultPrefix || c.Targets != nil || c.Buckets != nil || c.Plugin != PluginAuto ||
		c.QueueType != Quorum || c.ReadyQueues != nil {
		t.Errorf("ConfigFromEnv read variables without the AMQPDELAY_ prefix: %+v", c)
	}
	t.Setenv("AMQPDELAY_PREFIX", "mine")
	if c, err := ConfigFromEnv(); err != nil || c.Prefix != "mine" {
		t.Errorf("AMQPDELAY_PREFIX=mine: prefix %q, %v", c.Prefix, err)
	}
	t.Setenv("AMQPDELAY_LADDER_RADIX", "0x10")
	if _, err := ConfigFromEnv(); !errors.Is(err, ErrInvalidSpec) || !strings.Contains(err.Error(), "decimal") {
		t.Errorf("AMQPDELAY_LADDER_RADIX=0x10: %v, want ErrInvalidSpec asking for decimal", err)
	}
	t.Setenv("AMQPDELAY_LADDER_RADIX", "010")
	if c, err := ConfigFromEnv(); err != nil || c.Ladder.Radix != 10 {
		t.Errorf("AMQPDELAY_LADDER_RADIX=010: radix %d, %v; want 10, read in decimal (Validate then refuses it)", c.Ladder.Radix, err)
	}
	t.Setenv("AMQPDELAY_LADDER_RADIX", "32")
	if c, err := ConfigFromEnv(); err != nil || c.Ladder.Radix != 32 {
		t.Errorf("AMQPDELAY_LADDER_RADIX=32: radix %d, %v", c.Ladder.Radix, err)
	}
}

// TestShortenKeepsCharactersWhole: a long multi-byte name is cut between characters.
func TestShortenKeepsCharactersWhole(t *testing.T) {
	for _, n := range []string{strings.Repeat("é", 100), "x" + strings.Repeat("漢", 60)} {
		if got := shorten(n); !utf8.ValidString(got) || len(got) > 83 {
			t.Errorf("shorten(%d bytes) = %q", len(n), got)
		}
	}
}
