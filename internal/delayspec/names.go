package delayspec

import (
	"cmp"
	"regexp"
	"strings"
)

// Names is the one naming rule of the topology: the prefix, a dot and a fixed suffix, so two
// prefixes live side by side in one vhost. The package documentation lists every name.
type Names struct {
	Prefix string // "" means DefaultPrefix
}

func (n Names) p() string { return cmp.Or(n.Prefix, DefaultPrefix) }

// Names returns the naming rule of s's prefix.
func (s Spec) Names() Names { return Names{Prefix: s.WithDefaults().Prefix} }

// Dispatch is the dispatch exchange D (headers).
func (n Names) Dispatch() string { return n.p() + ".dispatch" }

// Unroutable is D's alternate exchange (fanout).
func (n Names) Unroutable() string { return n.p() + ".unroutable" }

// Parking is the queue that holds messages no target took.
func (n Names) Parking() string { return parkingForm.name(n.p()) }

// LadderPrefix begins the name of every exchange and queue of the ladder: <prefix>.ladder.
func (n Names) LadderPrefix() string { return n.p() + ".ladder." }

// LadderExchange is the headers exchange of ladder level level.
func (n Names) LadderExchange(level int) string { return ladderExchangeForm.name(n.p(), int64(level)) }

// LadderQueue is the queue of digit value digit at ladder level level.
func (n Names) LadderQueue(level, digit int) string {
	return ladderQueueForm.name(n.p(), int64(level), int64(digit))
}

// LadderLastHopQueueShard is <prefix>.ladder.LL.DD[.sK].last: the TTL of
// [Names.LadderQueueShard], dead-lettering into the dispatch exchange (a message's last hop).
func (n Names) LadderLastHopQueueShard(level, digit, shard int) string {
	return ladderQueueForm.name(n.p(), int64(level), int64(digit), int64(shard), 1)
}

// LadderFirstHopQueueShard is <prefix>.ladder.LL.DD[.sK].first, level 1 and up, for the
// [ttlbuckets.TopFirst] and [ttlbuckets.TopSplit] orders: the TTL of [Names.LadderQueueShard],
// dead-lettering into level 0's exchange of the shard.
func (n Names) LadderFirstHopQueueShard(level, digit, shard int) string {
	return ladderQueueForm.name(n.p(), int64(level), int64(digit), int64(shard), 0, 1)
}

// LadderLastHopExchangeShard is [Names.LadderExchangeShard] + ".last", the headers exchange of
// the level's last-hop queues.
func (n Names) LadderLastHopExchangeShard(level, shard int) string {
	return ladderExchangeForm.name(n.p(), int64(level), int64(shard), 1)
}

// LadderEntryExchange is queue + ".entry", a fanout exchange bound to that ladder queue alone,
// where a Publisher sends a first hop: fanout routes without testing the headers against each
// binding as the level's headers exchange does (rabbit_exchange_type_headers).
func (n Names) LadderEntryExchange(queue string) string { return queue + ".entry" }

// LadderExchangeShard is [Names.LadderExchange] for shard 0, <prefix>.ladder.LL.sK for shard K.
func (n Names) LadderExchangeShard(level, shard int) string {
	return ladderExchangeForm.name(n.p(), int64(level), int64(shard))
}

// LadderQueueShard is [Names.LadderQueue] for shard 0, <prefix>.ladder.LL.DD.sK for shard K.
func (n Names) LadderQueueShard(level, digit, shard int) string {
	return ladderQueueForm.name(n.p(), int64(level), int64(digit), int64(shard))
}

// BucketExchange is the headers exchange the bucket queues are bound to.
func (n Names) BucketExchange() string { return n.p() + ".buckets" }

// BucketQueue is the queue of the bucket whose x-message-ttl is ttlMs milliseconds.
func (n Names) BucketQueue(ttlMs int64) string { return bucketQueueForm.name(n.p(), ttlMs) }

// PluginExchange is the x-delayed-message exchange.
func (n Names) PluginExchange() string { return n.p() + ".plugin" }

