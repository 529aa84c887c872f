// Package amqpdelay is the client of rabbitdelay: a Publisher that sends a message "to
// exchange X with routing key K, due in d" through the delay topology that `rabbitdelay apply`
// created, and returns only when the broker has confirmed it. When the message is due, X
// routes it with K; consumers stay plain AMQP consumers. [Due] tells when a delivery was due.
//
// # Paths
//
// One path per message ([Receipt.Path]), from the delay, the ladder, the buckets, the strategy
// and the last plugin probe (docs/how-it-works.md):
//
//	delay <= 0                  PathDirect  published to X now (any exchange, "" included)
//	delay equals a bucket       PathBucket  one hop (every strategy but PluginOnly)
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
// A Publisher owns one connection and Config.Channels channels in confirm mode, round robin;
// publishes are pipelined and returns matched by message ID. It sends a copy of the message:
// on a delay path without the headers that decide or record a delay, with the target, the due
// time (Unix ms) and the path's routing headers. Delivery mode is persistent unless the caller
// chose transient. Direct, bucket and ladder publishes are mandatory; plugin publishes are not
// (the plugin answers every one with NO_ROUTE). With several ladder shards the MessageId picks
// the shard (FNV-1a). After a connection loss it reconnects with exponential back-off;
// publishes wait for the new connection until their context ends.
//
// # Guarantees
//
//   - Publish returns nil only after a broker ack; a confirmed delayed message sits in durable
//     queues as a persistent message; no message is delivered before its due time.
//   - Revoke and Reschedule return nil only after the revocation's confirm (docs/revoke.md).
//   - Safe for concurrent use; Close is idempotent; no error or log line holds a password.
//
// # Limits
//
// A publish the broker refuses (404, 403) closes its channel, so the first publish to each
// exchange goes alone on a channel of its own; input that would close the connection is
// refused with ErrInvalidInput first (docs/guarantees.md, docs/publishing.md).
//
// # Sources
//
//   - Confirms, basic.return before basic.ack: https://www.rabbitmq.com/docs/confirms
//   - Dead-lettering: https://www.rabbitmq.com/docs/dlx; alternate exchanges:
//     https://www.rabbitmq.com/docs/ae; TTL: https://www.rabbitmq.com/docs/ttl
//   - 404 closes the channel: https://www.rabbitmq.com/docs/channels#error-handling
//   - Short strings are at most 255 bytes: AMQP 0-9-1 specification, 4.2.5.3.
package amqpdelay
