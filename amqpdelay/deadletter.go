package amqpdelay

import (
	"fmt"
	"slices"
	"strings"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/delaykit/rabbitdelay/internal/delayspec"
	"github.com/delaykit/rabbitdelay/internal/route"
	"github.com/delaykit/rabbitdelay/ttlbuckets"
)

// What dead-lettering adds to a message's headers (rabbit_dead_letter.erl make_msg on 3.10,
// which quorum queues' rabbit_fifo_dlx_worker.erl calls too; mc.erl record_death and
// mc_amqpl.erl death_table on 4.x): an x-death entry per (queue, reason), the table {count,
// reason, queue, time, exchange, routing-keys} plus original-expiration when the message had a
// per-message TTL (the Expiration property is removed); x-first-death-reason, -queue and
// -exchange at the first death; on 3.13 and later also x-last-death-* at every death. exchange
// is the exchange the message was last published to (an exchange-to-exchange binding does not
// change it); routing-keys is the routing key and the CC list (BCC is stripped on publish).
//
// A consumer receives properties and headers in one content-header frame, which must fit in its
// connection's frame_max (AMQP 0-9-1 allows no continuation): amqp091-go closes the connection
// when it does not, and the message, back in the queue, closes the next consumer's too. So the
// Publisher refuses a message whose headers would outgrow the Publisher's own negotiated
// frame_max after its path's dead-letterings and a park (deadLetterReserve, headerTooLarge); a
// consumer that asks for a smaller frame_max is not protected.

// deadLetterMargin is room left beyond the computed size of a dead-lettered message's
// headers: 26 bytes for the x-delivery-count header (key 1+16, type 1, long 8) that a quorum
// ready queue adds when it redelivers the message (after a failed return, or a consumer that
// went away), 26 bytes for x-acquired-count (the same size), which RabbitMQ 4.3 and later add
// at every return and keep when they park the message (rabbit_fifo.erl), or the 25-byte
// x-stream-offset a stream adds instead, and 6 bytes spare.
const deadLetterMargin = 26 + 26 + 6

// deadLetterReason is the reason RabbitMQ records when a delay queue's TTL expires a message.
const deadLetterReason = "expired"

// parkReason is the longest reason a ready queue that `rabbitdelay apply` declared records when it
// dead-letters a message to <prefix>.unroutable, and so to the parking queue: "delivery_limit"
// (returned more often than its x-delivery-limit; rabbit_fifo.erl on 3.10 and 4.0), longer
// than "rejected" (a reject or nack without requeue), "maxlen" and "expired" (which only a
// policy on the ready queue can cause; topology/policy.go reports those).
const parkReason = "delivery_limit"

// deadLetterHop is one dead-lettering on a message's way: the queue it leaves, the exchange
// it entered that queue by, and the reason, as x-death records them.
type deadLetterHop struct {
	queue, exchange, reason string
}

// parkRoute is the one dead-lettering a message can get after it reached its target's queues:
// a quorum ready queue declared by `rabbitdelay apply` dead-letters it to <prefix>.unroutable,
// bound to the parking queue, when a consumer rejects it or returns it more often than the
// delivery limit (delayspec.Spec.ReadyDeliveryLimit). The other routes to the parking queue add
// no x-death entry: an alternate exchange (<prefix>.unroutable of the dispatch exchange,
// <prefix>.due-unroutable of the targets) routes without dead-lettering, and package
// consumer's parking and consumer.Replay publish a copy, which the Publisher (or Replay's
// own size check) measures as it is. The parking queue has no dead-letter exchange: a parked
// message gains nothing more. queue is a name as long as the longest ready queue name of the
// specification; ok is false when ready queues do not dead-letter (classic queue type, or
// ReadyDeliveryLimit -1).
type parkRoute struct {
	ok    bool
	queue string // a name of the longest ready queue's length (only its length counts)
}

// newParkRoute returns the park route of spec (defaults applied). When spec lists no ready
// queues, the Publisher cannot know the queues `rabbitdelay apply` declared elsewhere, and counts
// a name of delayspec.MaxNameLen bytes, the longest RabbitMQ takes.
func newParkRoute(spec delayspec.Spec) parkRoute {
	if spec.QueueType != delayspec.Quorum || spec.ReadyDeliveryLimit == delayspec.NoReadyDeliveryLimit {
		return parkRoute{}
	}
	n := 0
	for _, q := range spec.ReadyQueues {
		n = max(n, len(q.Queue))
	}
	if n == 0 {
		n = delayspec.MaxNameLen
	}
	return parkRoute{ok: true, queue: strings.Repeat("q", n)}
}

// hop returns the park route's dead-lettering of a message whose last exchange (the one
// x-death records: the exchange it was last published to, by a client or as a dead-letter
// exchange) is exchange, with a queue name of the longest length; ok false when there is none.
func (r parkRoute) hop(exchange string) (deadLetterHop, bool) {
	if !r.ok {
		return deadLetterHop{}, false
	}
	return deadLetterHop{queue: r.queue, exchange: exchange, reason: parkReason}, true
}

