// Package route is the plumbing around ttlbuckets' delay arithmetic: the headers that route a
// message through the ladder and the buckets (names, codec, and the set stripped before a new
// delay), and the delay queues the topology declares with the exchange each level hands a
// message on to. It does no I/O.
//
// Queue TTLs are int64 milliseconds (x-message-ttl); header values are int64, as a Go int in an
// amqp091 Table goes on the wire as 32 bits. Level L has a headers exchange and, per digit v in
// 1..r-1, a queue of TTL v·r^L·u ([Queues]) bound on [DigitHeader] = v; digit 0 passes straight
// on. An expired message is dead-lettered, routing key and headers kept, to the next level
// ([Next]), then to the dispatch exchange ([TargetHeader]); a last-hop queue dead-letters
// straight into the dispatch exchange ([EncodeRoute]).
//
// Sources: https://www.rabbitmq.com/docs/dlx; a headers exchange ignores "x-" arguments and
// matches integers across AMQP types: https://www.rabbitmq.com/docs/exchanges#headers.
package route
