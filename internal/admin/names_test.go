package admin

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/delaykit/rabbitdelay/internal/delayspec"
	"github.com/delaykit/rabbitdelay/ttlbuckets"
)

// TestNamesSpelling: the ladder's and buckets' names are built without fmt (the Publisher names them on every
// publish); they must stay the names `rabbitdelay apply` has always declared.
func TestNamesSpelling(t *testing.T) {
	d, p := delayspec.Names{}, delayspec.Names{Prefix: "app.delays"}
	for _, c := range []struct{ got, want string }{
		{d.LadderExchange(0), "rabbitdelay.ladder.00"},
		{d.LadderExchange(12), "rabbitdelay.ladder.12"},
		{d.LadderQueue(3, 7), "rabbitdelay.ladder.03.07"},
		{p.LadderQueue(10, 63), "app.delays.ladder.10.63"},
		{d.LadderExchangeShard(5, 0), "rabbitdelay.ladder.05"},
		{d.LadderExchangeShard(5, 11), "rabbitdelay.ladder.05.s11"},
		{d.LadderQueueShard(0, 1, 0), "rabbitdelay.ladder.00.01"},
		{d.LadderQueueShard(0, 1, 2), "rabbitdelay.ladder.00.01.s2"},
		{p.LadderLastHopQueueShard(7, 15, 3), "app.delays.ladder.07.15.s3.last"},
		{d.LadderLastHopExchangeShard(2, 0), "rabbitdelay.ladder.02.last"},
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
				if got := d.LadderQueueShard(level, digit, shard); got != want {
					t.Fatalf("LadderQueueShard(%d, %d, %d) = %q, want %q", level, digit, shard, got, want)
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
	for _, s := range []delayspec.Spec{
		{},
		{Shards: 16},
		{Ladder: ttlbuckets.Ladder{Radix: 64}, Shards: 4},
		{Prefix: long, Buckets: delayspec.Delays{time.Second, 90 * time.Minute}},
		{Prefix: "a.b-c_d:e", Ladder: ttlbuckets.Ladder{Radix: 4, Max: time.Minute}, Shards: 3, QueueType: delayspec.Classic},
	} {
		s.Targets = delayspec.Targets{{Name: "orders", Type: "topic"}}
		s.ReadyQueues = delayspec.ReadyQueues{{Queue: "orders.ready", Exchange: "orders", BindingKey: "#"}}
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

// TestForeignPrefixes: which prefixes other than the own one a name is an object of, as an
// exchange or as a queue: dots in prefixes, a prefix that is a prefix of another, queue and
// exchange names kept apart, the parking queue only when asked for.
func TestForeignPrefixes(t *testing.T) {
	for _, c := range []struct {
		name, own      string
		queue, parking bool
		want           []string
	}{
		{"b.ladder.00.01.entry", "a", false, false, []string{"b"}},
		{"app.delays.dispatch", "a", false, false, []string{"app.delays"}},
		{"app.delays.dispatch", "app.delays", false, false, nil},
		{"app.delays.ladder.03", "app", false, false, []string{"app.delays"}},
		{"b.ladder.00.01.s2.last.entry", "a", false, false, []string{"b"}},
		{"b.ladder.00.01", "a", false, false, nil}, // a queue's name, as an exchange: the user's
		{"b.revoked", "a", false, false, nil},
		{"b.retry", "a", false, false, []string{"b"}},
		{"b.retry", "a", true, false, nil}, // an exchange's name, as a queue: the user's
		{"b.dispatch", "a", true, false, nil},
		{"b.revoked", "a", true, false, []string{"b"}},
		{"b.ladder.00.01", "a", true, false, []string{"b"}},
		{"b.ladder.07.15.s3.last", "a", true, false, []string{"b"}},
		{"b.bucket.3000ms", "a", true, false, []string{"b"}},
		{"b.parking", "a", true, false, nil},
		{"b.parking", "a", true, true, []string{"b"}},
		{"orders", "a", false, false, nil},
		{"a-b.dispatch", "a", false, false, []string{"a-b"}},
		{".p.dispatch", "a", false, false, []string{".p"}}, // a prefix may start with a dot
		{".p.ladder.00.01", "a", true, false, []string{".p"}},
		{".dispatch", "a", false, false, nil},
		{"", "a", false, false, nil},
	} {
		if got := delayspec.ForeignPrefixes(c.name, c.own, c.queue, c.parking); !slices.Equal(got, c.want) {
			t.Errorf("ForeignPrefixes(%q, %q, queue %v, parking %v) = %q, want %q", c.name, c.own, c.queue, c.parking, got, c.want)
		}
	}
}
