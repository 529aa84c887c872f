// Package route is rabbitdelay's plumbing around the delay arithmetic of package ttlbuckets:
// the headers that route a message through the ladder and the buckets (their names, the
// codec that writes and reads them, and the set a publisher strips before a new delay), and
// the list of delay queues the topology declares with the exchange each level hands a
// message on to. The publisher, the consumer and the declare command use it; a user plans
// delays with ttlbuckets alone. It does no I/O.
//
// # Units
//
// Queue TTLs ([LadderQueue.TTL], [DelayQueue.TTL]) are int64 milliseconds, the unit of
// RabbitMQ's x-message-ttl. Header values are int64: a Go int in an amqp091 Table goes on
// the wire as a signed 32-bit value.
//
// # Routing
//
// Level L of a ladder has a headers exchange and, for every digit value v in 1..r-1, a
// queue whose x-message-ttl is v·r^L·u ([Queues]), bound on the level's [DigitHeader] equal
// to v; a second binding passes a message whose digit is 0 straight on. When the TTL
// expires the broker dead-letters the message, with its routing key and headers, to the
// next exchange ([Next]); after the last level the dispatch exchange hands it to its target
// ([TargetHeader]). [EncodeRoute] also sends the last hop through the level's last-hop
// queue, which dead-letters straight into the dispatch exchange instead of through every
// remaining level's exchange.
//
// # Sources
//
//   - Dead-lettering on expiry, keeping the routing key and headers and adding x-death:
//     https://www.rabbitmq.com/docs/dlx
//   - A headers exchange ignores binding arguments beginning with "x-", and matches integer
//     values across AMQP integer types: https://www.rabbitmq.com/docs/exchanges#headers
//     and rabbit_exchange_type_headers.erl.
package route
