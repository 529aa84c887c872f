package delayspec

import (
	"errors"
	"os"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/kelseyhightower/envconfig"

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

// TestReadEnvRefusesBadValues: a value that does not parse, or cannot be right (an
// explicit zero, a radix that is no power of two), is refused as a *ValueError naming the
// variable, its value and the values allowed; unset, each takes its default.
func TestReadEnvRefusesBadValues(t *testing.T) {
	for _, c := range []struct{ name, value, want string }{
		{"AMQPDELAY_LADDER_RADIX", "0", "2, 4, 8, 16, 32 or 64 (leave it unset"},
		{"AMQPDELAY_LADDER_RADIX", "7", "want 2, 4, 8, 16, 32 or 64"},
		{"AMQPDELAY_LADDER_RADIX", "0x10", "decimal"},
		{"AMQPDELAY_LADDER_RADIX", "010", "want 2, 4, 8, 16, 32 or 64"}, // decimal 10, not octal 8
		{"AMQPDELAY_LADDER_RADIX", " ", "decimal"},
		{"AMQPDELAY_LADDER_UNIT", "0s", "milliseconds"},
		{"AMQPDELAY_LADDER_UNIT", "1500us", "whole number of milliseconds"},
		{"AMQPDELAY_LADDER_MAX", "0", "at least one ladder unit"},
		{"AMQPDELAY_LADDER_MAX", "forever", "not a duration"},
		{"AMQPDELAY_LADDER_MAX", "10000000h", "too long"},
		{"AMQPDELAY_LADDER_ORDER", "sideways", "shortest-first"},
		{"AMQPDELAY_TARGETS", "orders,:topic", `target ":topic": empty exchange name`},
		{"AMQPDELAY_TARGETS", "orders:stream", "want direct, fanout, topic or headers"},
		{"AMQPDELAY_BUCKETS", "5s,5x", `bucket "5x": not a duration`},
		{"AMQPDELAY_READY_QUEUES", "q", "queue=exchange:bindingkey"},
		{"AMQPDELAY_PLUGIN", "maybe", "off, auto (the default) or on"},
		{"AMQPDELAY_QUEUE_TYPE", "stream", "quorum (the default) or classic"},
		{"AMQPDELAY_READY_DELIVERY_LIMIT", "0", "-1 for none"},
		{"AMQPDELAY_POLICY_PRIORITY", "-5", "positive integer"},
		{"AMQPDELAY_SHARDS", "0", "shards of the ladder"},
		{"AMQPDELAY_SHARDS", "17", "shards of the ladder"},
	} {
		t.Run(c.name+"="+c.value, func(t *testing.T) {
			t.Setenv(c.name, c.value)
			err := ReadEnv(&Env{})
			var ve *ValueError
			prefix := c.name + "=" + strconv.Quote(c.value) + ": "
			if !errors.Is(err, ErrInvalidSpec) || !errors.As(err, &ve) || ve.Name != c.name ||
				!strings.HasPrefix(err.Error(), prefix) || !strings.Contains(err.Error(), c.want) {
				t.Errorf("ReadEnv with %s=%q: %v\nwant a *ValueError starting %q and holding %q", c.name, c.value, err, prefix, c.want)
			}
		})
	}
}

// TestReadEnvEmptyIsUnset: every variable set but empty takes its default.
func TestReadEnvEmptyIsUnset(t *testing.T) {
	var keys strings.Builder
	if err := envconfig.Usagef("", &Env{}, &keys, "{{range .}}{{usage_key .}}\n{{end}}"); err != nil {
		t.Fatal(err)
	}
	names := strings.Fields(keys.String())
	if len(names) != 17 {
		t.Errorf("Env has %d variables: %v", len(names), names)
	}
	for _, name := range names {
		t.Setenv(name, "")
	}
	var e Env
	if err := ReadEnv(&e); err != nil || !reflect.DeepEqual(e, Env{}) {
		t.Fatalf("set-but-empty variables: %+v, %v; want the zero Env (defaults) and no error", e, err)
	}
	if o := e.Spec().Ladder.Order; o != ttlbuckets.TopSplit {
		t.Errorf("empty AMQPDELAY_LADDER_ORDER: order %v; want top-split, the default", o)
	}
	t.Setenv("AMQPDELAY_LADDER_ORDER", "shortest-first")
	if err := ReadEnv(&e); err != nil || e.Spec().Ladder.Order != ttlbuckets.ShortestFirst {
		t.Errorf("AMQPDELAY_LADDER_ORDER=shortest-first: order %v, %v", e.Spec().Ladder.Order, err)
	}
	t.Setenv("AMQPDELAY_LADDER_UNIT", "10ms")
	t.Setenv("AMQPDELAY_LADDER_MAX", "24h")
	t.Setenv("AMQPDELAY_LADDER_ORDER", "longest-first")
	t.Setenv("AMQPDELAY_LADDER_RADIX", "32")
	t.Setenv("AMQPDELAY_READY_DELIVERY_LIMIT", "-1")
	t.Setenv("AMQPDELAY_POLICY_PRIORITY", "7")
	t.Setenv("AMQPDELAY_TARGETS", "a, b:topic")
	want := ttlbuckets.Ladder{Unit: 10 * time.Millisecond, Radix: 32, Max: 24 * time.Hour, Order: ttlbuckets.LongestFirst}
	err := ReadEnv(&e)
	c := e.Spec()
	if err != nil || c.Ladder != want || c.ReadyDeliveryLimit != -1 || c.PolicyPriority != 7 ||
		!reflect.DeepEqual(c.Targets, Targets{{Name: "a"}, {Name: "b", Type: "topic"}}) {
		t.Errorf("variables: %+v, %v; want ladder %+v, limit -1, priority 7, targets a and b:topic", c, err, want)
	}
}

// TestReadEnvReadsOnlyItsVariables: envconfig falls back from AMQPDELAY_NAME to a bare
// NAME variable; ReadEnv must not pick up a stray URL, PREFIX or TARGETS of another
// program.
func TestReadEnvReadsOnlyItsVariables(t *testing.T) {
	for _, name := range []string{"AMQPDELAY_URL", "AMQPDELAY_PREFIX", "AMQPDELAY_TARGETS", "AMQPDELAY_BUCKETS", "AMQPDELAY_PLUGIN",
		"AMQPDELAY_QUEUE_TYPE", "AMQPDELAY_READY_QUEUES", "AMQPDELAY_TLS_CA", "AMQPDELAY_LADDER_RADIX"} {
		t.Setenv(name, "") // restored after the test
		os.Unsetenv(name)
	}
	stray := map[string]string{"URL": "https://example.com/webhook", "PREFIX": "other", "TARGETS": "x:topic", "BUCKETS": "5s",
		"PLUGIN": "on", "QUEUE_TYPE": "classic", "READY_QUEUES": "q=x:#", "TLS_CA": "/nowhere.pem", "LADDER_RADIX": "4"}
	for k, v := range stray {
		t.Setenv(k, v)
	}
	var e Env
	if err := ReadEnv(&e); err != nil {
		t.Fatalf("ReadEnv with stray variables: %v", err)
	}
	if !reflect.DeepEqual(e, Env{}) {
		t.Errorf("ReadEnv read variables without the AMQPDELAY_ prefix: %+v", e)
	}
	t.Setenv("AMQPDELAY_PREFIX", "mine")
	if err := ReadEnv(&e); err != nil || e.Spec().Prefix != "mine" {
		t.Errorf("AMQPDELAY_PREFIX=mine: prefix %q, %v", e.Spec().Prefix, err)
	}
}

// TestValueErrorNamesFlags: a flag's error reads "--radix 7: ...", quoting only a value that
// needs it.
func TestValueErrorNamesFlags(t *testing.T) {
	for _, c := range []struct {
		name, value, want string
	}{
		{"--radix", "7", "--radix 7: want 2, 4, 8, 16, 32 or 64"},
		{"--bucket", "5 x", `--bucket "5 x": want 2, 4, 8, 16, 32 or 64`},
		{"--unit", "", `--unit "": want 2, 4, 8, 16, 32 or 64`},
		{"AMQPDELAY_LADDER_RADIX", "7", `AMQPDELAY_LADDER_RADIX="7": want 2, 4, 8, 16, 32 or 64`},
	} {
		err := &ValueError{Name: c.name, Value: c.value, Err: errors.New("want 2, 4, 8, 16, 32 or 64")}
		if err.Error() != c.want || !errors.Is(err, ErrInvalidSpec) {
			t.Errorf("ValueError{%q, %q}: %q, want %q wrapping ErrInvalidSpec", c.name, c.value, err, c.want)
		}
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
