// Package ttlbuckets holds rabbitdelay's delay arithmetic: the ladder of per-TTL queues
// that carries any delay up to a maximum, and the fixed-delay buckets. A [Ladder] turns a
// requested delay into a [Plan]: the delay it applies and the queues, one hop each, the
// message passes through. It does no I/O and imports only the standard library. The
// headers that route a message and the list of queues to declare are rabbitdelay's own
// plumbing, used by its publisher and its declare command, and are not part of this
// package.
//
// # Units
//
// Delays are [time.Duration] values. Queue TTLs ([Hop.TTL], [Bucket.TTL]) are int64
// milliseconds, the unit of RabbitMQ's x-message-ttl.
//
// # The ladder
//
// A [Ladder] writes a delay d, in units u ([Ladder.Unit], 1 ms by default), in radix r
// ([Ladder.Radix], a power of two):
//
//	d = sum over levels L of digit_L · r^L · u,   0 <= digit_L < r
//
// Level L has, for every digit value v in 1..r-1, a queue whose x-message-ttl is v·r^L·u. A
// message parks in the queue of its digit at each level whose digit is not 0 and passes
// every other level straight on; when a queue's TTL expires the broker dead-letters the
// message, with its routing key and headers, to the next level, and after the last to its
// target. Each queue has one TTL, so no message waits behind a longer one (RabbitMQ expires
// messages only from a queue's head).
//
// A message takes one hop per non-zero digit ([Plan.Hops]; [TopSplit] at most one more); the
// hops' TTLs add up to the effective delay ([Plan.Effective]). [Ladder.Levels] is the most
// hops a message can take ([TopSplit]: at most one more).
//
// [Ladder.Order] chooses the direction of travel. [TopSplit], the default, takes part of the
// highest digit first (through a first-hop queue that dead-letters into level 0) and the rest
// last, so the broker does almost nothing while a message is published and the short hops
// run between the two long ones; [ShortestFirst] climbs from the lowest non-zero level, so
// only the last and longest hop ends just before the message is due, but the short hops run
// right after the publish; [LongestFirst] descends from the highest, so most hops of a burst
// fall in the last moments before due; [TopFirst] takes the highest digit's hop first and
// then climbs from level 0. Publisher and topology must agree on the order.
//
// Each hop costs the broker a dead-lettering (see docs/benchmarks.md): a larger radix means
// fewer hops but more queues. With the default maximum, 2^32-1 ms (the delayed-message
// plugin's ceiling), radix 16, the default, needs 8 levels, 120 queues (and 105 first-hop
// queues in the top-split and top-first orders) and at most 9 hops (8 outside top-split);
// radix 2 needs 32 queues (and 31 first-hop queues) and 32 hops (its digits are all 1, so
// top-split never splits), radix 64 378 queues (and 315) and 7 hops (6).
//
// # Rounding and the maximum
//
// A delay is never shortened: a positive delay that is not a whole number of units is
// rounded up to the next unit ([RoundUp], the default) or rejected with [ErrNotWholeUnit]
// ([Strict]); so d <= effective < d+u. [Ladder.Exact] tells whether a delay needs no
// rounding. A delay above [Ladder.Max] is rejected with [ErrDelayTooLong]. A delay d <= 0
// is not an error: its Plan has no hops and Entry -1, and the message is published straight
// to its target.
//
// # Buckets
//
// [Buckets] is a set of fixed delays, each served by one queue with that TTL: one hop,
// exact, no rounding. [Buckets.Lookup] finds the bucket of a delay.
//
// # Limits
//
//   - Unit: whole milliseconds, at least 1 ms.
//   - Radix: 2, 4, 8, 16, 32 or 64.
//   - Queue TTL and bucket delay: at most [MaxQueueTTL] ms. Every level's queues are
//     declared, so the top level's digit r-1 must fit; [Ladder.Validate] states the largest
//     Max for the Unit and Radix given.
//   - This package computes when a message is due, not when the broker delivers it.
//
// # Sources
//
//   - Per-queue x-message-ttl, in milliseconds, expiring from a queue's head only:
//     https://www.rabbitmq.com/docs/ttl
//   - The x-message-ttl ceiling: rabbit_amqqueue.erl (check_message_ttl_arg) checks it with
//     rabbit_misc:check_expiry and refuses a larger value with PRECONDITION_FAILED
//     value_too_large.
//   - Dead-lettering on expiry, keeping the routing key and headers:
//     https://www.rabbitmq.com/docs/dlx
package ttlbuckets
