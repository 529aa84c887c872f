// Package ttlbuckets holds rabbitdelay's delay arithmetic: the ladder of per-TTL queues
// that carries any delay up to a maximum, the fixed-delay buckets, the headers that route a
// message through them, and the list of queues to declare. It does no I/O and imports only
// the standard library.
//
// # Units
//
// Delays are [time.Duration] values. Queue TTLs ([LadderQueue.TTL], [Hop.TTL],
// [Bucket.TTL], [DelayQueue.TTL]) are int64 milliseconds, the unit of RabbitMQ's
// x-message-ttl. Header values are int64.
//
// # The ladder
//
// A [Ladder] writes a delay d, in units u ([Ladder.Unit], 1 ms by default), in radix r
// ([Ladder.Radix], a power of two):
//
//	d = sum over levels L of digit_L · r^L · u,   0 <= digit_L < r
//
// Level L has a headers exchange and, for every digit value v in 1..r-1, a queue whose
// x-message-ttl is v·r^L·u ([Ladder.Queues]), bound on the level's [DigitHeader] equal to v;
// a second binding passes a message whose digit is 0 straight on. When the TTL expires the
// broker dead-letters the message, with its routing key and headers, to the next exchange
// ([Ladder.Next]); after the last level the dispatch exchange hands it to its target. Each
// queue has one TTL, so no message waits behind a longer one (RabbitMQ expires messages only
// from a queue's head).
//
// A message takes one hop per non-zero digit ([Plan.Hops]); the hops' TTLs add up to the
// effective delay ([Plan.Effective]). [Ladder.EncodeRoute] also sends the last hop through
// the level's last-hop queue, which dead-letters straight into the dispatch exchange
// instead of through every remaining level's exchange.
//
// [Ladder.Order] chooses the direction of travel. [ShortestFirst], the default, climbs from
// the lowest non-zero level, so only the last and longest hop ends just before the message
// is due; [LongestFirst] descends from the highest, so most hops of a burst fall in the last
// moments before due; [TopFirst] takes the highest digit's hop first (through a first-hop
// queue that dead-letters into level 0) and then climbs from level 0: the broker does almost
// nothing while a message is published, and the short hops run when the first hop ends, the
// sum of the lower digits before due. Publisher and topology must agree on the order.
//
// Each hop costs the broker a dead-lettering (see docs/benchmarks.md): a larger radix means
// fewer hops but more queues. With the default maximum, 2^32-1 ms (about 49.7 days, the
// delayed-message plugin's ceiling), radix 16, the default, needs 8 levels, 120 queues and
// at most 8 hops; radix 2 needs 32 queues and 32 hops, radix 64 378 queues and 6 hops.
//
// # Rounding and the maximum
//
// A delay is never shortened: a positive delay that is not a whole number of units is
// rounded up to the next unit ([RoundUp], the default) or rejected with [ErrNotWholeUnit]
// ([Strict]); so d <= effective < d+u. A delay above [Ladder.Max] is rejected with
// [ErrDelayTooLong]. A delay d <= 0 is not an error: its Plan has no hops and Entry -1, and
// the message is published straight to its target.
//
// # Buckets
//
// [Buckets] is a set of fixed delays, each served by one queue with that TTL: one hop,
// exact, no rounding. [DelayQueues] lists the ladder's queues and the buckets together, in
// a stable order, for the topology to declare.
//
// # Limits
//
//   - Unit: whole milliseconds, at least 1 ms.
//   - Radix: 2, 4, 8, 16, 32 or 64.
//   - Queue TTL and bucket delay: at most [MaxQueueTTL] ms (3,650 days). Every level's
//     queues are declared, so the top level's digit r-1 must fit; [Ladder.Validate] states
//     the largest Max for the Unit and Radix given.
//   - This package computes when a message is due, not when the broker delivers it.
//
// # Sources
//
//   - Per-queue x-message-ttl, in milliseconds, expiring from a queue's head only:
//     https://www.rabbitmq.com/docs/ttl
//   - The x-message-ttl ceiling: rabbit_amqqueue.erl (check_message_ttl_arg) checks it with
//     rabbit_misc:check_expiry and refuses a larger value with PRECONDITION_FAILED
//     value_too_large.
//   - Dead-lettering on expiry, keeping the routing key and headers and adding x-death:
//     https://www.rabbitmq.com/docs/dlx
//   - A headers exchange ignores binding arguments beginning with "x-", and matches integer
//     values across AMQP integer types: https://www.rabbitmq.com/docs/exchanges#headers
//     and rabbit_exchange_type_headers.erl.
package ttlbuckets
