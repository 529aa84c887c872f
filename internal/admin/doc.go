// Package topology turns a delay specification ([Spec]) into the exact set of RabbitMQ
// exchanges, queues and bindings that carry delayed messages ([NewPlan]), declares it
// idempotently ([Apply]), inspects it ([Status]), exports it as RabbitMQ definitions
// ([Export]) and deletes it ([Teardown]). The rabbitdelay CLI (cmd/declare) is a thin layer on top;
// the amqpdelay client reads the same [Config] from the same AMQPDELAY_* variables.
//
// # What gets declared
//
// Every name derives from the prefix by one rule ([Names]), so two prefixes live side by side
// in one vhost. For prefix p:
//
//   - p.unroutable, a fanout exchange, bound to the queue p.parking: due messages that no target
//     takes end there instead of being dropped.
//   - p.due-unroutable, a headers exchange bound to p.parking once per target X with
//     {x-match: all, rabbitdelay-target: X}: the alternate exchange the policy p.targets gives
//     every target (see Policies).
//   - p.dispatch (D), a headers exchange with alternate-exchange p.unroutable, bound to each
//     target exchange X (exchange-to-exchange) with {x-match: all, rabbitdelay-target: X}.
//   - Targets given as name:type are declared (durable); the others must already exist.
//   - Per target X, the empty fanout exchange p.target.X ([Names.TargetMarker]), declared last:
//     publishers check it (a passive declare) to know X is bound to D.
//   - Per ladder level L, the headers exchange p.ladder.LL and, per digit v in 1..radix-1, the
//     queue p.ladder.LL.VV with x-message-ttl v·radix^L·unit ms, bound with
//     {x-match: all, rabbitdelay-digit-L: v}, dead-lettering to the exchange of the level that
//     [ttlbuckets.Ladder.Next] names (D after the last level); a pass-through binding for
//     digit 0 goes to the same exchange. Each level that does not dead-letter into D also has,
//     per digit v, a last-hop queue p.ladder.LL.VV.last ([Names.LadderLastHopQueueShard]) with
//     the same TTL, dead-lettering into D, and the headers exchange p.ladder.LL.last
//     ([Names.LadderLastHopExchangeShard]), bound to p.ladder.LL with {x-match: all,
//     rabbitdelay-last-level: L} and to each last-hop queue with {x-match: all,
//     rabbitdelay-digit-L: v + radix} ([ttlbuckets.Ladder.LastHopValue]). A message takes its
//     last hop there ([ttlbuckets.Ladder.EncodeRoute]) and goes from it straight to D, as
//     from a bucket, instead of through every remaining level's exchange. The last-hop
//     bindings sit on an exchange of their own because a headers exchange tests every one of
//     its bindings against every message (rabbit_exchange_type_headers): p.ladder.LL keeps
//     radix + 1 bindings, not 2 x radix - 1. The marker [Names.LastHopMarker],
//     declared last, tells publishers the last-hop queues exist. Every ladder queue and last-hop
//     queue also has an entry exchange, the fanout exchange <queue>.entry
//     ([Names.LadderEntryExchange]) bound to it alone: a Publisher sends a message's first hop
//     there, unread headers and all, when the marker [Names.EntryMarker] exists. The TTLs and header names come
//     from package ttlbuckets ([ttlbuckets.DelayQueues], [ttlbuckets.DigitHeader]); nothing is
//     computed twice.
//   - With buckets, the headers exchange p.buckets and per bucket the queue p.bucket.<ms>ms,
//     bound with {x-match: all, rabbitdelay-bucket: ms}, dead-lettering straight to D.
//   - Unless the plugin mode is off, p.plugin of type x-delayed-message (x-delayed-type
//     headers), bound to D matching everything. With mode auto it is declared only when the
//     broker has the plugin ([ProbePlugin], [Plan.ForPlugin]).
//   - Ready queues (queue=exchange:key) declared and bound, so plain consumers have somewhere
//     to read. Quorum ready queues get x-delivery-limit ([Spec.ReadyDeliveryLimit], default
//     20) and x-dead-letter-exchange p.unroutable: a message returned more often than the
//     limit is parked (x-death reason delivery_limit), on 3.x (no limit of its own) as on 4.x
//     (whose default limit of 20 drops it where no dead-letter exchange is set). A consumer's
//     reject without requeue parks the message too (reason rejected).
//
// Everything is durable. Delay queues never get x-expires (an unused queue would be deleted
// with its messages) nor a dead-letter routing key (the message keeps its own), and must never
// have consumers ([Status] flags them). Every queue names its type (x-queue-type), classic
// ones too: RabbitMQ 4.x gives a queue without it its vhost's default queue type. Quorum
// queues (the default) get x-dead-letter-strategy at-least-once and x-overflow
// reject-publish; classic delay queues only the TTL and the dead-letter exchange besides.
// Integer arguments are int64 (amqp091 sends a Go int as a 32-bit value).
//
// # Shards of the ladder
//
// [Spec.Shards] > 1 declares that many shards of the ladder: shard 0 is the ladder itself, and
// shard k a chain of its own ([Names.LadderExchangeShard], [Names.LadderQueueShard]) with the same
// TTLs and arguments, every level dead-lettering into the same copy's next level and the last
// into the dispatch exchange, plus the marker [Names.ShardsMarker]. A message published into a
// copy stays in it, so a burst due at one time leaves from Shards queues. On a cluster, Apply
// places them ([ApplyOptions.Nodes], [Queue.Slot]) so that the copies of each queue lead from
// different nodes; the delay-queue policy then has no queue-leader-locator, since a policy's
// locator wins over the declaring connection's node (rabbit_queue_location:leader_locator/1,
// 3.10.8 and 4.0.5). [ClusterStatus.SharedCopies] reports copies that share a leader node.
//
// # Policies
//
// AMQP cannot set policies; with the management API ([Management]) Apply sets three
// ([Plan.Policies]), at [Spec.PolicyPriority] (default [DefaultPolicyPriority], 1,000,000):
//
//   - p.delay-queues, apply-to queues, matching exactly the delay queues and p.parking, with
//     a definition that only repeats what the queues' arguments already mean (overflow
//     reject-publish; quorum: dead-letter-strategy at-least-once). RabbitMQ applies only the
//     highest-priority policy that matches a queue, so a lower-priority policy (a catch-all
//     {message-ttl: 1000} or {expires: 3000}, which would make delays early or delete the
//     queues with their messages) no longer touches them.
//   - p.targets, apply-to exchanges, matching exactly the target exchanges (amq.* ones
//     included: policies match them), with alternate-exchange p.due-unroutable. When D routes
//     a due message to X through the exchange-to-exchange binding and X routes it to no queue,
//     RabbitMQ uses X's own alternate exchange (rabbit_exchange:route1 calls process_alternate
//     per exchange on the path), so the message is parked instead of being held forever in
//     its quorum delay queue's dead-letter state, where enough such messages (more than the
//     dead-letter worker's prefetch, dead_letter_worker_consumer_prefetch, 32 by default)
//     stall every message behind them. p.due-unroutable matches the rabbitdelay-target header,
//     so another application's publish to X that no queue takes keeps its old fate
//     (returned to a mandatory publisher, dropped otherwise). A target's own
//     alternate-exchange argument wins over any policy (rabbit_policy:get_arg); it is
//     reported as a warning.
//   - p.revoked-retention, apply-to queues, matching exactly the revocation stream p.revoked,
//     with max-age equal to the stream's x-max-age ([Spec.RevocationRetention]). For a stream
//     RabbitMQ takes a policy's max-age and max-length-bytes instead of the arguments
//     (rabbit_stream_queue:policy_precedence/2, 3.10.8 and 4.0.5), so a lower-priority
//     {max-age: 1D} or {max-length-bytes: ...} would delete revocations before their messages
//     are due; this policy shadows them. It holds no key streams do not support (a policy
//     with one, such as message-ttl or overflow, never applies to a stream:
//     rabbit_stream_queue:capabilities/0), so it applies.
//
// What a policy cannot prevent is reported by [Management.PolicyProblems] (Apply and Status
// fail with ErrPolicy): operator policies, which RabbitMQ merges with the applying policy (the
// stricter value wins) and which no priority shadows (3.10 accepts message-ttl, expires,
// max-length, max-length-bytes, delivery-limit in them; 4.0 also overflow), and user
// policies at or above the topology's priority. Per key, RabbitMQ takes the lower of policy
// and argument for message-ttl, max-length, max-length-bytes and delivery-limit (and expires,
// except on 3.10 quorum queues, where the policy wins), the policy for a quorum queue's
// overflow, and the argument for dead-letter-exchange, -routing-key and -strategy
// (rabbit_amqqueue_process:process_args_policy, rabbit_quorum_queue:ra_machine_config). Which
// policy applies is the broker's answer: the management API's queue and exchange records
// (read with disable_stats, current once a declare or a policy change returns).
//
// Ready queues get no policy of the topology: they are the application's, and a policy of
// the topology would shadow its own (a length limit, a TTL, a leader locator). PolicyProblems
// reports what a policy or operator policy there does to due messages (expires deletes the
// queue; a TTL, a dropping length limit or a delivery limit takes them out, parked or lost
// depending on the queue's dead-letter exchange; a refusing length limit stalls the delay
// queues' dead-lettering). Nor are the topology's exchanges shadowed: alternate-exchange is
// core RabbitMQ's only exchange policy key, so there is no harmless value to shadow with; an
// alternate exchange set on one by a policy is reported.
//
// Without the management API Apply reports the policies as skipped and the rabbitdelay CLI
// prints the rabbitmqctl set_policy commands. A policy of the topology also shadows the
// vhost's other policies on those queues and targets (a federation policy on a target, say):
// give those a higher priority, or fold their keys into a policy of their own.
//
// # Declaring safely
//
// [Apply] first checks the exchanges the plan binds to but does not declare ([Preflight]),
// then finds what exists with passive declarations, then declares every existing object again
// with the plan's arguments: identical arguments change nothing, different ones make the
// broker answer 406 PRECONDITION_FAILED, which Apply turns into a [ConflictError] naming the
// object, the argument, the existing and the wanted value. Only when nothing conflicts does it
// create the missing objects: exchanges, then queues (whose dead-letter exchanges now exist),
// then bindings by ascending [Binding.Tier], from D outwards, so at every moment an existing
// binding leads to a complete path: a failure part-way never leaves a queue whose expired
// messages would be dropped. Apply never deletes an exchange, queue or binding.
//
// AMQP cannot list bindings, so without the management API Apply reports bindings as "bound"
// (declaring a binding twice is harmless); with a [Management] client it reports them as
// created or unchanged, and [Status] checks them and shows messages_dlx.
//
// # Performance
//
// A quorum queue declaration costs about 10 ms of broker work on RabbitMQ 3.10.8 (2 cores),
// so Apply spreads the work over [DefaultWorkers] channels: the default topology with one
// existing target (226 quorum queues with the last-hop queues, 15 ladder exchanges, no
// plugin) applied to an empty vhost in 1.07-1.58 s with 4, 8 or 16 channels on a quiet local
// broker, both versions, two runs each (BenchmarkApplyDefault, 2026-12-01). [NewPlan] takes about 0.2 ms.
//
// # Limits
//
//   - Teardown finds objects by the plan's names: change the prefix, ladder or buckets and the
//     old objects are not found. Tear down with the specification they were declared with.
//   - A passive declaration compares none of an object's type, flags and arguments: without
//     the management API, [Status] cannot tell an object declared again with other ones (an
//     entry exchange declared again as direct, a delay queue with another x-message-ttl)
//     from the plan's.
//   - Without the management API, [Status] and [Teardown] count ready messages only (a passive
//     declaration's count); messages held in a quorum queue's dead-letter state or
//     unacknowledged are invisible to AMQP. Teardown then relies on queue.delete's if-empty
//     flag, which the broker checks.
//   - The broker names only the first differing argument of an object, and cuts its message at
//     255 bytes; with long names the existing value is then read from the management API when
//     one is configured.
//   - amqp091's declare methods take no context: when a context ends, Apply, Status and
//     Teardown return at once and the declarations in flight finish in the background.
//
// # Sources
//
//   - Queue arguments, 406 PRECONDITION_FAILED on redeclaration with other arguments, and
//     passive declarations (404 NOT_FOUND closes the channel):
//     https://www.rabbitmq.com/docs/queues#optional-arguments
//   - Per-queue TTL and its 315,360,000,000 ms ceiling (value_too_large, seen on 3.10.8):
//     https://www.rabbitmq.com/docs/ttl
//   - Dead-lettering, quorum at-least-once dead-lettering and its x-overflow reject-publish
//     requirement: https://www.rabbitmq.com/docs/dlx,
//     https://www.rabbitmq.com/docs/quorum-queues#dead-lettering
//   - Alternate exchanges: https://www.rabbitmq.com/docs/ae; an alternate exchange applies per
//     exchange on a path of exchange-to-exchange bindings, the argument before the policy
//     (rabbit_exchange:route1, process_alternate; rabbit_policy:get_arg; seen on 3.10.8 and 4.0.5).
//   - Policies, operator policies and priorities: https://www.rabbitmq.com/docs/policies; which
//     keys an operator policy may hold and how values merge: rabbit_policies
//     (merge_policy_value); a policy with a key the queue type does not support does not
//     apply to that queue at all (rabbit_queue_type:is_policy_applicable).
//   - Quorum queue delivery limit (default 20 since 4.0, none before):
//     https://www.rabbitmq.com/docs/quorum-queues#poison-message-handling
//   - Exchange-to-exchange bindings: https://www.rabbitmq.com/docs/e2e
//   - Headers exchanges ignore x- binding arguments: https://www.rabbitmq.com/docs/exchanges#headers
//   - Definitions export and import: https://www.rabbitmq.com/docs/definitions
//   - messages_dlx in the management API's queue view (seen on 3.10.8): a quorum queue's
//     messages whose at-least-once dead-lettering has not completed.
//   - Without the delayed-message plugin, declaring an x-delayed-message exchange fails with
//     503 COMMAND_INVALID, which on 3.x closes the whole connection (seen on 3.10.8).
package admin
