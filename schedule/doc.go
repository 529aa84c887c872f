// Package schedule runs periodic schedules ("on the 28th of every month at 01:00", "every 10
// minutes") that fire once across every instance of a service, with RabbitMQ as the only
// scheduler: no lock table, no extra process. docs/schedules.md describes it in full.
//
//	s, err := schedule.New(ctx, cfg, schedule.Options{}) // cfg: the amqpdelay.Config of the delay topology
//	err = s.Declare(ctx, schedule.Schedule{Name: "billing.monthly", Cron: "0 1 28 * *",
//		Zone: "Europe/Berlin", Exchange: "billing", RoutingKey: "bill.run",
//		Message: amqp.Publishing{Body: []byte(`{"job":"bill"}`)}})
//	err = s.Run(ctx) // every instance: one at a time fires the occurrences
//
// # Design
//
// A schedule is a chain of delayed messages. The link for occurrence t, due at t plus its
// jitter, goes through the delay topology to the quorum queue <prefix>.schedules.links, which
// every instance in [Scheduler.Run] consumes as x-single-active-consumer with prefetch 1: one
// instance at a time handles links. Records (definitions, fired, skipped, links) live in the
// stream <prefix>.schedules; each instance reads it into memory and, before deciding anything,
// publishes a marker record, confirmed, and waits until it has read it back.
//
// For link(S, t) the handler waits until t plus its jitter (never early); drops the link when S
// is paused or removed, when it is an earlier definition's, or when t was already handled while
// the chain has a pending link; publishes the next link, confirmed; publishes occurrence t,
// confirmed, on the channel that holds the link, to the headers exchange
// <prefix>.schedules.fire, bound to the stream and to the target exchange (so the occurrence
// and its fired record are one message); then acks the link. A crash or a lost connection at
// any point leaves at most a duplicate link, which is dropped: no time fires twice, none is
// lost, none fires early.
//
// # Limits
//
//   - A broker node failure can store one publish twice: an occurrence can then be delivered
//     twice with the same MessageId ([OccurrenceID]); deduplicate by id.
//   - Links are serial across all schedules of a prefix.
//   - A paused or removed schedule older than the stream's retention disappears from the listing.
//
// # Sources
//
//   - Single active consumer: https://www.rabbitmq.com/docs/consumers#single-active-consumer
//   - Exchange-to-exchange bindings keep the routing key: https://www.rabbitmq.com/docs/e2e
//   - Headers exchanges ignore x- binding arguments: https://www.rabbitmq.com/docs/exchanges#headers
//   - Streams: https://www.rabbitmq.com/docs/streams
package schedule
