// Package delayspec is what the delay topology's clients (packages amqpdelay, consumer, revoke
// and schedule) and its administration (package topology and the rabbitdelay CLI) share: the
// specification of a topology ([Spec]) and its validation, the one naming rule of its objects
// ([Names], [IsDelayQueueName], [Names.DelayQueuesPattern]), and the reader of the AMQPDELAY_*
// variables ([ReadEnv]). It does no I/O besides reading the environment and the spec record.
//
// # Names
//
//	<prefix>.dispatch          headers exchange D: routes a due message to its target by the
//	                           rabbitdelay-target header; alternate exchange <prefix>.unroutable
//	<prefix>.unroutable        fanout exchange, D's alternate exchange
//	<prefix>.parking           queue bound to <prefix>.unroutable: due messages no target took
//	<prefix>.ladder.LL[.sK]    headers exchange of ladder level LL (00, 01, ...) in shard K >= 1
//	                           ([Spec.Shards]; shard 0 has no .sK); + ".last": of its last-hop queues
//	<prefix>.ladder.LL.DD[.sK] ladder queue of level LL, digit DD (x-message-ttl DD·radix^LL·unit);
//	                           + ".last": last-hop queue, same TTL, dead-letters to D;
//	                           + ".first": first-hop queue of level >= 1 (top-split and top-first),
//	                           same TTL, dead-letters to level 0
//	<queue>.entry              fanout exchange bound to ladder queue <queue> alone, for first hops
//	<prefix>.buckets           headers exchange of the buckets (rabbitdelay-bucket header)
//	<prefix>.bucket.<ms>ms     bucket queue with x-message-ttl <ms>
//	<prefix>.plugin            x-delayed-message exchange (x-delayed-type headers), bound to D
//	<prefix>.due-unroutable    headers exchange, the targets' alternate exchange (policy
//	                           <prefix>.targets): parks due messages a target routes nowhere
//	<prefix>.revoked           stream of revocations ([Names.Revoked])
//	<prefix>.spec              stream whose last record is the Spec apply declared ([ReadRecord])
//
// and three policies: <prefix>.delay-queues, <prefix>.targets and <prefix>.revoked-retention.
package delayspec
