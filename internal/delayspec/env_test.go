package delayspec

import (
	"errors"
	"reflect"
	"testing"

	"github.com/kelseyhightower/envconfig"
)

// TestReadEnv: ReadEnv, the reader the client and the rabbitdelay CLI share, reads every variable
// of Env into the value envconfig reads, and refuses a bad value naming its variable; a struct
// that embeds Env and adds a variable of its own (as the rabbitdelay CLI's does) is read whole.
func TestReadEnv(t *testing.T) {
	sample := map[string]string{
		"AMQPDELAY_URL": "amqp://u:p@h/v", "AMQPDELAY_TLS_CA": "ca.pem", "AMQPDELAY_TLS_CERT": "c.pem", "AMQPDELAY_TLS_KEY": "k.pem",
		"AMQPDELAY_PREFIX": "p", "AMQPDELAY_TARGETS": "o, x:topic", "AMQPDELAY_BUCKETS": "5s,1h", "AMQPDELAY_LADDER_UNIT": "2ms",
		"AMQPDELAY_LADDER_RADIX": "8", "AMQPDELAY_LADDER_MAX": "1h", "AMQPDELAY_LADDER_ORDER": "longest-first", "AMQPDELAY_PLUGIN": "on",
		"AMQPDELAY_QUEUE_TYPE": "classic", "AMQPDELAY_READY_QUEUES": "q=o:k", "AMQPDELAY_READY_DELIVERY_LIMIT": "5",
		"AMQPDELAY_POLICY_PRIORITY": "5", "AMQPDELAY_SHARDS": "3", "AMQPDELAY_EXTRA": "own",
	}
	for k, v := range sample {
		t.Setenv(k, v)
	}
	type withOwn struct {
		Env
		Extra string `envconfig:"AMQPDELAY_EXTRA"`
	}
	var ours, theirs withOwn
	if err := ReadEnv(&ours); err != nil {
		t.Fatal(err)
	}
	if err := envconfig.Process("", &theirs); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(ours, theirs) || ours.Extra != "own" || ours.Shards != 3 || len(ours.Targets) != 2 {
		t.Fatalf("ReadEnv read\n%+v\nenvconfig read\n%+v", ours, theirs)
	}
	t.Setenv("AMQPDELAY_LADDER_RADIX", "7")
	err := ReadEnv(&ours)
	var ve *ValueError
	var pe *envconfig.ParseError
	if !errors.As(err, &ve) || ve.Name != "AMQPDELAY_LADDER_RADIX" || ve.Value != "7" || !errors.Is(err, ErrInvalidSpec) ||
		!errors.As(envconfig.Process("", &theirs), &pe) || pe.KeyName != ve.Name || pe.Err.Error() != ve.Err.Error() {
		t.Errorf("radix 7: ReadEnv %v; envconfig %v: want the same refusal of AMQPDELAY_LADDER_RADIX", err, pe)
	}
	if err := ReadEnv(Env{}); !errors.Is(err, ErrInvalidSpec) {
		t.Errorf("ReadEnv of a struct, not a pointer: %v, want ErrInvalidSpec", err)
	}
}
