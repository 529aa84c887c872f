// Package schedule runs periodic schedules ("on the 28th of every month at 01:00", "every 10
// minutes") that fire once across every instance of a service, with RabbitMQ as the only
// scheduler: no lock table, no extra process, no store beside the broker.
//
//	s, err := schedule.New(ctx, cfg, schedule.Options{}) // cfg: the amqpdelay.Config of the delay topology
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
// Records live in the stream <prefix>.schedules (x-max-age [DefaultRetention]): definitions
// (with a digest and whether active, paused or removed), fired, skipped and link records. Each
// instance reads the stream into memory; before it decides anything it syncs: it publishes a
// marker record, with a publisher confirm, and waits until it has read it back.
//
// Handling link(S, t), on the channel that consumes the links:
//
//  1. Wait until t plus its jitter by the local clock (never fire early), then sync.
//  2. Drop the link (ack, publish nothing) when S is paused or removed, when the link's digest is
//     not the latest definition's, or when t was already handled while the chain of the current
//     definition has a pending link (a duplicate link).
//  3. Publish the link for the next occurrence and wait for its confirm.
//  4. Publish occurrence t once to the headers exchange <prefix>.schedules.fire, on the same
//     channel, and wait for its confirm. That exchange is bound to the stream (every message)
//     and to the target exchange X (on the header rabbitdelay-schedule-target: X), so the
//     occurrence and its fired record are one message.
//  5. Ack the link.
//
// A crash or a lost connection at any point leaves at most a duplicate link, which step 2
// drops: the broker requeues an unacked link to another instance, and a connection it has seen
// die can publish nothing more. So no time fires twice, none is lost, and none fires early.
//
// Every instance may call [Scheduler.Declare] at start. The same definition changes nothing
// while its chain has a pending link. A changed definition takes effect from its first
// occurrence after the call; the old definition's links are dropped when they arrive. A chain
// with no pending link (none recorded, or the recorded one more than [DefaultLinkGrace] past
// due while the links queue is empty) is repaired by the next Declare.
//
// # Time
//
// Cron expressions are read by github.com/robfig/cron/v3 (seconds optional, descriptors such as
// @daily) in the schedule's IANA zone. Across a daylight-saving change, a wall time in a
// skipped hour fires once, at the first instant after the gap, and a wall time in a repeated
// hour fires once, at its first instance (robfig/cron alone would drop the first and fire the
// second twice). An expression that matches every hour ("*/10 * * * *") follows elapsed time.
// An Interval schedule fires at Start + k*Interval (the Unix epoch when Start is zero).
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
//     waits for an early link's time.
//   - The stream keeps records for its retention; an active schedule's definition record is
//     written again when older than half of it. A paused or removed schedule older than the
//     retention disappears from the listing.
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
