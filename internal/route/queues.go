package route

import (
	"strconv"

	"github.com/delaykit/rabbitdelay/ttlbuckets"
)

// LadderQueue is one ladder queue: the queue of digit value Digit (1..Radix-1) at level
// Level, whose x-message-ttl is TTL milliseconds (Digit·Radix^Level·Unit).
type LadderQueue struct {
	Level, Digit int
	TTL          int64 // ms
}

// Queues returns every queue of l, l.Levels()·(Radix-1) of them, ordered by level then
// digit, both ascending. Every digit of the top level is included, even when Max needs only
// smaller ones there, so the set of queues depends only on Unit, Radix and l.Levels(). It
// returns nil for an invalid ladder. The slice is new on every call.
func Queues(l ttlbuckets.Ladder) []LadderQueue {
	g, ok := resolve(l)
	if !ok {
		return nil
	}
	qs := make([]LadderQueue, 0, g.levels*int(g.mask))
	for level := range g.levels {
		for digit := 1; digit <= int(g.mask); digit++ {
			qs = append(qs, LadderQueue{Level: level, Digit: digit, TTL: g.ttl(level, digit)})
		}
	}
	return qs
}

// Next returns the level to which level's queues and pass-through binding hand a message on
// l: with [ttlbuckets.ShortestFirst], [ttlbuckets.TopFirst] and [ttlbuckets.TopSplit], level+1
// (and ok false at the top level: the dispatch exchange; a first-hop queue hands to level 0
// instead);
// with [ttlbuckets.LongestFirst], level-1 (ok false at level 0). When ok is false next is -1;
// so it is for a level outside 0..l.Levels()-1 and for an invalid ladder.
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

// DelayQueues returns every delay queue to declare, in a stable order: l's queues ([Queues]:
// level, then digit, ascending), then the buckets (b.List: ascending delay). An invalid
// ladder contributes no queues; check l.Validate first.
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
