package delayspec

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/delaykit/rabbitdelay/ttlbuckets"
)

// TestNamingRuleAgrees: the names the formatters give, the parser ([IsDelayQueueName], the
// forms' parse) and the policy pattern ([Names.DelayQueuesPattern], matched by Go's RE2 and by
// a Perl-style backtracking engine, the PCRE family RabbitMQ's policies use) agree on every
// ladder, last-hop and bucket queue name of every copy of several specs: each name parses back
// to the level, digit, copy and last hop (or TTL) it was formatted from, and the pattern matches
// it. The topology's other names (exchanges, entry exchanges, markers, the revocation stream)
// and near misses are neither parsed as delay queues nor matched.
func TestNamingRuleAgrees(t *testing.T) {
	for _, s := range []Spec{
		{},
		{Prefix: "app.delays", Shards: 16, Buckets: Delays{time.Millisecond, 30 * time.Second, 90 * 24 * time.Hour}},
		{Prefix: "a.b-c_d:e", Ladder: ttlbuckets.Ladder{Radix: 64, Unit: 10 * time.Millisecond}, Shards: 3},
		{Prefix: "x", Ladder: ttlbuckets.Ladder{Radix: 2, Max: time.Hour, Order: ttlbuckets.LongestFirst}, Shards: 2},
		{Prefix: strings.Repeat("p", 200), Ladder: ttlbuckets.Ladder{Radix: 4, Max: time.Minute}},
	} {
		s = s.WithDefaults()
		n := s.Names()
		own := n.Prefix + "."
		pat := n.DelayQueuesPattern()
		re := regexp.MustCompile(pat)
		// The pattern uses only syntax on which RE2 and RabbitMQ's PCRE (Erlang re) agree:
		// quoted literals, groups, alternation and anchors.
		matches := re.MatchString
		check := func(name string, f form, want []int64) {
			t.Helper()
			if !IsDelayQueueName(name) || !n.OwnsQueue(name) || !matches(name) {
				t.Errorf("%s: IsDelayQueueName %v, OwnsQueue %v, pattern %v; want all true", name, IsDelayQueueName(name), n.OwnsQueue(name), matches(name))
			}
			got, ok := f.parse(strings.TrimPrefix(name, own))
			if !ok || !slices.Equal(got, want) {
				t.Errorf("%s parses to %v, %v; want %v", name, got, ok, want)
			}
			if again := f.name(n.Prefix, got...); again != name {
				t.Errorf("%s parsed and formatted again: %s", name, again)
			}
		}
		l := s.Ladder
		count := 0
		for level := range l.Levels() {
			for digit := range l.Radix {
				for shard := range s.Shards {
					check(n.LadderQueueShard(level, digit, shard), ladderQueueForm, []int64{int64(level), int64(digit), int64(shard), 0, 0})
					check(n.LadderLastHopQueueShard(level, digit, shard), ladderQueueForm, []int64{int64(level), int64(digit), int64(shard), 1, 0})
					check(n.LadderFirstHopQueueShard(level, digit, shard), ladderQueueForm, []int64{int64(level), int64(digit), int64(shard), 0, 1})
					count += 3
				}
			}
		}
		for _, b := range s.Buckets {
			check(n.BucketQueue(b.Milliseconds()), bucketQueueForm, []int64{b.Milliseconds(), 1})
			count++
		}
		if count < 30 {
			t.Fatalf("prefix %.20q: only %d names: the spec is not what the test means", s.Prefix, count)
		}
		if !matches(n.Parking()) || IsDelayQueueName(n.Parking()) {
			t.Errorf("%s: pattern %v, IsDelayQueueName %v; want true, false", n.Parking(), matches(n.Parking()), IsDelayQueueName(n.Parking()))
		}
		others := []string{n.Dispatch(), n.Unroutable(), n.DueUnroutable(), n.BucketExchange(), n.PluginExchange(), n.Revoked(), n.Retry(),
			n.SpecStream(),
			own + "ladder.1.1", own + "ladder.001.01", own + "ladder.01.01.s", own + "ladder.01.01.last.s1", own + "ladder.01.01.s1.x",
			own + "ladder.01.01.first.last", own + "ladder.01.01.first.s1",
			own + "bucket.ms", own + "bucket.5ms.x", own + "bucket.5", own + "parkingx", "x" + n.Parking(), n.Prefix + "x.parking", own + "orders"}
		for level := range 3 {
			for shard := range 3 {
				others = append(others, n.LadderExchangeShard(level, shard), n.LadderLastHopExchangeShard(level, shard),
					n.LadderEntryExchange(n.LadderQueueShard(level, 1, shard)), n.LadderEntryExchange(n.LadderLastHopQueueShard(level, 1, shard)),
					n.LadderEntryExchange(n.LadderFirstHopQueueShard(level, 1, shard)))
			}
		}
		for _, name := range others {
			if IsDelayQueueName(name) || n.OwnsQueue(name) && name != n.Revoked() && name != n.SpecStream() || matches(name) {
				t.Errorf("%s: IsDelayQueueName %v, OwnsQueue %v, pattern %v; want false", name, IsDelayQueueName(name), n.OwnsQueue(name), matches(name))
			}
		}
	}
}

// TestFormsSpellTheNames: the forms write what the naming rule documents, including fields of
// more digits than their width.
func TestFormsSpellTheNames(t *testing.T) {
	for _, c := range []struct{ got, want string }{
		{ladderQueueForm.name("p", 3, 7), "p.ladder.03.07"},
		{ladderQueueForm.name("p", 3, 7, 12, 1), "p.ladder.03.07.s12.last"},
		{ladderQueueForm.name("p", 3, 7, 0, 0, 1), "p.ladder.03.07.first"},
		{ladderExchangeForm.name("p", 0, 2), "p.ladder.00.s2"},
		{ladderExchangeForm.name("p", 0, 0, 1), "p.ladder.00.last"},
		{bucketQueueForm.name("p", 90_000), "p.bucket.90000ms"},
		{parkingForm.name("p"), "p.parking"},
		{ladderQueueForm.pattern(), `ladder\.[0-9]{2}\.[0-9]{2}(?:\.s[0-9]+)?(?:\.last)?(?:\.first)?`},
		{bucketQueueForm.pattern(), `bucket\.[0-9]+ms`},
		{Names{Prefix: "a.b"}.DelayQueuesPattern(), `^a\.b\.(?:parking|bucket\.[0-9]+ms|ladder\.[0-9]{2}\.[0-9]{2}(?:\.s[0-9]+)?(?:\.last)?(?:\.first)?)$`},
		{fmt.Sprint(IsDelayQueueName("q.bucket.99999999999999999999999ms")), "true"},
	} {
		if c.got != c.want {
			t.Errorf("got %q, want %q", c.got, c.want)
		}
	}
}
