// Package ttlbuckets holds rabbitdelay's delay arithmetic: the ladder of per-TTL queues that
// carries any delay up to a maximum, and the fixed-delay buckets. A [Ladder] turns a delay into
// a [Plan]: the delay it applies and the queues, one hop each, the message passes through. It
// does no I/O and imports only the standard library; docs/how-it-works.md describes the ladder.
//
// A delay d, in units u ([Ladder.Unit]), is written in radix r ([Ladder.Radix]):
//
//	d = sum over levels L of digit_L · r^L · u,   0 <= digit_L < r
//
// Level L has a queue with x-message-ttl v·r^L·u for each digit value v in 1..r-1. A message
// parks in the queue of each non-zero digit; on expiry the broker dead-letters it, with its
// routing key and headers, to the next level, and after the last to its target. Each queue has
// one TTL, so no message waits behind a longer one (RabbitMQ expires only from a queue's head).
// Each hop costs a dead-lettering: a larger radix means fewer hops but more queues.
//
// # Units and limits
//
//   - Delays are [time.Duration] values; queue TTLs ([Hop.TTL], [Bucket.TTL]) are int64 ms,
//     the unit of x-message-ttl.
//   - A delay is never shortened: it is rounded up to whole units ([RoundUp]) or refused
//     ([Strict]), so d <= effective < d+u.
//   - Unit: whole milliseconds, at least 1 ms. Radix: 2, 4, 8, 16, 32 or 64.
//   - Queue TTL and bucket delay: at most [MaxQueueTTL] ms; [Ladder.Validate] states the
//     largest Max for a Unit and Radix.
//   - This package computes when a message is due, not when the broker delivers it.
//
// # Sources
//
//   - Per-queue x-message-ttl, in ms, expiring from the head only: https://www.rabbitmq.com/docs/ttl
//   - The x-message-ttl ceiling: rabbit_amqqueue.erl, check_message_ttl_arg.
//   - Dead-lettering on expiry keeps the routing key and headers: https://www.rabbitmq.com/docs/dlx
package ttlbuckets
