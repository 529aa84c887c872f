// Package consumer consumes a ready queue of rabbitdelay for those who want more than a plain
// AMQP consumer: a handler per message, N at a time; delayed retries through rabbitdelay's own
// delay paths, back to this queue only; a parking queue after the last attempt; and an
// exactly-once effect per message id through a store of handled ids (in memory, or Redis for
// several instances). Plain consumers keep working: nothing here changes the topology.
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
// A Consumer consumes with a prefetch equal to its concurrency, and publishes its copies
// through an amqpdelay.Publisher, whose publishes return only after the broker's confirm.
//
//  1. Claim the message's id ([Options.IDFunc]; MessageId by default) in the [Store] with an
//     expiring lease. Already handled: ack ([Skipped]). Leased by another holder: send it back
//     through the delay topology for the busy delay, then ack ([Deferred]; no attempt counted).
//  2. Run the handler with a context that carries [Info] and ends with the handler timeout or
//     the shutdown. The lease is renewed while it runs. A panic is a failure ([PanicError]).
//  3. nil: mark the id done in the store, then ack ([Handled]).
//  4. An error with attempts left: publish a copy to the retry exchange (<prefix>.retry) with the
//     queue's name as routing key and the back-off as delay, then ack ([Retried]). The copy
//     carries the attempt number ([HeaderAttempt]) and the failure record.
//  5. The last attempt failed, or the error is [Permanent]: publish the message with the reason
//     ([HeaderParkReason]) to the parking queue (<prefix>.parking), then ack ([Parked]).
//     [Replay] sends parked messages back to their queue.
//
// The retry exchange is bound to each ready queue by its own name, so a retry reaches its queue
// and no other; Run makes that binding itself unless [Options.NoRetryBinding].
// [Options.Observer] receives every outcome as an [Event]; [Options.Metrics] counts them.
//
// # Guarantees
//
//   - A delivery is acked only after its outcome is safe: the handler returned nil and the id
//     was marked done, or the broker confirmed the retry or parked copy. A crash loses nothing.
//   - Retries ack and re-publish, never requeue, so a handler that keeps failing never trips a
//     quorum queue's delivery limit: the message is parked after MaxAttempts.
//   - No delivery with a rabbitdelay-due header reaches the handler before that time by this
//     machine's clock: up to [EarlyHold] early it is held, earlier it is deferred ([ErrEarly]).
//     A retry waits at least its back-off.
//   - Revoked messages (Publisher.Revoke and Reschedule) are acked without running the handler
//     ([Revoked]): always when the revocation was confirmed at least 100 ms before the due
//     time, best effort later (package revoke). A delivery the revocation stream cannot answer
//     for within the settle timeout is deferred, never handled. [Options.NoRevocations] turns this
//     off.
//   - Exactly-once effect while the id is remembered and the store answers: the handler runs
//     to success at most once per queue and id, whatever the copies. Two instances sharing a
//     [RedisStore] never run one id at the same time.
//   - An instance killed after its handler's effect but before the done mark was written leaves
//     a copy that runs again once its lease expires: make the effect idempotent, or
//     transactional with the mark, where that matters. A [MemoryStore] dies with its process.
//   - A handler that outlives its lease (the store unreachable, the process paused) may run
//     beside another instance's copy; the Consumer cancels its context when it sees this.
//   - Graceful shutdown: no new message is taken; running handlers get the shutdown timeout;
//     the rest are given back.
//   - No global logger ([Options.Logger]); every blocking call is bounded by a context.
//
// # Limits
//
//   - A delivery without MessageId gets an id derived from its content ([IDDerived]): two
//     messages alike in routing key, properties, headers and body count as one. An id longer
//     than [MaxIDLen] bytes is replaced by its hash.
//   - Copies lose Expiration (it would expire them inside the delay topology) and UserId
//     (RabbitMQ refuses a user id other than the publishing connection's); the Publisher
//     strips the routing headers (rabbitdelay-target, -due, -bucket, -last-level, -digit-N),
//     x-delay and x-death.
//   - A copy the Publisher refuses as invalid (amqpdelay.ErrInvalidInput) cannot be published:
//     a refused retry parks the message ([ParkRetryRefused]), a refused parking copy rejects
//     the delivery without requeue ([Rejected]), for its queue's dead-letter exchange.
//   - A copy whose publish keeps failing is retried, the delivery held, for up to the settle
//     timeout ([Options.SettleTimeout]); then the delivery is given back.
//
// # Metrics
//
// With [Options.Metrics], a Consumer records these Prometheus series, each with the label
// queue, the queue consumed, and each existing from New, at 0:
//
//   - rabbitdelay_consumer_messages_total{outcome}: deliveries by outcome: handled, retried,
//     parked, duplicate ([Skipped]), deferred, requeued, unsettled, revoked, rejected.
//   - rabbitdelay_consumer_handler_failures_total: handler runs that failed or panicked.
//   - rabbitdelay_consumer_handler_duration_seconds{result}: histogram, result ok or error.
//   - rabbitdelay_consumer_lateness_seconds{path}: histogram of [Info.Late] of handled
//     deliveries with a due time, by amqpdelay.DeliveryPath, less those [Replay] moved.
//   - rabbitdelay_consumer_reconnects_total: reconnections after a connection loss.
//   - rabbitdelay_consumer_derived_ids_total{reason}: ids the Consumer derived ([IDDerived]),
//     reason missing or too-long.
//
// # Giving a delivery back
//
// RabbitMQ 4.3 and later count only failed deliveries toward a quorum queue's delivery limit:
// basic.reject with requeue counts, and so does a channel closed with the delivery unacked;
// basic.nack with requeue does not. Earlier versions count every return. So the Consumer
// gives a delivery back with basic.reject when the message failed (its copy could not be
// published), so a ready queue of `rabbitdelay apply` (x-delivery-limit and a dead-letter
// exchange) parks it in the end; and with basic.nack when the Consumer cannot work on it now
// (shutdown, a deferred copy that could not be published), so restarts and outages do not
// push healthy messages toward the limit.
//
// # Sources
//
//   - Prefetch (basic.qos) and manual acknowledgements: https://www.rabbitmq.com/docs/confirms
//   - Quorum queues' delivery limit, 20 by default from RabbitMQ 4.0:
//     https://www.rabbitmq.com/docs/quorum-queues#poison-message-handling
//   - basic.reject counts toward it and basic.nack does not, from RabbitMQ 4.3:
//     https://github.com/rabbitmq/rabbitmq-server/pull/15387
//   - Redis SET with NX and PX, and the lock released by a script:
//     https://redis.io/docs/latest/commands/set/ and
//     https://redis.io/docs/latest/develop/use/patterns/distributed-locks/
package consumer
