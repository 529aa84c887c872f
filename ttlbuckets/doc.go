// Package ttlbuckets holds rabbitdelay's delay arithmetic: the ladder of per-TTL queues
// that carries any delay up to a maximum, the fixed-delay buckets, the headers that route a
// message through them, and the list of queues to declare. It does no I/O and imports only
// the standard library; the topology package declares what it describes and the client
// publishes what it plans.
//
// # Units
//
// Delays are [time.Duration] values. Queue TTLs ([LadderQueue.TTL], [Hop.TTL],
// [Bucket.TTL], [DelayQueue.TTL]) are int64 milliseconds, the unit of RabbitMQ's
// x-message-ttl. Header values are int64 (see Headers).
//
// # The ladder
//
// A [Ladder] writes a delay d, in units u ([Ladder.Unit], 1 ms by default), in radix r
// ([Ladder.Radix], a power of two):
//
//	d = sum over levels L of digit_L · r^L · u,   0 <= digit_L < r
//
// Level L has a headers exchange and, for every digit value v in 1..r-1, a queue whose
// x-message-ttl is v·r^L·u ([Ladder.Queues]). The queue is bound to its level's exchange
// on the level's digit header ([DigitHeader]) equal to v; a second binding passes a
// message whose digit is 0 straight on. When a queue's TTL expires the broker
// dead-letters the message, with its routing key and headers, to the next exchange
// ([Ladder.Next]); after the last level the dispatch exchange hands it to its target.
// Every queue has one per-queue TTL, so its FIFO order is its expiry order: no message
// waits behind a longer one (per-message TTLs in one queue would, because RabbitMQ
// expires messages only from a queue's head).
//
// A message takes one hop per non-zero digit ([Plan.Hops]); the sum of the hops' TTLs is
// the effective delay ([Plan.Effective]). [Ladder.Plan] computes the digits, the level the
// message is published to ([Plan.Entry]) and the hops; [Ladder.EncodeDigits] writes the
// digits into the message's headers, every level's digit, zeros included, so whichever
// exchange the message reaches can route it. [Ladder.EncodeRoute] writes the digits only from
// the entry level to the last hop's level ([Plan.LastLevel]), the last one as [Ladder.LastHopValue] (digit +
// radix), and that level in [LastLevelHeader]: on a topology with last-hop queues (per level
// and digit, a queue with the same TTL that dead-letters into the dispatch exchange, reached
// through the level's last-hop exchange on LastLevelHeader and digit + radix), the message's
// last hop then ends in the dispatch exchange, as a bucket's hop does, instead of passing
// through every remaining level's exchange. That routing is done by
// the broker's dead-letter worker in the second the message falls due; for a burst of messages
// due together it was most of the broker's work.
//
// # Hop order
//
// [Ladder.Order] chooses the direction of travel. [ShortestFirst], the default, enters at
// the lowest level with a non-zero digit and climbs (level L hands to L+1, the top level
// to the dispatch exchange), so only the last and longest hop ends in the moments before
// the message is due. [LongestFirst] is the textbook order: it enters at the
// highest non-zero level and descends, so for a burst of messages due together every hop
// but the first falls in the last r^top units before due, and the broker performs hops×N
// dead-letterings in that window. Both orders apply the same total delay through the
// same queues; only the bindings' destinations differ, so publisher and topology must
// agree on the order.
//
// # Choosing a ladder
//
// Each hop costs the broker a dead-lettering, measured at about 2-4 ms of lateness per
// hop, and divides the drain rate of a backlog; fewer hops is the lever for precision.
// A larger radix means fewer hops but more queues. For the default maximum, 2^32-1 ms
// (about 49.7 days, the delayed-message plugin's ceiling, and more than 30 days at 1 ms
// resolution):
//
//	radix  levels  queues  most hops  lateness from hops (2-4 ms each)
//	    2      32      32         32   64-128 ms
//	    4      16      48         16   32-64 ms
//	    8      11      77         11   22-44 ms
//	   16       8     120          8   16-32 ms
//	   32       7     217          7   14-28 ms
//	   64       6     378          6   12-24 ms
//
// Radix 16 is the default: 8 hops at most, 120 queues. Going to radix 32 would save one
// hop for 97 more queues (217), each a queue the broker keeps, replicates (quorum queues)
// and monitors. The unit is 1 ms because x-message-ttl counts in milliseconds; a coarser
// unit only reduces the levels needed for a long maximum.
//
// # Rounding and the maximum
//
// A delay is never shortened: a positive delay that is not a whole number of units is
// rounded up to the next unit ([RoundUp], the default; [Plan.Rounded] says so), or
// rejected with [ErrNotWholeUnit] ([Strict]). The effective delay e of a positive
// request d satisfies d <= e < d+u.
//
// [Ladder.Max] is the largest delay accepted; a larger one is rejected with
// [ErrDelayTooLong]. The ladder is sized for its capacity, Max rounded up to whole units,
// ceil(Max/u) units: [Ladder.Levels] is the smallest L with r^L > ceil(Max/u). So every
// accepted delay, once rounded up, fits the levels; when Max is not a whole number of
// units, a delay just below Max may take effect up to one unit after Max (never beyond
// the capacity). [Ladder.Exact] and [Ladder.Plan] agree: for d > 0, Exact(d) is true
// exactly when Plan(d, Strict) succeeds.
//
// A delay d <= 0 is not an error: its Plan has no hops and Entry -1, and the message is
// published straight to its target.
//
// # Buckets
//
// [Buckets] is a set of fixed delays, each served by one queue with that TTL, one hop and
// exact. [NewBuckets] rejects delays that are not whole milliseconds, not positive, above
// [MaxQueueTTL] or repeated; [Buckets.Lookup] matches a delay exactly, with no rounding.
// [DelayQueues] lists the ladder's queues and the buckets together, in a stable order, for
// the topology to declare.
//
// # Headers
//
// The ladder's bindings match on headers named by this package: [DigitHeader] per level,
// [TargetHeader] for the dispatch exchange, [BucketHeader] for the bucket exchange, and
// [DueHeader] for information. None begins with "x-", because a headers exchange ignores
// binding arguments that do (a binding on an "x-" header would match every message).
// Integer values are always int64: amqp091 sends a Go int as a signed 32-bit value, and
// RabbitMQ matches integers by value across AMQP integer types, so an int64 header
// matches a binding of any integer type. [Ladder.DecodeDigits] reads digits back from any
// Go integer type, for diagnostics. [IsDelayHeader] names the headers a publisher strips
// from a copied message before it enters a delay path.
//
// # Limits
//
//   - Unit: whole milliseconds, at least 1 ms.
//   - Radix: 2, 4, 8, 16, 32 or 64 (digits are extracted with shifts and masks).
//   - Queue TTL: at most [MaxQueueTTL] (315,360,000,000 ms, 3,650 days). Every queue of
//     every level is declared, so the top level's digit r-1 must fit: with a 1 ms unit
//     the largest Max is 2^39-1 ms (about 17.4 years) at radix 2, 2^36-1 ms (about 2.2
//     years) at radix 8, 16 and 64, and 2^35-1 ms (about 1.1 years) at radix 32.
//     [Ladder.Validate] states the allowed Max for the Unit and Radix given.
//   - Bucket delays: whole milliseconds from 1 ms to [MaxQueueTTL] ms.
//   - Precision: RabbitMQ expires messages in milliseconds and each hop adds a few
//     milliseconds of broker work; this package computes when a message is due, not when
//     the broker delivers it.
//
// # Sources
//
// The RabbitMQ rules this package relies on:
//
//   - Per-queue message TTL, x-message-ttl, in milliseconds, and expiry from a queue's
//     head only: https://www.rabbitmq.com/docs/ttl
//   - The x-message-ttl ceiling of 315,360,000,000 ms: declaring a larger value fails
//     with PRECONDITION_FAILED value_too_large (verified on RabbitMQ 3.10.8).
//   - Dead-lettering on expiry to x-dead-letter-exchange, keeping the routing key (when
//     no x-dead-letter-routing-key is set) and the headers, adding x-death, and its
//     cycle detection: https://www.rabbitmq.com/docs/dlx
//   - Headers exchanges ignore binding arguments beginning with "x-" (unless x-match is
//     all-with-x or any-with-x): https://www.rabbitmq.com/docs/exchanges#headers
//   - Integer header values match by value across AMQP integer types (an int32 binding
//     matches an int64 header), a string "1" does not match an integer 1 (verified on
//     RabbitMQ 3.10.8); amqp091-go sends a Go int as a signed 32-bit integer.
package ttlbuckets
