// Package amqpdelay is the client of rabbitdelay: a Publisher that sends a message "to
// exchange X with routing key K, due in d" through the delay topology that `rabbitdelay apply`
// created, and returns only when the broker has confirmed it. When the message is due, X
// routes it with K as if it had been published then; consumers stay plain AMQP consumers of
// their queues. [Due] tells a consumer when a delivery was due.
//
// # Paths
//
// The Publisher picks one path per message ([Receipt.Path] reports it), from nothing but the
// delay, the ladder, the buckets, the strategy and the last plugin probe:
//
//	delay <= 0                  PathDirect  published to X now (any exchange, "" included)
//	delay equals a bucket       PathBucket  one hop through the bucket queue of that TTL
//	                                        (every strategy but PluginOnly)
//	Auto (default):
//	  ladder as exact as plugin PathLadder  d <= the ladder's max, and d rounded up to the
//	                                        ladder's unit is d rounded up to the ms
//	  else plugin can take d    PathPlugin  broker has the plugin exchange, d <= 2^32-1 ms
//	  else ladder, rounded up   PathLadder  Rounded true: never early
//	  else                      ErrDelayTooLong, stating the maximum; nothing sent
//	PreferPlugin                PathPlugin whenever the plugin can take d; else as Auto
//	PluginOnly                  PathPlugin, or ErrPluginUnavailable / ErrDelayTooLong
//	LadderOnly                  PathBucket or PathLadder, never the plugin
//	X not a target (delay > 0)  ErrUnknownTarget; nothing sent
//
// # Design
//
// A Publisher owns one connection and a few channels in publisher-confirm mode (Config.Channels,
// default 4), chosen round robin; concurrent publishes are pipelined. Returns are matched to
// publishes by message ID (the Publisher sets one when the message has none). It sends a copy of
// the caller's message: on a delay path the copy loses every header that decides or records a
// delay (rabbitdelay-target, -due, -bucket, -last-level and -digit-N, x-delay, x-death,
// x-first-death-* and x-last-death-*) and gains the target (rabbitdelay-target), the due time
// (rabbitdelay-due, Unix ms) and the path's routing header. Delivery mode is persistent unless the
// caller chose transient. Direct, bucket and ladder publishes are mandatory; plugin publishes are
// not (the plugin answers every delayed publish with NO_ROUTE).
//
// A ladder publish goes to the entry exchange of the message's first queue. With several
// shards of the ladder (AMQPDELAY_SHARDS as applied) the message's MessageId picks the shard
// (FNV-1a modulo the shards) and the message keeps to it for every hop; [Receipt.Exchange]
// names it.
//
// [NewPublisher] checks that the topology exists (passive declares) and probes for the plugin
// exchange on a connection of its own. After a connection loss it reconnects with exponential
// back-off (Config.ReconnectMin and ReconnectMax), probes again and replaces the channels;
// publishes during an outage wait for the new connection until their context ends.
// Config.OnReconnect, Config.Logger and Config.Metrics observe it.
//
// # Guarantees
//
//   - Publish returns nil only after a broker ack. A nack gives ErrNacked, a returned mandatory
//     publish ErrUnroutable, a channel or connection closed before the confirmation
//     ErrConnectionLost (outcome unknown), a context that ends first its error, wrapped.
//   - A confirmed message on the bucket and ladder paths sits in durable queues (quorum queues
//     by default) as a persistent message.
//   - No message is delivered before its due time: delays are rounded up, never down.
//   - [Publisher.Revoke] and [Publisher.Reschedule] record revocations in the stream
//     <prefix>.revoked and return nil only after its confirm; readers never hand a copy to a
//     handler whose revocation was confirmed at least the bound (100 ms) before its due time.
//     Reschedule revokes the old copies only once the new one is confirmed.
//   - Safe for concurrent use; Close is idempotent. Logs go only to the injected
//     zerolog.Logger; no error or log line contains the URL's password.
//
// # Limits
//
//   - Each ladder hop adds broker latency (docs/benchmarks.md); buckets and the plugin take one
//     hop. A broker outage delays messages by up to its length.
//   - On the consumer side Delivery.Exchange is the exchange the broker last published the
//     message to, not X; the routing key is K, and the rabbitdelay-target header names X.
//   - A due message with no binding on X for its key goes to the parking queue, through the
//     alternate exchange that the policy <prefix>.targets gives X.
//   - A publish to a missing exchange (404 NOT_FOUND) or one the user may not write to (403
//     ACCESS_REFUSED) closes the channel, failing every publish in flight on it. So the first
//     publish to each exchange on a connection goes alone on a channel of its own, and gets
//     the refusal as its own answer (ErrExchangeNotFound, ErrAccessRefused). An exchange
//     deleted, or a permission taken away, after it took publishes still closes a shared
//     channel: the publishes in flight on it are sent again one at a time, so one the broker
//     had already stored may be stored twice, with the same MessageId.
//   - msg.Expiration is refused on delay paths: the message would expire inside the delay
//     queues, early.
//   - Input that would cost the whole connection is refused with ErrInvalidInput before
//     anything is sent: a short string over 255 bytes (names, properties, header keys at any
//     depth) and a NaN or infinite float header value.
//   - The plugin path keeps one copy of the message on one node and carries at most
//     2^32-1 ms (package plugin).
//
// # Sources
//
//   - Publisher confirms, and basic.return before basic.ack for unroutable mandatory
//     messages: https://www.rabbitmq.com/docs/confirms#when-publishes-are-confirmed
//   - Dead-lettering keeps the routing key and headers, adds x-death, removes the expiration,
//     and drops cycles (RabbitMQ 3.x counts x-death sent by a client):
//     https://www.rabbitmq.com/docs/dlx
//   - Quorum-queue at-least-once dead-lettering:
//     https://www.rabbitmq.com/docs/quorum-queues#dead-lettering
//   - Alternate exchanges: https://www.rabbitmq.com/docs/ae
//   - Per-queue TTL: https://www.rabbitmq.com/docs/ttl
//   - A publish to a missing exchange closes the channel with 404 NOT_FOUND:
//     https://www.rabbitmq.com/docs/channels#error-handling
//   - Short strings are at most 255 bytes: AMQP 0-9-1 specification, section 4.2.5.3;
//     amqp091-go (writeShortstr) refuses a longer one and closes the connection.
//   - RabbitMQ 3.10 closes the connection with 541 INTERNAL_ERROR on a NaN float header value.
package amqpdelay
