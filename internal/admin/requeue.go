package admin

import (
	"cmp"
	"fmt"
	"strconv"
	"strings"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/delaykit/rabbitdelay/internal/delayspec"
	"github.com/delaykit/rabbitdelay/internal/text"
)

// RequeueLoop is a ready queue, or the parking queue, whose consumer requeues a message it
// cannot handle over and over, with no delivery limit to end it (see [RequeueLoopOf]).
type RequeueLoop struct {
	Queue         string  `json:"queue"`
	RedeliverRate float64 `json:"redeliver_rate"` // per second
	DeliverRate   float64 `json:"deliver_rate"`   // per second
	Messages      int64   `json:"messages"`
	Cause         string  `json:"cause"` // why no delivery limit ends it: a Cause constant
}

// Causes of a [RequeueLoop].
const (
	// CauseNackNotCounted: a quorum queue on 4.3+, where basic.nack with requeue does not count
	// toward the delivery limit (rabbitmq-server PR #15387); basic.reject does.
	CauseNackNotCounted = "nack-not-counted"
	CauseClassic        = "classic"           // classic queues have no delivery limit
	CauseNoLimit        = "no-delivery-limit" // a quorum queue on 3.x without x-delivery-limit
	CauseParking        = "parking"           // the parking queue never drops a message
)

// requeueLoopMinRate is the redeliver rate (per second) from which redeliveries count as a
// loop: a poison message comes back hundreds of times a second, an occasional requeue far less.
const requeueLoopMinRate = 1.0

// RequeueLoopOf reports whether ready or parking queue q, as the management API shows it (mq)
// on RabbitMQ version, is in a requeue loop no delivery limit ends: redeliver rate at least 1/s
// and half the deliver rate, messages held, and a Cause applies (a quorum queue with a limit
// on 3.x-4.2 parks the message at its limit). Rates average the last statistics samples, so a
// loop shows a few seconds after it starts.
func RequeueLoopOf(q Queue, mq ManagedQueue, version string) (RequeueLoop, bool) {
	if mq.RedeliverRate < requeueLoopMinRate || mq.RedeliverRate < mq.DeliverRate/2 || mq.Messages <= 0 {
		return RequeueLoop{}, false
	}
	loop := RequeueLoop{Queue: q.Name, RedeliverRate: mq.RedeliverRate, DeliverRate: mq.DeliverRate, Messages: mq.Messages}
	argType, _ := q.Args["x-queue-type"].(string)
	typ := cmp.Or(mq.Type, argType)
	_, limit := mq.Arguments["x-delivery-limit"]
	switch {
	case q.Role == RoleParking:
		loop.Cause = CauseParking
	case typ == string(delayspec.Classic):
		loop.Cause = CauseClassic
	case typ != string(delayspec.Quorum):
		return RequeueLoop{}, false
	case versionAtLeast(version, 4, 3):
		loop.Cause = CauseNackNotCounted
	case !limit && !versionAtLeast(version, 4, 0):
		loop.Cause = CauseNoLimit
	default:
		return RequeueLoop{}, false
	}
	return loop, true
}

// Advice is what to do about the loop, in one sentence; parking is the parking queue's name.
func (l RequeueLoop) Advice(parking string) string {
	switch l.Cause {
	case CauseParking:
		return "the parking queue has no delivery limit, so that no parked message is ever dropped, and a reader that gives a " +
			"message back with requeue gets it again at once, forever: ack a message once it is republished or saved elsewhere, " +
			"and to leave messages parked, cancel the reader's consumer (or close its channel) instead of requeueing them"
	case CauseNackNotCounted:
		return "RabbitMQ 4.3 does not count a basic.nack with requeue toward a quorum queue's delivery limit (rabbitmq-server " +
			"PR #15387), so the limit never parks the message: give a message the consumer cannot handle back with basic.reject " +
			"(requeue true counts; at the limit the queue parks it in " + parking + "), or reject it without requeue to park it at " +
			"once; or give the queue a delayed retry (policy keys delayed-retry-type returned, delayed-retry-min, delayed-retry-max; " +
			"RabbitMQ 4.3.1+), which makes the loop slow instead of hot"
	case CauseClassic:
		return "a classic queue has no delivery limit, so a message its consumer keeps requeueing comes back forever: reject it " +
			"without requeue (with a dead-letter exchange set it is dead-lettered), or use quorum ready queues " +
			"(AMQPDELAY_QUEUE_TYPE=quorum), whose delivery limit parks it in " + parking
	default:
		return "the queue has no delivery limit (RabbitMQ 3.x has no default), so a message its consumer keeps requeueing comes " +
			"back forever: give it one (AMQPDELAY_READY_DELIVERY_LIMIT, default 20: at the limit it is parked in " + parking +
			"), or reject the message without requeue"
	}
}

// Kind is "parking" or "ready".
func (l RequeueLoop) Kind() string {
	if l.Cause == CauseParking {
		return "parking"
	}
	return "ready"
}

// String is "queue Q: N redeliveries a second (of M deliveries), K messages held".
func (l RequeueLoop) String() string {
	return fmt.Sprintf("queue %s: %.0f redeliveries a second (of %.0f deliveries), %s held", l.Queue, l.RedeliverRate, l.DeliverRate,
		text.Plural(int(l.Messages), "message"))
}

// versionAtLeast reports whether version v is at least major.minor ("" is not).
func versionAtLeast(v string, major, minor int) bool {
	maj, mino, ok := ParseVersion(v)
	if !ok {
		return false
	}
	return maj > major || (maj == major && mino >= minor)
}

// ParseVersion reads the major and minor of a RabbitMQ version ("4.3.6", "3.10", "4": minor
// 0). ok is false when v does not start with a number.
func ParseVersion(v string) (major, minor int, ok bool) {
	parts := strings.SplitN(v, ".", 3)
	major, err := strconv.Atoi(parts[0])
	if err != nil || major < 0 {
		return 0, 0, false
	}
	if len(parts) > 1 {
		digits := strings.TrimRightFunc(parts[1], func(r rune) bool { return r < '0' || r > '9' })
		if minor, err = strconv.Atoi(digits); err != nil {
			return 0, 0, false
		}
	}
	return major, minor, true
}

// ServerVersion is conn's "version" server property, "" when absent (or conn is nil).
func ServerVersion(conn *amqp.Connection) string {
	if conn == nil {
		return ""
	}
	v, _ := conn.Properties["version"].(string)
	return v
}
