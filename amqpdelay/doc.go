// Package amqpdelay is the client of rabbitdelay: a Publisher that sends a message "to
// exchange X with routing key K, due in d" through the delay topology that `rabbitdelay apply`
// created, and returns only when the broker has confirmed it. When the message is due, X
// routes it with K as if it had been published then; consumers stay plain AMQP consumers of
// their queues. [Due] tells a consumer when a delivery was due.
//
// # Paths
//
// The Publisher picks one path per message ([Receipt.Path] reports it):
//
//	delay <= 0                  PathDirect  published to X now (any exchange, "" included)
//	delay equals a bucket       PathBucket  one hop through the bucket queue of that TTL
//	                                        (every strategy but PluginOnly)
//	Auto (default):
//	  ladder as exact as plugin PathLadder  d <= the ladder's max, and d rounded up to the
//	                                        ladder's unit is d rounded up to the ms (always
//	                                        so with the default 1 ms unit; Rounded when a
//	                                        sub-ms rest was rounded up)
//	  else plugin can take d    PathPlugin  broker has the plugin exchange, d <= 2^32-1 ms
//	  else ladder, rounded up   PathLadder  Rounded true: never early
//	  else                      ErrDelayTooLong, stating the maximum; nothing sent
//	PreferPlugin                PathPlugin whenever the plugin can take d; else as Auto
//	PluginOnly                  PathPlugin, or ErrPluginUnavailable / ErrDelayTooLong
//	LadderOnly                  PathBucket or PathLadder, never the plugin
//	X not a target (delay > 0)  ErrUnknownTarget; nothing sent
//
// The choice is a pure function of the delay, the ladder, the buckets, the strategy and the
// last plugin probe.
//
// # Design
//
// A Publisher owns one connection (named in the management UI) and a few channels in
// publisher-confirm mode ([WithChannels], default 4), chosen round robin. Publishes on a
// channel are serialized only around the write; each then waits for its own confirmation, so
// many goroutines publishing at once are pipelined, not one round trip each. One goroutine
// per channel receives both the broker's basic.return and its confirmations in wire order;
// RabbitMQ sends a mandatory message's basic.return before its basic.ack, so a publish
// learns it was returned before it learns it was acked. Returns are matched to publishes by
// message ID (the Publisher sets one when the message has none; two publishes with the same
// ID take turns on a channel).
//
// What the Publisher sends is a copy of the caller's message: the caller's Headers map is
// never modified. On a delay path the copy's headers lose every header that decides or
// records a delay (ttlbuckets.IsDelayHeader: x-death, x-first-death-*, x-last-death-*,
// x-delay, rabbitdelay-*) and gain the target (rabbitdelay-target), the due time
// (rabbitdelay-due, Unix ms) and the path's routing header (the ladder's digits, the bucket's
// TTL, or x-delay as an int64). On the direct path only stale rabbitdelay-* headers are
// replaced; x-death stays. Delivery mode is persistent unless the caller chose transient.
// Direct, bucket and ladder publishes are mandatory; plugin publishes are not (the plugin
// answers every delayed publish with NO_ROUTE).
//
// A ladder publish goes to the entry exchange of the message's first queue
// (delayspec.Names.LadderEntryExchange). With
// shards of the ladder (delayspec.Spec.Shards > 1, AMQPDELAY_SHARDS) it goes to that exchange of
// the copy that the message's MessageId hashes to (FNV-1a modulo the copies), and the message
// keeps to that copy for every hop; [Receipt.Exchange] names it. At start the Publisher also checks the copies' marker exchange
// (delayspec.Names.ShardsMarker).
//
// At start, [NewPublisher] checks that the dispatch exchange exists (a passive declare) and
// probes for the plugin exchange on a connection of its own (on RabbitMQ 3.x a failed declare
// of an unknown exchange type closes the whole connection). After a connection loss a
// goroutine reconnects with exponential back-off ([WithReconnectBackoff], 100 ms doubling to
// 5 s by default), probes again and replaces the channels; a channel the broker closed (a
// publish to a missing exchange: 404) is reopened on the live connection. Publishes during an
// outage wait for the new connection until their context ends. [WithReconnectHandler]
// observes every change until Close begins; [WithLogger] logs them; [WithMetrics] counts
// them, and every publish by path and outcome, in Prometheus metrics.
//
// # Guarantees
//
//   - Publish returns nil only after a broker ack. A nack gives ErrNacked; a mandatory
//     publish the broker returned gives ErrUnroutable; a channel or connection closed before
//     the confirmation gives ErrConnectionLost (outcome unknown: the message may have been
//     stored); a context that ends first gives its error, wrapped.
//   - A confirmed message on the bucket and ladder paths sits in durable queues (quorum
//     queues by default: replicated, dead-lettered at least once) as a persistent message.
//   - No message is delivered before its due time: delays are rounded up, never down, and a
//     queue never expires a message before its TTL has passed.
//   - [Publisher.Revoke] and [Publisher.Reschedule] record revocations in the stream
//     <prefix>.revoked and return nil only after its confirm; readers (package revoke, and the
//     consumer package by default) never hand a copy to a handler when its revocation was
//     confirmed at least the bound (100 ms) before its due time. Which copy a revocation names:
//     [CopyHeader] and package revoke. Reschedule never drops the copy it publishes, and
//     revokes the old copies only once the new one is confirmed.
//   - Safe for concurrent use; Close is idempotent.
//   - Logs go only to the injected zerolog.Logger (default: none); no error or log line
//     contains the URL's password.
//
// # Limits
//
//   - Precision: each ladder hop costs a few milliseconds of broker work (docs/benchmarks.md
//     gives the lateness measured per path); buckets and the plugin take one hop. A broker outage delays messages by up to its length, even messages due after
//     it: a hop that should have ended during the outage ends when the broker is back, and the
//     later hops start then.
//   - Delivery.Exchange on the consumer side is the exchange the broker last published the
//     message to (the dispatch exchange or a ladder exchange, as dead-lettering does), not X;
//     the routing key is K, and the rabbitdelay-target header names X.
//   - A message due with no binding on X for its key goes to the parking queue, through the
//     alternate exchange that the topology's policy <prefix>.targets gives X (`rabbitdelay apply`
//     sets it with the management API). Without that policy, quorum queues keep it in the last
//     delay queue's dead-letter state (messages_dlx in the management API and in `declare
//     status`) and retry it, and classic queues drop it. A message whose X is no longer bound
//     to the dispatch exchange goes to the parking queue too (the dispatch exchange's own
//     alternate exchange).
//   - A publish to an exchange that does not exist makes the broker close the channel (404
//     NOT_FOUND), failing every other publish in flight on it. So a direct publish asks
//     first, once per exchange name (a passive declare on a channel of its own, one check at
//     a time, waiting through an outage), and a missing exchange gets ErrExchangeNotFound
//     with nothing sent. A name that is not UTF-8 or holds a control character is refused
//     with ErrInvalidInput (RabbitMQ would close the connection, or treat the name
//     differently in the check and the publish). What the check cannot see still closes the
//     channel: an exchange deleted after its check (404; that publish gets ErrConnectionLost
//     and the name is checked again next time), an internal exchange or one the user may not
//     write to (403 ACCESS_REFUSED), or a check the broker refuses for another reason (the
//     publish then goes unchecked). Every publish in flight on a channel that such a refusal
//     closed is sent again alone, on a channel that carries one publish at a time: the
//     refused publish gets its own error (ErrExchangeNotFound, ErrAccessRefused,
//     ErrInvalidInput) and the others their confirms. One the broker had stored before the
//     refusal (its confirm lost with the channel) is then stored twice, with the same
//     MessageId; the channel is reopened.
//   - msg.Expiration (a per-message TTL) is refused on delay paths: the message would expire
//     inside the delay queues, early.
//   - Bad input that would cost the whole connection is refused with ErrInvalidInput before
//     anything is sent, the error naming the field and the limit: a short string longer than
//     255 bytes (the exchange, the routing key, msg.ContentType, ContentEncoding,
//     CorrelationId, ReplyTo, Expiration, MessageId, Type, UserId, AppId, and every header
//     key, in nested tables and arrays too), which amqp091 cannot encode and answers by
//     closing the connection (501); and a NaN or infinite float32/float64 header value at any
//     depth, which amqp091.Table.Validate accepts but RabbitMQ answers by closing the
//     connection (541 INTERNAL_ERROR). Either would fail every publish in flight on the
//     connection and, retried, every new connection. Should amqp091 still refuse to encode a
//     message, Publish returns that error once, wrapped in ErrInvalidInput, and never retries
//     it (the connection it closed is re-established as after any loss).
//   - A publish already writing to a connection the broker has blocked (memory or disk alarm)
//     waits for the broker; other publishes still end with their contexts.
//   - The plugin path keeps one copy of the message on one node and carries at most 2^32-1 ms
//     (package plugin).
//
// # Sources
//
//   - Publisher confirms, and basic.return before basic.ack for unroutable mandatory
//     messages: https://www.rabbitmq.com/docs/confirms#when-publishes-are-confirmed
//   - Dead-lettering keeps the routing key and headers, adds x-death, removes the expiration
//     property, and drops cycles (RabbitMQ 3.x: x-death sent by a client counts):
//     https://www.rabbitmq.com/docs/dlx (the cycle drop reproduced on 3.10.8 by
//     TestPublisherRetryWithXDeath when x-death is kept)
//   - Alternate exchanges: https://www.rabbitmq.com/docs/ae
//   - Per-queue TTL and expiry from the head of a queue: https://www.rabbitmq.com/docs/ttl
//   - Quorum-queue at-least-once dead-lettering and a due message that routes nowhere held in
//     messages_dlx: observed on RabbitMQ 3.10.8 (TestPublisherUnroutable).
//   - A publish to a missing exchange closes the channel with 404 NOT_FOUND:
//     https://www.rabbitmq.com/docs/channels#error-handling
//   - Short strings (shortstr) are a length octet and at most 255 bytes: AMQP 0-9-1
//     specification, section 4.2.5.3; amqp091-go v1.16 (writeShortstr) refuses a longer one
//     and shuts the connection down.
//   - A NaN float header closes the connection with 541 INTERNAL_ERROR: observed on RabbitMQ
//     3.10.8 (TestBrokerClosesConnectionOnNaNHeader).
package amqpdelay
