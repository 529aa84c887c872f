package amqpdelay

import (
	"strings"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/delaykit/rabbitdelay/internal/route"
	"github.com/delaykit/rabbitdelay/plugin"
	"github.com/delaykit/rabbitdelay/ttlbuckets"
)

// delayHeaders returns a copy of h without the headers that decide or record a delay
// (route.IsDelayHeader: the routing headers, x-delay, x-death, x-first-death-*,
// x-last-death-*), with room for extra more entries. h is not modified.
func delayHeaders(h amqp.Table, extra int) amqp.Table {
	out := make(amqp.Table, len(h)+extra)
	for k, v := range h {
		if !route.IsDelayHeader(k) {
			out[k] = v
		}
	}
	return out
}

// directHeaders returns a copy of h without rabbitdelay's routing headers (a stale due time
// or digit must not mislead), keeping everything else, x-delay and x-death included: a
// direct publish is the caller's message as given.
func directHeaders(h amqp.Table) amqp.Table {
	out := make(amqp.Table, len(h)+1)
	for k, v := range h {
		if !route.IsDelayHeader(k) || strings.HasPrefix(k, "x-") {
			out[k] = v
		}
	}
	return out
}

// buildHeaders returns the headers of the copy sent for choice c to target, due at due. A
// ladder message's last hop goes through a last-hop queue (route.EncodeRoute).
func buildHeaders(h amqp.Table, c *choice, l ttlbuckets.Ladder, target string, due time.Time) amqp.Table {
	var out amqp.Table
	switch c.path {
	case PathDirect:
		out = directHeaders(h)
	case PathLadder:
		out = delayHeaders(h, len(c.plan.Digits)+3)
		route.EncodeRoute(l, c.plan, out)
		out[route.TargetHeader] = target
	case PathBucket:
		out = delayHeaders(h, 3)
		out[route.BucketHeader] = c.bucketTTL
		out[route.TargetHeader] = target
	case PathPlugin:
		out = delayHeaders(h, 3)
		plugin.SetDelay(out, c.pluginMs)
		out[route.TargetHeader] = target
	}
	out[route.DueHeader] = due.UnixMilli()
	return out
}

// Due returns the time a delivery was due, from the rabbitdelay-due header (Unix
// milliseconds) that the Publisher sets on every message it sends, on every path. ok is
// false when the header is missing or not an integer (a message not published through
// amqpdelay). The time is truncated to the millisecond, so a delivery received at or after
// Due is on time; RabbitMQ never expires a queue's message before its TTL has passed.
func Due(delivery amqp.Delivery) (due time.Time, ok bool) {
	return dueFromHeaders(delivery.Headers)
}

func dueFromHeaders(h amqp.Table) (time.Time, bool) {
	ms, isInt, fits := route.HeaderInt(h[route.DueHeader])
	if !isInt || !fits {
		return time.Time{}, false
	}
	return time.UnixMilli(ms), true
}
