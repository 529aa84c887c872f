// Package revoke reads the revocation stream that amqpdelay's Publisher.Revoke and
// Publisher.Reschedule write, and answers whether a delivery is revoked, next to any AMQP
// consumer:
//
//	revs, err := revoke.New(ctx, cfg, revoke.Options{}) // cfg: amqpdelay.ConfigFromEnv(), as for the Publisher
//	defer revs.Close()
//	for d := range deliveries {
//		if gone, err := revs.Revoked(ctx, d); err != nil {
//			d.Nack(false, true) // the stream is unreachable: give it back
//			continue
//		} else if gone {
//			d.Ack(false) // revoked: drop it without handling
//			continue
//		}
//		handle(d); d.Ack(false)
//	}
//
// The consumer package does this by default.
//
// # What a revocation names
//
// Every message the Publisher sends carries its id (MessageId) and a copy tag
// (amqpdelay.CopyHeader, rabbitdelay-copy: random, new for each Publish, kept when a delivery is
// re-published for a retry). A revocation record names an id and, for Reschedule, the one copy
// tag to keep. A delivery is revoked when the latest record of its id (in stream order) keeps
// another tag, or none. So Revoke drops every copy of the id, also one published later with a
// plain Publish. No clock decides which copy is meant.
//
// Reschedule writes an allow record for the new copy's tag, publishes the new copy (its tag
// starts with 'r'), then the revocation that keeps only that tag, each confirmed before the
// next; only a later Revoke or Reschedule of the id drops the new copy. A reader that gets a
// rescheduled copy its known revocation would drop reads on, up to a fence of its own, until
// it has read the copy's allow record. If the new copy is not published, the old copies are
// not revoked.
//
// # The guarantee, and its bound
//
// A revocation confirmed (Revoke returned nil) at least the bound B ([DefaultBound]) before a
// copy's due time (its rabbitdelay-due header) makes Revoked answer true for that copy on
// every reader, however far behind the reader runs. A reader proves it has read far enough
// with a fence: a record it writes with its send time t and reads back; every record confirmed
// before t precedes it. One fence serves every delivery due up to t + B, so a delivery waits
// at most one fence round trip. A revocation confirmed later is best effort: it applies from
// when the reader reads it. The bound compares the hosts' clocks: a clock difference of e
// shifts it by e.
//
// # Memory and retention
//
// A reader keeps one entry per revoked id and forgets it once its record is older than
// the retention (the topology's longest delay plus a day), which is also
// the stream's x-max-age; it sweeps once a minute. New reads the whole stream first, fences
// included, so it takes longer the more records the stream holds; a record holds up to 1 MiB
// of ids, so revoke many ids per call.
package revoke
