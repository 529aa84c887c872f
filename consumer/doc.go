// Package consumer consumes a ready queue of rabbitdelay with a handler per message, N at a
// time; delayed retries through rabbitdelay's own delay paths, back to this queue only; a
// parking queue after the last attempt; and an exactly-once effect per message id through a
// [Store] of handled ids (in memory, or Redis for several instances). It changes no topology.
//
//	c, err := consumer.New(cfg, "orders.timeouts", handle, consumer.Options{
//		Concurrency: 16,
//		Backoff:     consumer.Backoff{MaxAttempts: 5, Initial: time.Second},
//		Store:       consumer.NewRedisStore(redisClient, ""),
//	})
//	err = c.Run(ctx) // until ctx ends; then a graceful shutdown
//
// # How a delivery is handled
//
// The Consumer claims the delivery's id ([Options.IDFunc]) in the [Store] with an expiring
// lease, runs the handler with a context carrying [Info], then marks the id done and acks; or,
// after a failure, publishes a copy through the delay topology to <prefix>.retry (keyed by the
// queue's name) for the back-off, or, after the last attempt or a [Permanent] error, to
// <prefix>.parking ([Replay] moves it back), and acks once the copy is confirmed. Each outcome
// is an [Event]. No handler runs before the rabbitdelay-due time by this machine's clock
// ([EarlyHold]); revoked messages are acked unhandled ([Revoked], package revoke).
// docs/consuming.md has the guarantees and limits.
//
// # Metrics
//
// With [Options.Metrics], every series below exists from New, at 0, with the label queue:
// rabbitdelay_consumer_messages_total{outcome} (the [EventKind] that settled a delivery;
// "duplicate" for [Skipped]), _handler_failures_total, _handler_duration_seconds{result} (ok or
// error), _lateness_seconds{path} ([Info.Late] of handled deliveries with a due time, less
// those [Replay] moved), _reconnects_total and _derived_ids_total{reason} ([IDDerived]).
//
// # Giving a delivery back
//
// RabbitMQ 4.3+ counts basic.reject with requeue (and a channel closed with the delivery
// unacked) toward a quorum queue's delivery limit, not basic.nack. So the Consumer rejects
// when the message failed (its copy could not be published), so the limit parks it in the end,
// and nacks when it cannot work on it now (shutdown, a deferred copy not published).
//
// # Sources
//
//   - Prefetch and manual acknowledgements: https://www.rabbitmq.com/docs/confirms
//   - Quorum queues' delivery limit, 20 by default from RabbitMQ 4.0:
//     https://www.rabbitmq.com/docs/quorum-queues#poison-message-handling
//   - basic.reject counts toward it and basic.nack does not, from RabbitMQ 4.3:
//     https://github.com/rabbitmq/rabbitmq-server/pull/15387
//   - Redis SET NX PX, and the lock released by a script:
//     https://redis.io/docs/latest/develop/use/patterns/distributed-locks/
package consumer
