// Package delayspec is what the delay topology's client (packages amqpdelay, consumer, revoke
// and schedule) and its administration (package topology and the rabbitdelay CLI) share: the
// specification of a topology ([Spec]) and its validation, the one naming rule of its objects
// ([Names], [IsDelayQueueName], [Names.DelayQueuesPattern]), and the reader of the AMQPDELAY_*
// variables ([ReadEnv]). It does no I/O besides reading the environment, and imports nothing of
// the administration side.
//
// # Names
//
// [Names] gives every object of a topology its name:
//
//	<prefix>.dispatch          headers exchange D: routes a due message to its target by the
//	                           rabbitdelay-target header; alternate exchange <prefix>.unroutable
//	<prefix>.unroutable        fanout exchange, D's alternate exchange
//	<prefix>.parking           queue bound to <prefix>.unroutable: due messages no target took
//	<prefix>.ladder.LL         headers exchange of ladder level LL (two digits: 00, 01, ...)
//	<prefix>.ladder.LL.DD      ladder queue of level LL, digit DD (x-message-ttl DD·radix^LL·unit)
//	<prefix>.ladder.LL.last    headers exchange of level LL's last-hop queues, bound to <prefix>.ladder.LL
//	<prefix>.ladder.LL.DD.last last-hop queue of level LL, digit DD: same TTL, dead-letters to D
//	<prefix>.ladder.LL.sK      headers exchange of level LL in shard K >= 1 of the ladder (Spec.Shards)
//	<prefix>.ladder.LL.DD.sK   ladder queue of level LL, digit DD in shard K >= 1
//	<prefix>.ladder.LL.sK.last, <prefix>.ladder.LL.DD.sK.last  the same for shard K >= 1
//	<prefix>.ladder.LL.DD[.sK].first  first-hop queue of level LL >= 1, digit DD (top-split, the
//	                           default order, and top-first): same TTL, dead-letters to level 0
//	<queue>.entry              fanout exchange bound to the ladder, last-hop or first-hop queue <queue> alone:
//	                           a message's first hop is published there (see [Names.LadderEntryExchange])
//	<prefix>.buckets           headers exchange of the buckets (rabbitdelay-bucket header)
//	<prefix>.bucket.<ms>ms     bucket queue with x-message-ttl <ms>
//	<prefix>.plugin            x-delayed-message exchange (x-delayed-type headers), bound to D
//	<prefix>.due-unroutable    headers exchange, the target exchanges' alternate exchange (set by
//	                           the policy <prefix>.targets): parks due messages a target routes nowhere
//	<prefix>.revoked           stream of revocations (see [Names.Revoked])
//	<prefix>.spec              stream whose last record is the Spec apply declared (see [ReadRecord])
//
// and three policies (not exchanges or queues): <prefix>.delay-queues, <prefix>.targets and
// <prefix>.revoked-retention.
package delayspec
