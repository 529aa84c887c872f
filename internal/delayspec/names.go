package delayspec

import (
	"regexp"
	"strings"
)

// Names is the one naming rule of the topology: every object's name is the prefix, a dot and a
// fixed suffix, so two prefixes live side by side in one vhost. The package documentation
// lists every name.
type Names struct {
	// Prefix is the name prefix; "" means DefaultPrefix.
	Prefix string
}

func (n Names) p() string {
	if n.Prefix == "" {
		return DefaultPrefix
	}
	return n.Prefix
}

// Names returns the naming rule of s's prefix.
func (s Spec) Names() Names { return Names{Prefix: s.WithDefaults().Prefix} }

// Dispatch is the dispatch exchange D (headers).
func (n Names) Dispatch() string { return n.p() + ".dispatch" }

// Unroutable is D's alternate exchange (fanout).
func (n Names) Unroutable() string { return n.p() + ".unroutable" }

// Parking is the queue that holds messages no target took.
func (n Names) Parking() string { return parkingForm.name(n.p()) }

// LadderPrefix is how the names of the ladder's exchanges and queues (shards, entry and
// last-hop exchanges included) begin: <prefix>.ladder.
func (n Names) LadderPrefix() string { return n.p() + ".ladder." }

// LadderExchange is the headers exchange of ladder level level.
func (n Names) LadderExchange(level int) string { return ladderExchangeForm.name(n.p(), int64(level)) }

// LadderQueue is the queue of digit value digit at ladder level level.
func (n Names) LadderQueue(level, digit int) string {
	return ladderQueueForm.name(n.p(), int64(level), int64(digit))
}

// LadderLastHopQueueShard is the last-hop queue of digit value digit at ladder level level in
// shard of the ladder: <prefix>.ladder.LL.DD[.sK].last. It has the TTL of
// [Names.LadderQueueShard] of the same level and digit but dead-letters into the dispatch
// exchange: it takes the messages whose last hop is that digit of that level.
func (n Names) LadderLastHopQueueShard(level, digit, shard int) string {
	return ladderQueueForm.name(n.p(), int64(level), int64(digit), int64(shard), 1)
}

// LadderFirstHopQueueShard is the first-hop queue of digit value digit at ladder level level
// (1 and up) in shard of the ladder, for the [ttlbuckets.TopFirst] and [ttlbuckets.TopSplit]
// orders: <prefix>.ladder.LL.DD[.sK].first. It has the TTL of [Names.LadderQueueShard] of the
// same level and digit but dead-letters into level 0's exchange of the shard.
func (n Names) LadderFirstHopQueueShard(level, digit, shard int) string {
	return ladderQueueForm.name(n.p(), int64(level), int64(digit), int64(shard), 0, 1)
}

// LadderLastHopExchangeShard is the headers exchange of the last-hop queues of ladder level
// level in shard of the ladder: [Names.LadderExchangeShard] + ".last". The level's exchange
// routes to it every message whose last hop is at that level.
func (n Names) LadderLastHopExchangeShard(level, shard int) string {
	return ladderExchangeForm.name(n.p(), int64(level), int64(shard), 1)
}

// LadderEntryExchange is the fanout exchange bound to the ladder, last-hop or first-hop queue
// named queue and to nothing else: queue + ".entry", e.g. rabbitdelay.ladder.05.03.entry. A
// Publisher sends a ladder message's first hop there: a fanout exchange routes without reading
// the message's headers, where the level's headers exchange tests each of its bindings against
// them (rabbit_exchange_type_headers).
func (n Names) LadderEntryExchange(queue string) string { return queue + ".entry" }

// LadderExchangeShard is the headers exchange of ladder level level in shard of the ladder
// (see [Spec.Shards]): [Names.LadderExchange] for shard 0, <prefix>.ladder.LL.sK for shard K.
func (n Names) LadderExchangeShard(level, shard int) string {
	return ladderExchangeForm.name(n.p(), int64(level), int64(shard))
}

// LadderQueueShard is the queue of digit value digit at ladder level level in shard of the
// ladder: [Names.LadderQueue] for shard 0, <prefix>.ladder.LL.DD.sK for shard K.
func (n Names) LadderQueueShard(level, digit, shard int) string {
	return ladderQueueForm.name(n.p(), int64(level), int64(digit), int64(shard))
}

// BucketExchange is the headers exchange the bucket queues are bound to.
func (n Names) BucketExchange() string { return n.p() + ".buckets" }

// BucketQueue is the queue of the bucket whose x-message-ttl is ttlMs milliseconds.
func (n Names) BucketQueue(ttlMs int64) string { return bucketQueueForm.name(n.p(), ttlMs) }

// PluginExchange is the x-delayed-message exchange.
func (n Names) PluginExchange() string { return n.p() + ".plugin" }

// DueUnroutable is the alternate exchange (headers) that the policy [Names.TargetsPolicy] gives
// every target exchange: a due message that came through D for target X (header
// rabbitdelay-target: X) and that X routes to no queue goes there, and on to the parking queue.
func (n Names) DueUnroutable() string { return n.p() + ".due-unroutable" }

