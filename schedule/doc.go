// Package schedule runs periodic schedules ("on the 28th of every month at 01:00", "every 10
// minutes") that fire once across every instance of a service, with RabbitMQ as the only
// scheduler: no lock table, no extra process, no store beside the broker.
//
//	s, err := schedule.New(ctx, cfg) // cfg: the amqpdelay.Config of the delay topology
//	err = s.Declare(ctx, schedule.Schedule{Name: "billing.monthly", Cron: "0 1 28 * *",
//		Zone: "Europe/Berlin", Exchange: "billing", RoutingKey: "bill.run",
//		Message: amqp.Publishing{Body: []byte(`{"job":"bill"}`)}})
//	err = s.Run(ctx) // every instance: one at a time fires the occurrences
//
// # Design
//
// A schedule is a chain of delayed messages. The link for occurrence t of schedule S is a
// message published with amqpdelay.Publisher.PublishAt, due at t (plus its jitter), to the
// fanout exchange <prefix>.schedules.links (a target of the delay topology: [New] binds the
// dispatch exchange to it), which routes it to the quorum queue <prefix>.schedules.links,
// declared with x-single-active-consumer. Every instance that calls [Scheduler.Run] consumes
// that queue with a prefetch of 1, so one instance at a time handles links, one after another.
//
// Records live in the stream <prefix>.schedules (x-max-age [DefaultRetention]): definition
// records (the schedule, its message, a digest of both, and whether it is active, paused or
// removed), fired records, skipped records and link records. Each instance reads the stream from
// its first record into memory. Before it decides anything it syncs: it publishes a marker record
// (with a publisher confirm) and waits until it has read it back, so every record the broker
// confirmed before is known.
//
// Handling link(S, t), on the channel that consumes the links:
//
//  1. Wait until t plus its jitter by the local clock (never fire early), then sync.
//  2. Drop the link (ack, publish nothing) when S is paused or removed, when the link's digest is
//     not the latest definition's, or when t was already handled while the chain of the current
//     definition has a pending link (a duplicate link).
//  3. Publish the link for the next occurrence and wait for its confirm.
//  4. Publish occurrence t once to the headers exchange <prefix>.schedules.fire, on the same
//     channel, and wait for its confirm. That exchange is bound to the stream (no arguments:
//     every message) and to the target exchange X (exchange to exchange, which keeps the routing
//     key, on {x-match: all, rabbitdelay-schedule-target: X}), so the one publish lands in X's
//     queues and, as the fired record, in the stream: the occurrence and its record are one
//     message.
//  5. Ack the link.
//
// A crash (or SIGKILL, or a lost connection) at any point leaves at most a duplicate link: before
// step 3 nothing was written and the broker requeues the link to another instance; between 3 and
// 4 the next link exists twice, and the one that arrives second is dropped at step 2; after 4 the
// requeued link finds t fired. Because the occurrence is published on the connection that holds
// the link, a connection the broker has seen die (and whose link it requeued) can publish nothing
// more. So no time fires twice and none is lost, and no occurrence is published before its time.
//
// Declaring: every instance may call [Scheduler.Declare] at start. The same definition changes
// nothing while its chain has a pending link. A changed definition writes a definition record and
// a link for its first occurrence after now; the old definition's links are dropped when they
// arrive, so the change takes effect from the next occurrence. A chain with no pending link is
// broken: none is recorded, or the recorded one is more than the link grace ([DefaultLinkGrace])
// past due while the links queue holds no message (purged, deleted, revoked). Declaring again
// repairs it: a lost link is published again for its own time, a missing one for the occurrence
// after the last one handled. Instances declaring at the same moment make duplicate links; a
// link for a time at or before the last occurrence handled is dropped while the chain has a
// pending link.
//
// # Time
//
// Cron expressions are read by github.com/robfig/cron/v3 (seconds optional, descriptors such as
// @daily) in the schedule's IANA zone. Daylight-saving changes, for an expression with particular
// hours ("30 2 * * *"): a wall time in a skipped hour fires once, at the first instant after the
// gap (03:00 local when 02:00-03:00 is skipped); a wall time in a repeated hour fires once, at
// its first instance (the earlier offset). robfig/cron alone drops the first and fires the second
// twice; this package corrects both. An expression that matches every hour ("*/10 * * * *")
// follows elapsed time across a change, as robfig/cron does. An Interval schedule fires at
// Start + k*Interval (the Unix epoch when Start is zero), in absolute time.
//
// Missed occurrences: a link that arrives after the next occurrence's time has passed too (every
// instance was down across occurrence times) is handled by the schedule's [MissedPolicy]: the
// latest missed occurrence fires once ([MissedLatest], the default), every one fires in order
// ([MissedAll]), or none does and the chain resumes after now ([MissedSkip]). [LateHeader] says
// how late an occurrence was published, [MissedHeader] how many were dropped.
//
// # Occurrences
//
// Each occurrence is the schedule's message with MessageId "<name>@<RFC 3339 UTC time>"
// ([OccurrenceID]) and the headers [OccurrenceHeader] (the same string), [ScheduleHeader],
// [LateHeader], [MissedHeader], [InstanceHeader] and the package's record headers. A plain AMQP
// consumer tells occurrences apart by the id; with the consumer package's store the effect is
// exactly once.
//
// # Limits
//
//   - A node failure of the broker can store one publish twice (the confirm lost with the node):
//     an occurrence can then be delivered twice with the same MessageId. Deduplicate by id (the
//     consumer package's store does).
//   - Links are serial across all schedules of a prefix: a handler holds the links queue while it
//     waits for an early link's time, at most the broker's early delivery (milliseconds).
//   - The stream keeps records for its retention; an active schedule's definition record is
//     written again when older than half of it. A paused or removed schedule older than the
//     retention disappears from the listing; declaring it again brings it back.
//   - Remove revokes the pending link (amqpdelay.Publisher.Revoke) and drops it when it arrives;
//     an instance that declares the schedule at start brings it back.
//
// # Sources
//
//   - Single active consumer: https://www.rabbitmq.com/docs/consumers#single-active-consumer
//   - Exchange-to-exchange bindings keep the routing key: https://www.rabbitmq.com/docs/e2e
//   - Headers exchanges ignore x- binding arguments: https://www.rabbitmq.com/docs/exchanges#headers
//   - Streams: https://www.rabbitmq.com/docs/streams
package schedule
