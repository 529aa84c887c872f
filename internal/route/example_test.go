package route_test

import (
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/delaykit/rabbitdelay/internal/route"
	"github.com/delaykit/rabbitdelay/ttlbuckets"
)

// Next tells where each level's queues dead-letter to; false means the dispatch exchange.
func ExampleNext() {
	for _, o := range []ttlbuckets.Order{ttlbuckets.ShortestFirst, ttlbuckets.LongestFirst} {
		l := ttlbuckets.Ladder{Max: 4095 * time.Millisecond, Order: o} // 3 levels
		fmt.Print(o, ":")
		for level := range l.Levels() {
			next, ok := route.Next(l, level)
			if ok {
				fmt.Printf(" %d->%d", level, next)
			} else {
				fmt.Printf(" %d->dispatch", level)
			}
		}
		fmt.Println()
	}
	// Output:
	// shortest-first: 0->1 1->2 2->dispatch
	// longest-first: 0->dispatch 1->0 2->1
}

// EncodeDigits writes every level's digit as an int64 header; DecodeDigits reads them
// back, from any integer type.
func ExampleEncodeDigits() {
	l := ttlbuckets.Ladder{Max: 4095 * time.Millisecond}
	p, _ := l.Plan(1234*time.Millisecond, ttlbuckets.RoundUp) // 0x4D2
	h := map[string]any{}
	route.EncodeDigits(l, p, h)
	for _, k := range slices.Sorted(maps.Keys(h)) {
		fmt.Printf("%s: %T %v\n", k, h[k], h[k])
	}
	h[route.DigitHeader(1)] = int32(13) // as a broker might hand it back
	digits, err := route.DecodeDigits(l, h)
	fmt.Println(digits, err)
	// Output:
	// rabbitdelay-digit-0: int64 2
	// rabbitdelay-digit-1: int64 13
	// rabbitdelay-digit-2: int64 4
	// [2 13 4] <nil>
}

// DelayQueues lists everything to declare: ladder queues, then buckets.
func ExampleDelayQueues() {
	l := ttlbuckets.Ladder{Radix: 4, Max: 63 * time.Millisecond} // 3 levels of 3 queues
	b, _ := ttlbuckets.NewBuckets(time.Second)
	for _, q := range route.DelayQueues(l, b) {
		fmt.Printf("%v level %d digit %d ttl %d ms\n", q.Kind, q.Level, q.Digit, q.TTL)
	}
	// Output:
	// ladder level 0 digit 1 ttl 1 ms
	// ladder level 0 digit 2 ttl 2 ms
	// ladder level 0 digit 3 ttl 3 ms
	// ladder level 1 digit 1 ttl 4 ms
	// ladder level 1 digit 2 ttl 8 ms
	// ladder level 1 digit 3 ttl 12 ms
	// ladder level 2 digit 1 ttl 16 ms
	// ladder level 2 digit 2 ttl 32 ms
	// ladder level 2 digit 3 ttl 48 ms
	// bucket level -1 digit -1 ttl 1000 ms
}

// IsDelayHeader picks the headers to strip from a delivery before it is delayed again.
func ExampleIsDelayHeader() {
	delivered := map[string]any{
		"x-death": []any{}, "x-first-death-queue": "rabbitdelay.ladder.00.03", "x-delay": int32(-5000),
		"rabbitdelay-digit-0": int64(3), "rabbitdelay-target": "orders", "trace-id": "abc",
	}
	for k := range delivered {
		if route.IsDelayHeader(k) {
			delete(delivered, k)
		}
	}
	fmt.Println(delivered)
	// Output:
	// map[trace-id:abc]
}

// Queues lists the default ladder's queues: 8 levels of 15.
func ExampleQueues() {
	l := ttlbuckets.Ladder{}.WithDefaults()
	qs := route.Queues(l)
	fmt.Println(l.Levels(), "levels,", len(qs), "queues, max", l.Max)
	fmt.Printf("shortest queue %+v\n", qs[0])
	fmt.Printf("longest queue %+v\n", qs[len(qs)-1])
	// Output:
	// 8 levels, 120 queues, max 1193h2m47.295s
	// shortest queue {Level:0 Digit:1 TTL:1}
	// longest queue {Level:7 Digit:15 TTL:4026531840}
}
