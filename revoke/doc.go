// Package revoke reads the revocation stream that amqpdelay's Publisher.Revoke and
// Publisher.Reschedule write, and answers whether a delivery is revoked, next to any AMQP
// consumer:
//
//	revs, err := revoke.New(ctx, cfg) // cfg: amqpdelay.ConfigFromEnv(), as for the Publisher
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
// Reschedule writes an allow record (the new copy's tag is kept, in addition, by the
// revocation of the id in force), then publishes the new copy, whose tag starts with 'r', then
// the revocation keeping only that tag. Each step is confirmed before the next. So the new copy
// is dropped by none of the records that precede its allow record, nor by its own revocation;
// only a later Revoke or Reschedule of the id drops it. A reader that gets a rescheduled copy
// that the revocation it knows would drop may not have read the copy's allow record yet (a
// copy due at once can arrive first): it reads on up to a fence of its own sent after the copy
// arrived, which follows the allow record in the stream, and answers then. This costs a fence
// round trip only for such copies. If the new copy is not published, the allow record keeps a
// tag no copy carries, and the old copies are not revoked.
//
// # The guarantee, and its bound
//
// A revocation confirmed (Revoke returned nil) at least the bound B ([DefaultBound], 100 ms)
// before a copy's due time (its rabbitdelay-due header) makes Revoked answer true for that copy
// on every reader, however far behind the reader runs. Revoked proves it has read far enough
// with a fence: a record it writes to the stream with its send time t and reads back; every
// record confirmed before t precedes it in the stream. One fence read back serves every
// delivery due up to t + B, so a reader writes at most one fence per B of due times while
// messages fall due, and a delivery waits at most one fence round trip. Fences written by other
// readers of the stream count too. A revocation confirmed later than B before due is best
// effort: it is applied as soon as the reader reads it, and a copy already answered for, or
// already being handled, is not called back.
//
// The comparison between the revoking host's confirm, the publishing host's due time and the
// fence's time uses the hosts' clocks: the guarantee assumes they agree to within a few ms (NTP);
// a difference of e shifts the bound by e.
//
// # Memory and retention
//
// A reader keeps one entry per revoked id (about 100 bytes) and forgets it once its record is
// older than topology.Spec.RevocationRetention (the topology's longest delay plus a day; by
// then every copy the record can name has long been due), which is also the stream's x-max-age.
// It sweeps once a minute. New reads the whole stream first: about 1 s per 10,000 records on a
// small machine (a record holds up to 1 MiB of ids, so revoke many ids per call), fences
// included.
package revoke
