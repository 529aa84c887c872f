// Package topology turns a delay specification ([Spec]) into the exact set of RabbitMQ
// exchanges, queues and bindings that carry delayed messages ([Spec.Plan]), declares it
// idempotently ([Apply]), inspects it ([Status]), exports it as RabbitMQ definitions
// ([Export]) and deletes it ([Teardown]). The declare CLI (cmd/declare) is a thin layer on top;
// the amqpdelay client reads the same [Config] from the same AMQPDELAY_* variables.
//
// # What gets declared
//
// Every name derives from the prefix by one rule ([Names]), so two prefixes live side by side
// in one vhost. For prefix p:
//
//   - p.unroutable, a fanout exchange, bound to the queue p.parking: due messages that no target
//     takes end there instead of being dropped.
//   - p.dispatch (D), a headers exchange with alternate-exchange p.unroutable, bound to each
//     target exchange X (exchange-to-exchange) with {x-match: all, rabbitdelay-target: X}.
//   - Targets given as name:type are declared (durable); the others must already exist.
//   - Per ladder level L, the headers exchange p.ladder.LL and, per digit v in 1..radix-1, the
//     queue p.ladder.LL.VV with x-message-ttl v·radix^L·unit ms, bound with
//     {x-match: all, rabbitdelay-digit-L: v}, dead-lettering to the exchange of the level that
//     [ttlbuckets.Ladder.Next] names (D after the last level); a pass-through binding for
//     digit 0 goes to the same exchange. The TTLs and header names come from package
//     ttlbuckets ([ttlbuckets.DelayQueues], [ttlbuckets.DigitHeader]); nothing is computed
//     twice.
//   - With buckets, the headers exchange p.buckets and per bucket the queue p.bucket.<ms>ms,
//     bound with {x-match: all, rabbitdelay-bucket: ms}, dead-lettering straight to D.
//   - Unless the plugin mode is off, p.plugin of type x-delayed-message (x-delayed-type
//     headers), bound to D matching everything. With mode auto it is declared only when the
//     broker has the plugin ([ProbePlugin], [Plan.ForPlugin]).
//   - Ready queues (queue=exchange:key) declared and bound, so plain consumers have somewhere
//     to read.
//
// Everything is durable. Delay queues never get x-expires (an unused queue would be deleted
// with its messages) nor a dead-letter routing key (the message keeps its own), and must never
// have consumers ([Status] flags them). Quorum queues (the default) get
// x-dead-letter-strategy at-least-once and x-overflow reject-publish; classic queues only the
// TTL and the dead-letter exchange. Integer arguments are int64 (amqp091 sends a Go int as a
// 32-bit value).
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
// messages would be dropped. Apply never deletes an object.
//
// AMQP cannot list bindings, so without the management API Apply reports bindings as "bound"
// (declaring a binding twice is harmless); with a [Management] client it reports them as
// created or unchanged, and [Status] checks them and shows messages_dlx.
//
// # Performance
//
// A quorum queue declaration costs about 10 ms of broker work on RabbitMQ 3.10.8 (2 cores),
// so Apply spreads the work over [DefaultWorkers] channels: the default topology with one
// existing target (10 exchanges, 121 quorum queues, 130 bindings, no plugin) applies to an empty vhost in about 1.0-1.4 s on a quiet
// local broker (1.7-2.4 s measured while other brokers kept the 2 cores at load average 8;
// 16 channels were no faster than 8), and a second apply (all unchanged) in about 50 ms. [Spec.Plan] takes about
// 0.2 ms.
//
// # Limits
//
//   - Teardown finds objects by the plan's names: change the prefix, ladder or buckets and the
//     old objects are not found. Tear down with the specification they were declared with.
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
//   - Alternate exchanges: https://www.rabbitmq.com/docs/ae
//   - Exchange-to-exchange bindings: https://www.rabbitmq.com/docs/e2e
//   - Headers exchanges ignore x- binding arguments: https://www.rabbitmq.com/docs/exchanges#headers
//   - Definitions export and import: https://www.rabbitmq.com/docs/definitions
//   - messages_dlx in the management API's queue view (seen on 3.10.8): a quorum queue's
//     messages whose at-least-once dead-lettering has not completed.
//   - Without the delayed-message plugin, declaring an x-delayed-message exchange fails with
//     503 COMMAND_INVALID, which on 3.x closes the whole connection (seen on 3.10.8).
package topology
