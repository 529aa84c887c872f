package ttlbuckets

import "strconv"

// QueueKind tells a ladder queue from a bucket queue in [DelayQueues].
type QueueKind int

const (
	// LadderKind is a queue of the ladder: one digit value at one level.
	LadderKind QueueKind = iota
	// BucketKind is the queue of one fixed-delay bucket.
	BucketKind
)

// String returns "ladder" or "bucket", or "QueueKind(N)".
func (k QueueKind) String() string {
	switch k {
	case LadderKind:
		return "ladder"
	case BucketKind:
		return "bucket"
	}
	return "QueueKind(" + strconv.Itoa(int(k)) + ")"
}

// DelayQueue is one queue to declare: a ladder queue (Level, Digit) or a bucket (Level and
// Digit are -1), with its x-message-ttl, TTL, in milliseconds.
type DelayQueue struct {
	Kind         QueueKind
	Level, Digit int
	TTL          int64 // ms
}

// DelayQueues returns every delay queue to declare, in a stable order: the ladder's queues
// ([Ladder.Queues]: level, then digit, ascending), then the buckets ([Buckets.List]:
// ascending delay). An invalid ladder contributes no queues; check [Ladder.Validate]
// first.
func DelayQueues(l Ladder, b Buckets) []DelayQueue {
	lq := l.Queues()
	out := make([]DelayQueue, 0, len(lq)+b.Len())
	for _, q := range lq {
		out = append(out, DelayQueue{Kind: LadderKind, Level: q.Level, Digit: q.Digit, TTL: q.TTL})
	}
	for _, bk := range b.list {
		out = append(out, DelayQueue{Kind: BucketKind, Level: -1, Digit: -1, TTL: bk.TTL})
	}
	return out
}
