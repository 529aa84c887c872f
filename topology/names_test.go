package topology

import (
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/delaykit/rabbitdelay/ttlbuckets"
)

// TestNamesSpelling: the ladder's and buckets' names are built without fmt (the Publisher names them on every
// publish); they must stay the names `declare apply` has always declared.
func TestNamesSpelling(t *testing.T) {
	d, p := Names{}, Names{Prefix: "app.delays"}
	for _, c := range []struct{ got, want string }{
		{d.LadderExchange(0), "rabbitdelay.ladder.00"},
		{d.LadderExchange(12), "rabbitdelay.ladder.12"},
		{d.LadderQueue(3, 7), "rabbitdelay.ladder.03.07"},
		{p.LadderQueue(10, 63), "app.delays.ladder.10.63"},
		{d.LadderExchangeCopy(5, 0), "rabbitdelay.ladder.05"},
		{d.LadderExchangeCopy(5, 11), "rabbitdelay.ladder.05.s11"},
		{d.LadderQueueCopy(0, 1, 0), "rabbitdelay.ladder.00.01"},
		{d.LadderQueueCopy(0, 1, 2), "rabbitdelay.ladder.00.01.s2"},
		{p.LadderLastHopQueueCopy(7, 15, 3), "app.delays.ladder.07.15.s3.last"},
		{d.LadderLastHopExchangeCopy(2, 0), "rabbitdelay.ladder.02.last"},
		{d.BucketQueue(90_000), "rabbitdelay.bucket.90000ms"},
		{p.BucketQueue(1), "app.delays.bucket.1ms"},
	} {
		if c.got != c.want {
			t.Errorf("got %q, want %q", c.got, c.want)
		}
	}
	for level := range 20 {
		for digit := range 130 {
			for shard := range 4 {
				want := fmt.Sprintf("rabbitdelay.ladder.%02d.%02d", level, digit)
				if shard > 0 {
					want += fmt.Sprintf(".s%d", shard)
				}
				if got := d.LadderQueueCopy(level, digit, shard); got != want {
					t.Fatalf("LadderQueueCopy(%d, %d, %d) = %q, want %q", level, digit, shard, got, want)
				}
			}
		}
	}
}

// TestDelayQueuesPattern: the delay-queue policy's pattern, built from the naming rule, matches
// exactly the plan's delay queues and parking queue (the queues the policy must shadow) and none
// of its other queues, for plans whose list of queue names RabbitMQ refused as a pattern (16
// copies, radix 64, a 200-byte prefix), and stays short.
func TestDelayQueuesPattern(t *testing.T) {
	long := strings.Repeat("p", 200)
	for _, s := range []Spec{
		{},
		{Shards: 16},
		{Ladder: ttlbuckets.Ladder{Radix: 64}, Shards: 4},
		{Prefix: long, Buckets: Delays{time.Second, 90 * time.Minute}},
		{Prefix: "a.b-c_d:e", Ladder: ttlbuckets.Ladder{Radix: 4, Max: time.Minute}, Shards: 3, QueueType: Classic},
	} {
		s.Targets = Targets{{Name: "orders", Type: "topic"}}
		s.ReadyQueues = ReadyQueues{{Queue: "orders.ready", Exchange: "orders", BindingKey: "#"}}
		p := mustPlan(t, s)
		pat := p.Policies[0].Pattern
		if p.Policies[0].Name != p.Names.DelayQueuesPolicy() || len(pat) > len(p.Names.Prefix)*2+100 {
			t.Fatalf("prefix %.20q: policy %s pattern of %d bytes", s.Prefix, p.Policies[0].Name, len(pat))
		}
		re := regexp.MustCompile(pat)
		delay := 0
		for _, q := range p.Queues {
			want := q.IsDelay() || q.Name == p.Names.Parking()
			if want {
				delay++
			}
			if re.MatchString(q.Name) != want {
				t.Errorf("prefix %.20q shards %d: pattern matches %s (role %s): %v, want %v", s.Prefix, s.Shards, q.Name, q.Role, !want, want)
			}
		}
		if delay < 50 {
			t.Errorf("prefix %.20q: only %d delay queues: the spec is not what the test means", s.Prefix, delay)
		}
		n := p.Names
		for _, other := range []string{n.LadderEntryExchange(n.LadderQueue(1, 1)), n.LadderExchange(1), n.Revoked(), n.Prefix + ".ladder.1.1",
			n.Prefix + ".bucket.5ms.x", n.Prefix + ".parkingx", "x" + n.Parking(), n.Prefix + "x.parking", n.Prefix + ".orders"} {
			if re.MatchString(other) {
				t.Errorf("prefix %.20q: pattern matches %s", s.Prefix, other)
			}
		}
	}
}
