// Package consumer consumes a ready queue of rabbitdelay for those who want more than a plain
// AMQP consumer: a handler per message, N at a time; delayed retries through rabbitdelay's own
// delay paths, back to this queue only; a parking queue after the last attempt; and an
// exactly-once effect per message id through a store of handled ids (in memory, or Redis for
// several instances). Plain consumers keep working: nothing here changes the topology's
// routing of delayed messages.
//
//	c, err := consumer.New(cfg, "orders.timeouts", handle,
//		consumer.WithConcurrency(16),
//		consumer.WithBackoff(consumer.Backoff{MaxAttempts: 5, Initial: time.Second}),
//		consumer.WithStore(consumer.NewRedisStore(redisClient, "")))
//	err = c.Run(ctx) // until ctx ends; then a graceful shutdown
//
// # Design
//
// A Consumer owns two connections: one consuming the queue (dialled with amqpdelay.Dial, so with
// the Publisher's address list, TLS files and heartbeat), with a prefetch equal to its
// concurrency, and one of an amqpdelay.Publisher for retries and parking, whose publishes return
// only after the broker's confirm. Each delivery goes through:
//
//  1. Claim its id (MessageId by default, see [WithIDFunc]; derived from the content when there
//     is none, see [IDDerived]) in the [Store], for the queue: an expiring lease
//     (Redis: SET NX PX). Already handled: ack, the handler does not run ([Skipped]). Another
//     holder's lease (a copy being handled now, or by an instance that died less than a lease
//     ago): the message is sent back through the delay topology to wait the busy delay, then
//     acked ([Deferred]); no attempt is counted.
//  2. Run the handler with a context that carries [Info] (attempt, due time, lateness) and ends
//     with the handler timeout or the shutdown's grace period. The lease is renewed every third
//     of its length while it runs.
//  3. nil: mark the id done in the store (a longer TTL), then ack ([Handled]).
//  4. An error, attempts left: release the lease, publish a copy to the retry exchange
//     (<prefix>.retry) with the queue's name as routing key and the back-off as delay, through
//     the Publisher's delay paths (bucket or ladder); once the broker confirms it, ack the
//     delivery ([Retried]). The copy carries the next attempt number in [HeaderAttempt], the
//     failure record (HeaderFirstFailure, HeaderLastFailure, HeaderError) and the original
//     routing key and target, which the Consumer gives back to the handler.
//  5. The last attempt failed, or the handler returned a [Permanent] error: publish the message,
//     with its headers and the reason ([HeaderParkReason], [HeaderError], the attempts, the
//     first and last failure times, [HeaderQueue]) to the parking queue (<prefix>.parking,
//     through the default exchange), and ack once confirmed ([Parked]). [Replay] sends parked
//     messages back to their queue.
//
// A retry or parking publish that fails gives the delivery back (basic.reject with requeue: see
// "Giving a delivery back"); an ack that
// fails (the channel closed) leaves the message to be delivered again, and the store decides. A
// copy the Publisher refuses as invalid (amqpdelay.ErrInvalidInput: a delivery with so many
// headers that the copy, with the Consumer's own, exceeds what it sends) can never be published:
// a refused retry parks the message instead ([ParkRetryRefused]), and a refused parking copy
// rejects the delivery without requeue ([Rejected]: its queue's dead-letter exchange takes it, a
// quorum ready queue's being the parking queue, or RabbitMQ drops it).
//
// A handler's panic is a failure like an error: the Consumer recovers it into a [*PanicError]
// (the value and the stack trace, runtime/debug.Stack), which is the outcome Event's Err, is
// logged at error level with the stack ([WithLogger]), and whose summary (the value and the
// first frames, function and file:line, at most MaxPanicLen bytes) the retry or parked copy
// carries in [HeaderPanic]. A handler's error whose Error method panics (a nil pointer of an
// error type returned as the error) counts as a failure, with a text that says so.
//
// The retry routing is part of the topology `declare apply` declares (package topology, retry
// routing): the dispatch exchange hands a due retry to <prefix>.retry (it is its target), a
// direct exchange bound to each ready queue with the queue's own name as key, so a retry reaches
// that queue and no other queue bound to the same target exchange. Run binds its queue there
// itself (the same binding; [WithoutRetryBinding] to skip it), so any queue works, not only the
// specification's ready queues. A retry whose queue has no such binding goes to the retry
// exchange's alternate exchange and waits in the parking queue.
//
// [WithObserver] reports every outcome as an [Event]; [WithMetrics] counts them in Prometheus
// metrics, with each handled delivery's lateness (handling start minus its due time) by delay
// path.
//
// # Guarantees
//
//   - Revoked messages (amqpdelay's Publisher.Revoke and Reschedule) are acked without calling
//     the handler (Event Revoked): never when the revocation was confirmed at least 100 ms before
//     the message's due time, best effort later (package revoke). [WithoutRevocations] turns it
//     off. Run reads the revocation stream from its start before it consumes. A delivery whose
//     standing the stream cannot tell within the settle timeout (the stream deleted, its
//     connection lost) is deferred like a busy one ([Deferred], Event.Err naming the stream and
//     why), never handled and never given back for it, so trouble with the stream does not use
//     up a quorum queue's delivery limit.
//   - A delivery is acked only after its outcome is safe: the handler returned nil (and the id
//     was marked done), or the retry copy or parked copy was confirmed by the broker. Nothing is
//     lost by a crash of the Consumer at any point: an unacked delivery is delivered again.
//   - Retries never requeue: they ack and re-publish, so a handler that fails forever never trips
//     a quorum queue's delivery limit (20 by default on RabbitMQ 4.x, which drops or dead-letters
//     the message at the 21st return) and never counts in x-delivery-count. The message is
//     parked after MaxAttempts instead.
//   - No delivery with a rabbitdelay-due header is handed to the handler before that time by
//     this machine's clock: one that arrives up to [EarlyHold] early is held until then, one
//     that arrives earlier goes back through the delay topology for the time left (Deferred,
//     [ErrEarly]), whoever set the header.
//   - A retry is never early: it waits at least the back-off (the Publisher rounds delays up);
//     [Info.Due] of a retry is its own due time.
//   - Exactly-once effect, while the id is remembered (keep, 24 h by default) and the store
//     answers: the handler runs to success at most once per queue and id, whatever the copies
//     (a message published twice with one MessageId, a redelivery after a connection loss, a
//     retry copy and a redelivered original). Two copies handled at the same time by two
//     instances sharing a [RedisStore] do not both run: the second sees the lease and is deferred.
//   - An instance that dies in the middle of a handler (a crash, a kill, the machine lost): the
//     broker gives its unacked deliveries to another Consumer once it sees the connection gone
//     (at once when the process ends, as its operating system closes the socket; after about
//     two missed heartbeats, 10 s each, when the machine or the network goes). The dead
//     instance's lease is no longer renewed and expires at most one lease (1 min by default)
//     after its last renewal; until then each copy is deferred (it waits the busy delay in the
//     delay topology, no attempt counted), and the first copy after that runs the handler.
//     So, with a [RedisStore] (TestConsumerProcessesDuplicates kills consumer processes with
//     SIGKILL): a handler killed before its effect has the effect once; one killed after its
//     effect but before the Consumer wrote the done mark (its effect and the mark are not one
//     step) has the effect TWICE; one killed after the done mark has it once (the copy is
//     skipped). Make the effect itself idempotent, or transactional with the mark, where that
//     matters. A [MemoryStore] dies with its process: another process runs the redelivered
//     message at once, with the same outcome (an effect already made happens twice).
//   - A handler that outlives its lease (the store unreachable for a whole lease, or the process
//     paused that long): another instance may claim the id and run a copy. When the Consumer
//     finds its lease taken it cancels the handler's context, but an effect made before then
//     stays. A handler that succeeded but whose done mark could not be written (the store
//     unreachable) is acked; a copy arriving later runs again ([Event].Err says so).
//   - Graceful shutdown (Run's context ends): no new message is taken; running handlers get the
//     shutdown timeout to finish and settle as usual; the others' contexts are cancelled and
//     their messages, and those prefetched but not yet handed to a handler, given back with a
//     nack with requeue, which RabbitMQ 4.3 does not count toward the delivery limit. A
//     handler that returns after its
//     message was given back still records its outcome in the store (done, or lease released),
//     so the redelivered copy is skipped if it succeeded.
//   - The library never logs through a global logger ([WithLogger], default none), and every
//     blocking call is bounded by a context (Run's, the handler's, or the settle timeout, [WithSettleTimeout]).
//
// # Limits
//
//   - A MemoryStore deduplicates within one process and remembers a bounded window of ids
//     (100,000 by default): use a RedisStore for several instances.
//   - A delivery without an id (no MessageId: a plain client's publish) gets one derived from its
//     content (Event kind IDDerived, metric derived_ids_total): its redeliveries and the
//     Consumer's copies of it keep that id, so it is handled once like any other; but two
//     messages alike in routing key, properties, application headers and body count as one.
//     The amqpdelay Publisher always sets a MessageId; other publishers should. An id longer
//     than MaxIDLen (from an id function) is replaced by its hash.
//   - A message held by an instance that died, or whose ack was lost (its channel or connection
//     closed with it unacked), counts toward the quorum queue's delivery limit on every
//     RabbitMQ version; one given back at shutdown counts before RabbitMQ 4.3 only (see
//     "Giving a delivery back"). A delivery whose retry, deferred or parking publish fails (the delay topology missing,
//     the broker refusing or nacking it, a lost connection) is held, unacked, while the
//     Consumer publishes again with back-off (100 ms doubling to 5 s) for up to the settle
//     timeout ([WithSettleTimeout], 30 s by default); only then is it given back, so a lasting
//     failure costs one return per handling and the settle timeout, not a return per round
//     trip. A publish that cannot pass (ErrInvalidInput, ErrUnknownTarget) gives it back at
//     once. A failed retry or parking publish gives it back with basic.reject, which every
//     version counts: past the delivery limit (20),
//     the ready queues `declare apply` declares (x-delivery-limit and a dead-letter exchange)
//     park it without the Consumer's failure record; on a quorum queue of RabbitMQ 4.x
//     declared without either, the broker drops it.
//   - Copies lose Expiration (a per-message TTL would expire them inside the delay topology) and
//     UserId (RabbitMQ refuses a user id other than the publishing connection's).
//   - The retry and parking copies go through the amqpdelay Publisher, which replaces the
//     routing headers (ttlbuckets.IsDelayHeader) and keeps the Consumer's own rabbitdelay-*
//     headers; it strips x-death, so a retry's x-death headers only record its own delay hops.
//   - On a connection loss, the session's running handlers finish before the Consumer
//     reconnects; their acks fail and the store skips the redelivered copies.
//
// # Giving a delivery back
//
// RabbitMQ 4.3 counts only failed deliveries toward a quorum queue's delivery limit
// (rabbitmq-server PR #15387): basic.reject with requeue raises the x-delivery-count header
// the limit reads, and so does a channel or connection closed with the delivery unacked;
// basic.nack with requeue is a plain return that raises only x-acquired-count (a count of
// every return, which 4.3 adds). Before 4.3 every return counts. So the Consumer gives a
// delivery back in one of two ways, by whose fault the return is:
//
//   - The message failed: its handler failed and its retry or parking copy could not be
//     published until the settle timeout, or no deferred copy of it can ever be published
//     (amqpdelay.ErrInvalidInput): basic.reject with requeue. Every version counts it, so a
//     ready queue of `declare apply` (x-delivery-limit and a dead-letter exchange) parks a
//     message that keeps failing in the end, on 4.3 as before: never dropped, never looping.
//   - The Consumer cannot work on it now: shutdown (a running handler's delivery, one held
//     before its due time, one prefetched but not yet handed to a handler), a deferred copy
//     (busy id, store or revocation stream not answering, early delivery) that could not be
//     published, the revocation reader closed: basic.nack with requeue. From 4.3 it does not
//     count, so restarts and outages do not push healthy messages toward the limit.
//
// A delivery no copy of which can be parked is rejected without requeue (basic.reject), and
// its queue dead-letters it. [Replay] gives a parked message it could not move back with a
// nack with requeue.
//
// # Sources
//
//   - Prefetch (basic.qos) and manual acknowledgements: https://www.rabbitmq.com/docs/confirms
//   - Quorum queues' delivery limit and its default of 20 since RabbitMQ 4.0:
//     https://www.rabbitmq.com/docs/quorum-queues#poison-message-handling
//   - basic.reject counts toward it and basic.nack does not, from RabbitMQ 4.3:
//     https://github.com/rabbitmq/rabbitmq-server/pull/15387
//   - Redis SET with NX and PX, and the single-instance lock with a random value released by a
//     script: https://redis.io/docs/latest/commands/set/ and
//     https://redis.io/docs/latest/develop/use/patterns/distributed-locks/
package consumer