// deadLetterHops returns the dead-letterings of a message published to dest on path c, in
// order, with the queue and exchange names of names in shard of the ladder: a bucket's one hop (the bucket queue,
// entered by dest, the buckets exchange); a ladder's one hop per non-zero digit (each queue
// entered by the exchange the message was last published to: dest for the first, then the
// previous queue's dead-letter exchange, the next level's exchange; the last hop may be a
// last-hop queue, which dead-letters into the dispatch exchange). Other paths: none. last
// is the exchange the message was last published to when it reaches its target's queues,
// which x-death records if a ready queue parks it: the last delay queue's dead-letter exchange
// (the dispatch exchange after a bucket; after a ladder, the next level's exchange, from which
// exchange-to-exchange bindings pass it down without changing it), or dest on the direct and
// plugin paths.
func deadLetterHops(names delayspec.Names, l ttlbuckets.Ladder, c *choice, dest string, shard int) (hops []deadLetterHop, last string) {
	switch c.path {
	case PathBucket:
		return []deadLetterHop{{queue: names.BucketQueue(c.bucketTTL), exchange: dest, reason: deadLetterReason}}, names.Dispatch()
	case PathLadder:
		hops := make([]deadLetterHop, len(c.plan.Hops))
		exchange := dest
		for i, h := range c.plan.Hops {
			queue, lastHopQueue := hopQueue(names, l, &c.plan, i, shard)
			hops[i] = deadLetterHop{queue: queue, exchange: exchange, reason: deadLetterReason}
			if lastHopQueue {
				exchange = names.Dispatch() // the last-hop queue dead-letters into D
				break
			}
			if firstHopQueue(l, &c.plan, i) {
				exchange = names.LadderExchangeShard(0, shard) // the first-hop queue dead-letters into level 0
				continue
			}
			if next, ok := route.Next(l, h.Level); ok {
				exchange = names.LadderExchangeShard(next, shard)
			} else {
				exchange = names.Dispatch()
			}
		}
		return hops, exchange
	}
	return nil, dest
}

// hopQueue returns the queue of hop i of plan in shard of the ladder, as
// route.EncodeRoute's headers route it: the last hop at a level whose queues
// dead-letter into a next level takes the last-hop queue of its digit (lastHopQueue true);
// a first hop that route.FirstHopQueue sends through a first-hop queue that queue; every
// other hop the level's queue of its digit.
func hopQueue(names delayspec.Names, l ttlbuckets.Ladder, plan *ttlbuckets.Plan, i, shard int) (queue string, lastHopQueue bool) {
	h := plan.Hops[i]
	if _, more := route.Next(l, h.Level); more && i == len(plan.Hops)-1 {
		return names.LadderLastHopQueueShard(h.Level, h.Digit, shard), true
	}
	if firstHopQueue(l, plan, i) {
		return names.LadderFirstHopQueueShard(h.Level, h.Digit, shard), false
	}
	return names.LadderQueueShard(h.Level, h.Digit, shard), false
}

// Encoded sizes (AMQP 0-9-1 field tables as RabbitMQ writes them): a field is its key (a
// length octet and the name), a type octet and the value; a longstr value is a 4-byte length
// and the bytes, a long or timestamp 8 bytes, an array or table a 4-byte length and its
// contents (an array element: type octet and value).
const (
	// longstrOverhead is what a longstr field adds to its key's and value's bytes.
	longstrOverhead = 1 + 1 + 4 // key length, type, value length
	// xDeathEntryFixed is one x-death table without its reason, queue and exchange names and
	// routing keys: 'F' 1 + length 4, count 1+5+1+8, reason 1+6+1+4, queue 1+5+1+4,
	// time 1+4+1+8, exchange 1+8+1+4, routing-keys 1+12+1+4.
	xDeathEntryFixed = 5 + 15 + 12 + 11 + 14 + 14 + 18
	// xDeathHeader is the x-death field without its entries: key 1+7, 'A' 1, length 4.
	xDeathHeader = 1 + 7 + 1 + 4
)

