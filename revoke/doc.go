// Package revoke reads the revocation stream that amqpdelay's Publisher.Revoke and
// Publisher.Reschedule write, and answers whether a delivery is revoked, next to any AMQP
// consumer (the consumer package does this by default):
//
//	revs, err := revoke.New(ctx, cfg, revoke.Options{}) // cfg: as for the Publisher
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
// A revocation record names an id and, for Reschedule, the one copy tag
// (amqpdelay.CopyHeader) to keep; a delivery is revoked when the latest record of its id keeps
// another tag, or none. A revocation confirmed at least the bound B ([DefaultBound]) before a
// copy's due time is seen by every reader: before it answers, a reader writes a fence record
// with its send time and reads it back, which proves it has read every record confirmed before
// (the hosts' clock difference shifts B). Later revocations are best effort. A reader keeps one
// entry per revoked id for the stream's retention (x-max-age). docs/revoke.md has the details.
package revoke
