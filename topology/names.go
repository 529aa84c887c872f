package topology

import (
	"fmt"
	"strings"

	"github.com/delaykit/rabbitdelay/ttlbuckets"
)

// Names is the one naming rule of the topology: every object's name is the prefix, a dot and a
// fixed suffix, so two prefixes live side by side in one vhost.
//
//	<prefix>.dispatch          headers exchange D: routes a due message to its target by the
//	                           rabbitdelay-target header; alternate exchange <prefix>.unroutable
//	<prefix>.unroutable        fanout exchange, D's alternate exchange
//	<prefix>.parking           queue bound to <prefix>.unroutable: due messages no target took
//	<prefix>.ladder.LL         headers exchange of ladder level LL (two digits: 00, 01, ...)
//	<prefix>.ladder.LL.DD      ladder queue of level LL, digit DD (x-message-ttl DD·radix^LL·unit)
//	<prefix>.buckets           headers exchange of the buckets (rabbitdelay-bucket header)
//	<prefix>.bucket.<ms>ms     bucket queue with x-message-ttl <ms>
//	<prefix>.plugin            x-delayed-message exchange (x-delayed-type headers), bound to D
type Names struct {
	// Prefix is the name prefix; "" means DefaultPrefix.
	Prefix string
}

func (n Names) p() string {
	if n.Prefix == "" {
		return DefaultPrefix
	}
	return n.Prefix
}

// Names returns the naming rule of s's prefix.
func (s Spec) Names() Names { return Names{Prefix: s.WithDefaults().Prefix} }

// Dispatch is the dispatch exchange D (headers).
func (n Names) Dispatch() string { return n.p() + ".dispatch" }

// Unroutable is D's alternate exchange (fanout).
func (n Names) Unroutable() string { return n.p() + ".unroutable" }

// Parking is the queue that holds messages no target took.
func (n Names) Parking() string { return n.p() + ".parking" }

// LadderExchange is the headers exchange of ladder level level.
func (n Names) LadderExchange(level int) string { return fmt.Sprintf("%s.ladder.%02d", n.p(), level) }

// LadderQueue is the queue of digit value digit at ladder level level.
func (n Names) LadderQueue(level, digit int) string {
	return fmt.Sprintf("%s.ladder.%02d.%02d", n.p(), level, digit)
}

// LadderMarker is an empty fanout exchange whose name records the ladder the topology was
// declared with: <prefix>.ladder.<unit ms>ms.r<radix>.<order>.l<levels>, e.g.
// rabbitdelay.ladder.1ms.r16.shortest-first.l08. AMQP cannot read a queue's arguments back, so a
// publisher checks that this exchange exists (a passive declare) before it trusts the ladder's
// TTLs and dead-letter routing: a publisher with another unit, radix, order or number of levels
// would otherwise send messages that arrive early or never.
func (n Names) LadderMarker(l ttlbuckets.Ladder) string {
	l = l.WithDefaults()
	return fmt.Sprintf("%s.ladder.%dms.r%d.%s.l%02d", n.p(), l.Unit.Milliseconds(), l.Radix, l.Order, l.Levels())
}

// BucketExchange is the headers exchange the bucket queues are bound to.
func (n Names) BucketExchange() string { return n.p() + ".buckets" }

// BucketQueue is the queue of the bucket whose x-message-ttl is ttlMs milliseconds.
func (n Names) BucketQueue(ttlMs int64) string { return fmt.Sprintf("%s.bucket.%dms", n.p(), ttlMs) }

// PluginExchange is the x-delayed-message exchange.
func (n Names) PluginExchange() string { return n.p() + ".plugin" }

// Reserved reports whether name belongs to the naming rule, whatever the ladder and buckets:
// <prefix>.dispatch, .unroutable, .parking, .buckets, .plugin, or a name starting with
// <prefix>.ladder., <prefix>.bucket. or <prefix>.plugin-probe. (the plugin probe's temporary
// exchange, see ProbePlugin). A target, ready queue or ready-queue exchange with such
// a name would collide with the topology's own objects (now or after a ladder change), so
// [Spec.Validate] refuses it. Other names under the prefix, like <prefix>.orders, are free.
func (n Names) Reserved(name string) bool {
	switch name {
	case n.Dispatch(), n.Unroutable(), n.Parking(), n.BucketExchange(), n.PluginExchange():
		return true
	}
	for _, under := range []string{".ladder.", ".bucket.", ".plugin-probe."} {
		if strings.HasPrefix(name, n.p()+under) {
			return true
		}
	}
	return false
}

// BrokerReserved reports whether name starts with "amq.", the prefix RabbitMQ keeps for its own
// exchanges and queues: declaring one fails with 403 ACCESS_REFUSED (AMQP 0-9-1,
// exchange.declare's reserved names; https://www.rabbitmq.com/docs/queues#names), so only the
// broker creates them.
func BrokerReserved(name string) bool { return strings.HasPrefix(name, "amq.") }
