// Package schedule runs periodic schedules ("on the 28th of every month at 01:00", "every 10
// minutes") that fire once across every instance of a service, with RabbitMQ as the only
// scheduler: no lock table, no extra process, no store beside the broker. docs/schedules.md
// describes it in full.
//
//	s, err := schedule.New(ctx, cfg, schedule.Options{}) // cfg: the amqpdelay.Config of the delay topology
//	err = s.Declare(ctx, schedule.Schedule{Name: "billing.monthly", Cron: "0 1 28 * *",
//		Zone: "Europe/Berlin", Exchange: "billing", RoutingKey: "bill.run",
//		Message: amqp.Publishing{Body: []byte(`{"job":"bill"}`)}})
//	err = s.Run(ctx) // every instance: one at a time fires the occurrences
//
// # Design
//
// A schedule is a chain of delayed messages. The link for occurrence t is published with
// amqpdelay.Publisher.PublishAt, due at t plus its jitter, to the fanout exchange
// <prefix>.schedules.links (a target of the delay topology), which routes it to the quorum queue
// <prefix>.schedules.links with x-single-active-consumer: every instance in [Scheduler.Run]
// consumes it with prefetch 1, so one instance at a time handles links, one after another.
//
// Records (definitions, fired, skipped, links) live in the stream <prefix>.schedules. Each
// instance reads it into memory and, before deciding anything, syncs: it publishes a marker
// record with a publisher confirm and waits until it has read it back.
//
// Handling link(S, t), on the channel that consumes the links:
//
//  1. Wait until t plus its jitter by the local clock (never early), then sync.
//  2. Drop the link when S is paused or removed, when it is an earlier definition's, or when t
//     was already handled while the current definition's chain has a pending link.
//  3. Publish the next occurrence's link and wait for its confirm.
//  4. Publish occurrence t, confirmed, to the headers exchange <prefix>.schedules.fire, bound
//     to the stream and to the target exchange X (on header rabbitdelay-schedule-target: X):
//     the occurrence and its fired record are one message.
//  5. Ack the link.
//
// A crash or a lost connection at any point leaves at most a duplicate link, which step 2 drops:
// the broker requeues an unacked link, and a connection it has seen die publishes nothing more.
// So no time fires twice, none is lost, and none fires early.
//
// Cron expressions are read by github.com/robfig/cron/v3 in the schedule's IANA zone, with a
// daylight-saving fix (dst.go). Occurrences missed while every instance was down follow the
// schedule's [MissedPolicy].
//
// # Limits
//
//   - A broker node failure can store one publish twice: an occurrence can then be delivered
//     twice with the same MessageId ([OccurrenceID]). Deduplicate by id (the consumer
//     package's store does).
//   - Links are serial across all schedules of a prefix.
//   - The stream keeps records for its retention; an active schedule's definition record is
//     written again when older than half of it. A paused or removed schedule older than the
//     retention disappears from the listing.
//   - Remove revokes the pending link; an instance that declares the schedule at start brings it
//     back.
//
// # Sources
//
//   - Single active consumer: https://www.rabbitmq.com/docs/consumers#single-active-consumer
//   - Exchange-to-exchange bindings keep the routing key: https://www.rabbitmq.com/docs/e2e
//   - Headers exchanges ignore x- binding arguments: https://www.rabbitmq.com/docs/exchanges#headers
//   - Streams: https://www.rabbitmq.com/docs/streams
package schedule
