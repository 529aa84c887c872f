// Package admin turns a delay specification ([Spec]) into the exact set of RabbitMQ
// exchanges, queues and bindings that carry delayed messages ([NewPlan]), declares it
// idempotently ([Apply]), inspects it ([Status]), exports it as RabbitMQ definitions
// ([Export]) and deletes it ([Teardown]). The rabbitdelay CLI (cmd/declare) is a thin layer
// on top; the clients read the same specification through package delayspec.
//
// # What gets declared
//
// Every name derives from the prefix by one rule ([Names]). For prefix p:
//
//   - p.dispatch (D), a headers exchange bound to each target exchange X with {x-match: all,
//     rabbitdelay-target: X}; its alternate exchange p.unroutable is bound to the queue
//     p.parking, so due messages no target takes are parked, not dropped. Targets given as
//     name:type are declared; the others must already exist.
//   - The ladder: per level L the headers exchange p.ladder.LL and, per digit v, the queue
//     p.ladder.LL.VV with x-message-ttl v·radix^L·unit ms, dead-lettering to the next level's
//     exchange ([route.Next]; D after the last). A level that does not dead-letter into D
//     also has last-hop queues, dead-lettering straight into D, on an exchange of their own (a
//     headers exchange tests every binding against every message: rabbit_exchange_type_headers).
//     In the top-split (default) and top-first orders, every level above 0 also has first-hop
//     queues p.ladder.LL.VV.first, dead-lettering into level 0's exchange. Every ladder queue
//     has an entry exchange <queue>.entry for a message's first hop. TTLs and header names
//     come from packages ttlbuckets and internal/route.
//   - With buckets, the headers exchange p.buckets and per bucket the queue p.bucket.<ms>ms,
//     dead-lettering straight to D.
//   - Unless the plugin mode is off, p.plugin of type x-delayed-message, bound to D; with mode
//     auto only when the broker has the plugin ([ProbePlugin]).
//   - Ready queues (queue=exchange:key). Quorum ready queues get x-delivery-limit
//     ([Spec.ReadyDeliveryLimit]) and dead-letter to p.unroutable, so a message returned too
//     often or rejected is parked, not dropped.
//
// Everything is durable. Delay queues never get x-expires nor a dead-letter routing key, and
// must never have consumers. Every queue names its x-queue-type (RabbitMQ 4.x gives a queue
// without it the vhost's default type). Quorum queues get x-dead-letter-strategy at-least-once
// and x-overflow reject-publish. Integer arguments are int64 (amqp091 sends an int as 32 bits).
//
// [Spec.Shards] > 1 declares that many shards of the ladder, each a chain of its own; a
// message stays in its shard. On a cluster Apply places the shards of each queue on different
// leader nodes ([ApplyOptions]); [ClusterStatus] reports shards that share one.
//
// # Policies
//
// With the management API ([Management]) Apply sets three policies ([Plan.Policies]) at
// [Spec.PolicyPriority] (RabbitMQ applies only the highest-priority match): p.delay-queues
// (delay queues and p.parking), p.targets (alternate-exchange p.due-unroutable on the targets;
// a target's own argument wins: rabbit_policy:get_arg) and p.revoked-retention (max-age on
// p.revoked; for a stream the policy wins: rabbit_stream_queue:policy_precedence/2). What they
// cannot shadow (operator policies, merged: rabbit_policies:merge_policy_value; policies at or
// above that priority; policies on ready queues) [Management.PolicyProblems] reports, and Apply
// and Status fail with ErrPolicy. docs/guarantees.md#policies says what each key breaks.
//
// # Declaring safely
//
// [Apply] checks the exchanges the plan binds to ([Preflight]), finds what exists with passive
// declarations, and declares every existing object again with the plan's arguments: different
// ones answer 406 PRECONDITION_FAILED, which becomes a [ConflictError]. Only when nothing
// conflicts does it create the missing objects (exchanges, queues, then bindings from D
// outwards by [Binding.Tier]), so a failure part-way never leaves a queue whose expired
// messages would be dropped. Apply never deletes anything.
//
// # Limits
//
//   - Teardown finds objects by the plan's names: tear down with the declaring specification.
//   - Without the management API, [Status] cannot compare types, flags and arguments, nor see
//     bindings or messages_dlx; Teardown then relies on queue.delete's if-empty flag.
//   - amqp091's declare methods take no context: when a context ends, Apply, Status and
//     Teardown return at once and declarations in flight finish in the background.
//
// # Sources
//
//   - Queue arguments, 406 on redeclaration:
//     https://www.rabbitmq.com/docs/queues#optional-arguments
//   - Per-queue TTL, at most 315,360,000,000 ms: https://www.rabbitmq.com/docs/ttl
//   - Dead-lettering: https://www.rabbitmq.com/docs/dlx,
//     https://www.rabbitmq.com/docs/quorum-queues#dead-lettering
//   - Alternate exchanges (per exchange on an e2e path: rabbit_exchange:route1):
//     https://www.rabbitmq.com/docs/ae
//   - Policies: https://www.rabbitmq.com/docs/policies; a policy with a key the queue type does
//     not support does not apply to it (rabbit_queue_type:is_policy_applicable).
//   - Quorum delivery limit (20 by default from 4.0):
//     https://www.rabbitmq.com/docs/quorum-queues#poison-message-handling
//   - Exchange-to-exchange bindings: https://www.rabbitmq.com/docs/e2e
//   - Definitions: https://www.rabbitmq.com/docs/definitions
//   - Without the plugin, declaring an x-delayed-message exchange fails with 503
//     COMMAND_INVALID, which on RabbitMQ 3.x closes the whole connection.
package admin
