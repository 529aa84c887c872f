package amqpdelay

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/delaykit/rabbitdelay/internal/delayspec"
	"github.com/delaykit/rabbitdelay/internal/route"
	"github.com/delaykit/rabbitdelay/ttlbuckets"
)

// Dead-lettering adds an x-death entry per (queue, reason), x-first-death-* and, since 3.13,
// x-last-death-* (rabbit_dead_letter.erl, mc.erl); a consumer gets properties and headers in
// one frame of its frame_max, and amqp091-go closes the connection when they do not fit. So the
// Publisher refuses a message whose headers would outgrow its own frame_max after its path's
// dead-letterings and a park (docs/guarantees.md, "Headers that grow on every hop").

// deadLetterMargin is room beyond the computed size: x-delivery-count and x-acquired-count (26
// bytes each; or a stream's 25-byte x-stream-offset) that a ready queue adds, and 6 spare.
const deadLetterMargin = 26 + 26 + 6

// deadLetterReason is the reason RabbitMQ records when a delay queue's TTL expires a message.
const deadLetterReason = "expired"

// parkReason is the longest reason a ready queue records when it dead-letters a message to the
// parking queue (rabbit_fifo.erl).
const parkReason = "delivery_limit"

// deadLetterHop is one dead-lettering on a message's way: the queue it leaves, the exchange
// it entered that queue by, and the reason, as x-death records them.
type deadLetterHop struct {
	queue, exchange, reason string
}

// parkQueue stands for the one dead-lettering after the target's queues: a quorum ready queue
// dead-letters a rejected message to the parking queue (the other routes there add no x-death).
// It is as long as the longest ready queue's name (only its length counts; with none listed, the
// longest name RabbitMQ takes), or "" when ready queues do not dead-letter.
func parkQueue(spec delayspec.Spec) string {
	if spec.QueueType != delayspec.Quorum || spec.ReadyDeliveryLimit == delayspec.NoReadyDeliveryLimit {
		return ""
	}
	n := 0
	for _, q := range spec.ReadyQueues {
		n = max(n, len(q.Queue))
	}
	return strings.Repeat("q", cmp.Or(n, delayspec.MaxNameLen))
}

// deadLetterHops returns the dead-letterings, in order, of a message published to dest on path
// c in shard (none on the direct and plugin paths), and last, the exchange it was last
// published to when it reaches its target's queues.
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
			next, more := route.Next(l, h.Level)
			switch {
			case firstHopQueue(l, &c.plan, i):
				exchange = names.LadderExchangeShard(0, shard)
			case more && !lastHopQueue:
				exchange = names.LadderExchangeShard(next, shard)
			default: // where the order ends, or a last-hop queue
				exchange = names.Dispatch()
			}
		}
		return hops, exchange
	}
	return nil, dest
}

// hopQueue returns the queue of hop i of plan in shard, as route.EncodeRoute routes it: a
// last-hop queue (lastHopQueue), a first-hop queue, or the level's queue of its digit.
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

// Encoded sizes of field-table parts, as RabbitMQ writes them.
const (
	longstrOverhead = 1 + 1 + 4 // key length, type, value length
	// xDeathEntryFixed is an x-death table without its names and routing keys: 'F' 1 + length
	// 4, count 1+5+1+8, reason 1+6+1+4, queue 1+5+1+4, time 1+4+1+8, exchange 1+8+1+4,
	// routing-keys 1+12+1+4.
	xDeathEntryFixed = 5 + 15 + 12 + 11 + 14 + 14 + 18
	xDeathHeader     = 1 + 7 + 1 + 4 // key 1+7, 'A' 1, length 4
)

// deadLetteredHeaderSize returns the content-header size a consumer receives for m (of size
// size, published with routingKey) after the dead-letterings hops: BCC stripped, an x-death
// entry per hop, x-first-death-* and x-last-death-* (counted on 3.10 too: a message may be
// delivered after an upgrade).
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
	return n + deathSummarySize("x-first-death-", hops[0]) + deathSummarySize("x-last-death-", hops[len(hops)-1])
}

// deathSummarySize is the size of the headers prefix+reason, +queue and +exchange.
func deathSummarySize(prefix string, h deadLetterHop) int {
	return 3*(longstrOverhead+len(prefix)) + len("reason") + len(h.reason) +
		len("queue") + len(h.queue) + len("exchange") + len(h.exchange)
}

// deadLetterReserve is the room in bytes to leave in m's content header for the growth of hops
// and, when set, park, plus deadLetterMargin; never below 0 (a stripped BCC can shrink it).
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

// headerTooLarge describes a content header of size bytes that, with reserve more, would
// exceed frameMax (taken to be the consumers' too), or returns "".
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

// firstHopQueue reports whether hop i of plan goes through a first-hop queue (into level 0).
func firstHopQueue(l ttlbuckets.Ladder, plan *ttlbuckets.Plan, i int) bool {
	return i == 0 && route.FirstHopQueue(l, *plan)
}
