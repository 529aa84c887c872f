package route

import (
	"strconv"

	"github.com/delaykit/rabbitdelay/ttlbuckets"
)

// LadderQueue is the queue of Digit (1..Radix-1) at Level, with x-message-ttl TTL.
type LadderQueue struct {
	Level, Digit int
	TTL          int64 // ms
}

// Queues returns every queue of l by level then digit, ascending: every digit of every level,
// so the set depends only on Unit, Radix and l.Levels(). Nil for an invalid ladder.
func Queues(l ttlbuckets.Ladder) []LadderQueue {
	g, ok := resolve(l)
	if !ok {
		return nil
	}
	qs := make([]LadderQueue, 0, g.levels*int(g.mask))
	for level := range g.levels {
		for digit := 1; digit <= int(g.mask); digit++ {
			ttl := int64(digit) << (g.shift * uint(level)) * g.unitMs // digit·Radix^level·Unit
			qs = append(qs, LadderQueue{Level: level, Digit: digit, TTL: ttl})
		}
	}
	return qs
}

// Next returns the level level's queues hand a message on to: level+1, or level-1 with
// [ttlbuckets.LongestFirst]. At the last level (the dispatch exchange follows), outside the
// ladder and for an invalid ladder it returns -1, false.
func Next(l ttlbuckets.Ladder, level int) (next int, ok bool) {
	g, valid := resolve(l)
	if !valid || level < 0 || level >= g.levels || g.ends(level) {
		return -1, false
	}
	if g.order == ttlbuckets.LongestFirst {
		return level - 1, true
	}
	return level + 1, true
}

// QueueKind tells a ladder queue from a bucket queue in [DelayQueues].
type QueueKind int

const (
	LadderKind QueueKind = iota // one digit at one level
	BucketKind                  // one fixed-delay bucket
)

// String returns "ladder" or "bucket", or "QueueKind(N)".
func (k QueueKind) String() string {
	if k == LadderKind || k == BucketKind {
		return [...]string{"ladder", "bucket"}[k]
	}
	return "QueueKind(" + strconv.Itoa(int(k)) + ")"
}

// DelayQueue is one queue to declare: a ladder queue, or a bucket (Level and Digit -1), with
// its x-message-ttl TTL in milliseconds.
type DelayQueue struct {
	Kind         QueueKind
	Level, Digit int
	TTL          int64 // ms
}

// DelayQueues returns l's [Queues], then the buckets by ascending delay (b.List). An invalid
// ladder contributes none.
func DelayQueues(l ttlbuckets.Ladder, b ttlbuckets.Buckets) []DelayQueue {
	lq := Queues(l)
	bs := b.List()
	out := make([]DelayQueue, 0, len(lq)+len(bs))
	for _, q := range lq {
		out = append(out, DelayQueue{Kind: LadderKind, Level: q.Level, Digit: q.Digit, TTL: q.TTL})
	}
	for _, bk := range bs {
		out = append(out, DelayQueue{Kind: BucketKind, Level: -1, Digit: -1, TTL: bk.TTL})
	}
	return out
}