// deadLetteredHeaderSize returns the size in bytes of the content-header frame payload
// (contentHeaderSize) that a consumer receives for m, whose contentHeaderSize is size,
// published with routingKey, after the dead-letterings hops: m's properties and headers without BCC (stripped on publish), plus an
// x-death entry per hop (its queue and exchange names, the routing key and m's CC list, and
// original-expiration in the first one when m has an Expiration, which leaves the properties),
// x-first-death-* (the first hop's) and x-last-death-* (the last hop's). x-last-death-* is always counted, although 3.10
// does not add it: a message can wait for weeks, through an upgrade, and the node that
// delivers it may not be the one it was published to. m's own x-death and x-*-death-* headers
// (the Publisher strips them from delayed messages) are counted as kept. Without hops it is
// size.
func deadLetteredHeaderSize(m *amqp.Publishing, size int, routingKey string, hops []deadLetterHop) int {
	n := size
	if len(hops) == 0 {
		return n
	}
	if len(m.Headers) == 0 {
		n += 4 // the headers table's length: dead-lettering adds the first headers
	}
	if bcc, ok := m.Headers["BCC"]; ok {
		n -= 1 + len("BCC") + fieldSize(bcc) // the table itself stays: dead-lettering adds headers
	}
	cc, _ := m.Headers["CC"].([]any)
	keys := 1 + 4 + len(routingKey) // a routing-keys element: 'S' 1, length 4, the bytes
	for _, k := range cc {
		if s, ok := k.(string); ok { // RabbitMQ takes the longstr elements only
			keys += 1 + 4 + len(s)
		}
	}
	n += xDeathHeader
	for i, h := range hops {
		n += xDeathEntryFixed + len(h.reason) + len(h.queue) + len(h.exchange) + keys
		if i == 0 && m.Expiration != "" { // 4.0 writes the TTL as an integer: no longer
			n += 1 + len("original-expiration") + 1 + 4 + len(m.Expiration)
		}
	}
	if m.Expiration != "" {
		n -= 1 + len(m.Expiration) // the Expiration property is removed at the first hop
	}
	first, last := hops[0], hops[len(hops)-1]
	n += deathSummarySize("x-first-death-", first)
	n += deathSummarySize("x-last-death-", last)
	return n
}

// deathSummarySize is the size of the three longstr headers prefix+reason, +queue, +exchange.
func deathSummarySize(prefix string, h deadLetterHop) int {
	return 3*(longstrOverhead+len(prefix)) + len("reason") + len(h.reason) +
		len("queue") + len(h.queue) + len("exchange") + len(h.exchange)
}

// deadLetterReserve is the room, in bytes, to leave free in the content-header frame of m
// (published with routingKey, headers already final, contentHeaderSize size) for what
// RabbitMQ adds at the dead-letterings hops (deadLetterHops) and, when park is set, at the
// park route's one more (parkRoute.hop), whichever is larger (x-last-death-* names the last
// one only): the growth that deadLetteredHeaderSize computes, plus deadLetterMargin; never
// below 0 (a large BCC list, stripped on publish, can make the delivered header smaller than
// the published one, which must fit by itself). 0 without hops and without park.
func deadLetterReserve(m *amqp.Publishing, size int, routingKey string, hops []deadLetterHop, park *deadLetterHop) int {
	worst := 0
	if len(hops) > 0 {
		worst = deadLetteredHeaderSize(m, size, routingKey, hops)
	}
	if park != nil {
		worst = max(worst, deadLetteredHeaderSize(m, size, routingKey, append(slices.Clip(hops), *park)))
	}
	if worst == 0 {
		return 0
	}
	return max(0, worst+deadLetterMargin-size)
}

// headerTooLarge describes a message whose content-header frame (its contentHeaderSize is
// size), with reserve bytes more (see deadLetterReserve), would exceed frameMax, or returns "".
// frameMax is the Publisher's connection's negotiated frame_max, taken to be the consumers' too.
func headerTooLarge(size, frameMax, reserve int) string {
	if frameMax <= 0 {
		return ""
	}
	n := size + frameOverhead
	if n+reserve <= frameMax {
		return ""
	}
	if reserve > 0 {
		return fmt.Sprintf("the message's properties and headers encode to %d bytes (with this path's own headers), and %d bytes "+
			"must stay free for the dead-letter headers RabbitMQ adds at its delay hops and when a ready queue parks it (an x-death "+
			"entry per hop with the queue, the exchange, the routing key and msg.Headers[\"CC\"], x-first-death-*, x-last-death-*, "+
			"and a %d-byte margin): "+
			"%d bytes when delivered, more than the connection's frame_max of %d bytes (consumers are taken to have the same). "+
			"AMQP 0-9-1 carries them in one frame, and RabbitMQ closes the connection of every consumer the message is delivered "+
			"to when they do not fit; move large values (a long CC list too) from msg.Headers into the body",
			n, reserve, deadLetterMargin, n+reserve, frameMax)
	}
	return fmt.Sprintf("the message's properties and headers encode to %d bytes (with this path's own headers), more than the "+
		"connection's frame_max of %d bytes: AMQP 0-9-1 carries them in one frame and RabbitMQ closes the whole connection "+
		"(501 FRAME_ERROR) when they do not fit; move large values from msg.Headers into the body", n, frameMax)
}

// firstHopQueue reports whether hop i of plan goes through a first-hop queue, which
// dead-letters back into level 0 (route.FirstHopQueue: the first hop only).
func firstHopQueue(l ttlbuckets.Ladder, plan *ttlbuckets.Plan, i int) bool {
	return i == 0 && route.FirstHopQueue(l, *plan)
}