// DueUnroutable is the alternate exchange (headers) the policy [Names.TargetsPolicy] gives the
// targets: a due message its target routes nowhere goes there, and on to the parking queue.
func (n Names) DueUnroutable() string { return n.p() + ".due-unroutable" }

// DelayQueuesPattern is the pattern of the policy [Names.DelayQueuesPolicy]: the parking queue
// and every delay queue name of any ladder, shard or bucket (an earlier ladder's too). Built
// from the forms, not the plan's queues: RabbitMQ refuses a pattern over about 32 KB.
func (n Names) DelayQueuesPattern() string {
	return "^" + regexp.QuoteMeta(n.p()) + `\.(?:` + parkingForm.pattern() + "|" + bucketQueueForm.pattern() + "|" + ladderQueueForm.pattern() + ")$"
}

// DelayQueuesPolicy is the policy topology.Apply sets on the delay and parking queues.
func (n Names) DelayQueuesPolicy() string { return n.p() + ".delay-queues" }

// TargetsPolicy is the policy topology.Apply sets on the targets (alternate-exchange
// [Names.DueUnroutable]).
func (n Names) TargetsPolicy() string { return n.p() + ".targets" }

// RevokedPolicy is the policy topology.Apply sets on [Names.Revoked] (max-age as its x-max-age).
func (n Names) RevokedPolicy() string { return n.p() + ".revoked-retention" }

// Reserved reports whether name belongs to the naming rule, whatever the ladder and buckets:
// <prefix>.dispatch, .unroutable, .due-unroutable, .parking, .buckets, .plugin, .revoked, .spec,
// .retry (which [Spec.Validate] takes as a target without a type), or a name starting with
// <prefix>.ladder., .bucket. or .plugin-probe.. Other names under the prefix are free.
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

// Retry is the consumer package's retry exchange (direct), back to a message's own queue.
func (n Names) Retry() string { return n.p() + ".retry" }

// Revoked is the revocation stream that Publisher.Revoke writes and package revoke reads
// (x-max-age [Spec.RevocationRetention]).
func (n Names) Revoked() string { return n.p() + ".revoked" }

// SpecStream is the stream whose last record is the Spec apply declared ([ReadRecord]).
func (n Names) SpecStream() string { return n.p() + ".spec" }

// OwnsExchange reports whether name is an exchange only n's Publishers' delay paths write to:
// [Names.Reserved] less the names of queues, which a user's exchange may carry.
func (n Names) OwnsExchange(name string) bool {
	return n.Reserved(name) && name != n.Parking() && name != n.Revoked() && name != n.SpecStream() && !IsDelayQueueName(name)
}

// OwnsQueue reports whether name is a queue only n's Publishers' delay paths write to: the
// revocation and spec streams and the delay queues; not the parking queue (consumers park there).
func (n Names) OwnsQueue(name string) bool {
	return name == n.Revoked() || name == n.SpecStream() || (strings.HasPrefix(name, n.LadderPrefix()) || strings.HasPrefix(name, n.p()+".bucket.")) && IsDelayQueueName(name)
}

// ForeignPrefixes returns the prefixes other than own under which name is a topology's own
// exchange ([Names.OwnsExchange]) or, with queue, queue ([Names.OwnsQueue]; with parking the
// parking queue too). Whether that topology exists is for the caller to find out.
func ForeignPrefixes(name, own string, queue, parking bool) []string {
	var out []string
	for i := 1; i < len(name); i++ { // a prefix is not empty, but may start with a dot
		if name[i] != '.' {
			continue
		}
		prefix := name[:i]
		n := Names{Prefix: prefix}
		owned := queue && (n.OwnsQueue(name) || parking && name == n.Parking()) || !queue && n.OwnsExchange(name)
		if prefix != own && owned {
			out = append(out, prefix)
		}
	}
	return out
}

// BrokerReserved reports whether name starts with "amq.", which RabbitMQ keeps for its own
// objects: declaring one fails with 403 ACCESS_REFUSED (https://www.rabbitmq.com/docs/queues#names).
func BrokerReserved(name string) bool { return strings.HasPrefix(name, "amq.") }