// DelayQueuesPattern is the pattern of the policy [Names.DelayQueuesPolicy]: the parking queue
// and every name of the naming rule's delay queues, whatever the ladder, its shards and the
// buckets (so also an earlier ladder's queues, which may still hold messages). Built from the
// forms that format and parse these names, not by listing the plan's queues: RabbitMQ refuses a
// policy pattern over about 32 KB ("regular expression is too large").
func (n Names) DelayQueuesPattern() string {
	return "^" + regexp.QuoteMeta(n.p()) + `\.(?:` + parkingForm.pattern() + "|" + bucketQueueForm.pattern() + "|" + ladderQueueForm.pattern() + ")$"
}

// DelayQueuesPolicy is the name of the policy topology.Apply sets on the delay queues and the parking
// queue (see topology.Plan.Policies).
func (n Names) DelayQueuesPolicy() string { return n.p() + ".delay-queues" }

// TargetsPolicy is the name of the policy topology.Apply sets on the target exchanges, whose
// alternate-exchange is [Names.DueUnroutable] (see topology.Plan.Policies).
func (n Names) TargetsPolicy() string { return n.p() + ".targets" }

// RevokedPolicy is the name of the policy topology.Apply sets on the revocation stream [Names.Revoked],
// whose max-age repeats the stream's x-max-age (see topology.Plan.Policies).
func (n Names) RevokedPolicy() string { return n.p() + ".revoked-retention" }

// Reserved reports whether name belongs to the naming rule, whatever the ladder and buckets:
// <prefix>.dispatch, .unroutable, .due-unroutable, .parking, .buckets, .plugin, .revoked, .spec,
// .retry (the consumer package's retry exchange, which [Spec.Validate] takes as a target without
// a type), or a name starting with <prefix>.ladder., <prefix>.bucket. or <prefix>.plugin-probe.
// (the plugin probe's temporary exchange). [Spec.Validate] refuses such a target, ready queue
// or ready-queue exchange. Other names under the prefix, like <prefix>.orders, are free.
func (n Names) Reserved(name string) bool {
	switch name {
	case n.Dispatch(), n.Unroutable(), n.DueUnroutable(), n.Parking(), n.BucketExchange(), n.PluginExchange(), n.Retry(), n.Revoked(), n.SpecStream():
		return true
	}
	for _, under := range []string{".ladder.", ".bucket.", ".plugin-probe."} {
		if strings.HasPrefix(name, n.p()+under) {
			return true
		}
	}
	return false
}

// Retry is the consumer package's retry exchange (direct): a failed message comes back through
// it, after a delay, to the one queue it came from (see topology's retry routing).
func (n Names) Retry() string { return n.p() + ".retry" }

// Revoked is the revocation stream: where amqpdelay's Publisher.Revoke records which delayed
// messages must not reach a handler, and where package revoke's readers read them
// (x-queue-type stream, x-max-age [Spec.RevocationRetention]).
func (n Names) Revoked() string { return n.p() + ".revoked" }

// SpecStream is the stream whose last record is the Spec that `rabbitdelay apply` declared
// (see [ReadRecord]).
func (n Names) SpecStream() string { return n.p() + ".spec" }

// OwnsExchange reports whether name is one of the exchanges of n's topology that only its
// Publishers' delay paths write to: the names [Names.Reserved] holds, less those of queues (the
// parking queue, the revocation and spec streams, the delay queues), which an exchange of the user's may
// carry: queues and exchanges are named apart.
func (n Names) OwnsExchange(name string) bool {
	return n.Reserved(name) && name != n.Parking() && name != n.Revoked() && name != n.SpecStream() && !IsDelayQueueName(name)
}

// OwnsQueue reports whether name is one of the queues of n's topology that only its Publishers'
// delay paths write to: the revocation stream, the spec stream and the delay queues (ladder, last-hop and bucket
// queues). The parking queue is not one (the consumer package parks messages there through the
// default exchange).
func (n Names) OwnsQueue(name string) bool {
	return name == n.Revoked() || name == n.SpecStream() || (strings.HasPrefix(name, n.LadderPrefix()) || strings.HasPrefix(name, n.p()+".bucket.")) && IsDelayQueueName(name)
}

// ForeignPrefixes returns the prefixes other than own under which name is one of a topology's
// own objects: an exchange ([Names.OwnsExchange]), or, with queue, a queue ([Names.OwnsQueue]),
// the parking queue too when parking is set. A name like "billing.ladder.00.01.entry" could be
// prefix "billing"'s; whether that topology exists is for a passive declare of its parking
// queue to say.
func ForeignPrefixes(name, own string, queue, parking bool) []string {
	var out []string
	for i := strings.IndexByte(name, '.'); i > 0; {
		prefix := name[:i]
		n := Names{Prefix: prefix}
		var owned bool
		switch {
		case !queue:
			owned = n.OwnsExchange(name)
		default:
			owned = n.OwnsQueue(name) || parking && name == n.Parking()
		}
		if prefix != own && owned {
			out = append(out, prefix)
		}
		j := strings.IndexByte(name[i+1:], '.')
		if j < 0 {
			break
		}
		i += j + 1
	}
	return out
}

// BrokerReserved reports whether name starts with "amq.", the prefix RabbitMQ keeps for its own
// exchanges and queues: declaring one fails with 403 ACCESS_REFUSED (AMQP 0-9-1,
// exchange.declare's reserved names; https://www.rabbitmq.com/docs/queues#names), so only the
// broker creates them.
func BrokerReserved(name string) bool { return strings.HasPrefix(name, "amq.") }
