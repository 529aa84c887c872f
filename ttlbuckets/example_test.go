package ttlbuckets_test

import (
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/delaykit/rabbitdelay/ttlbuckets"
)

// The default ladder: 1 ms unit, radix 16, 8 levels, 120 queues.
func ExampleDefaultLadder() {
	l := ttlbuckets.DefaultLadder()
	qs := l.Queues()
	fmt.Println(l.Levels(), "levels,", len(qs), "queues, max", l.Max)
	fmt.Printf("shortest queue %+v\n", qs[0])
	fmt.Printf("longest queue %+v\n", qs[len(qs)-1])
	// Output:
	// 8 levels, 120 queues, max 1193h2m47.295s
	// shortest queue {Level:0 Digit:1 TTL:1}
	// longest queue {Level:7 Digit:15 TTL:4026531840}
}

// A 90-minute delay is 0x5265C0 ms: five non-zero hex digits, five hops. With the default
// order the message enters at its lowest non-zero level and climbs.
func ExampleLadder_Plan() {
	l := ttlbuckets.DefaultLadder()
	p, err := l.Plan(90*time.Minute, ttlbuckets.RoundUp)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("digits", p.Digits, "entry", p.Entry, "effective", p.Effective)
	for _, h := range p.Hops {
		fmt.Printf("level %d digit %2d: %7d ms\n", h.Level, h.Digit, h.TTL)
	}
	// Output:
	// digits [0 12 5 6 2 5 0 0] entry 1 effective 1h30m0s
	// level 1 digit 12:     192 ms
	// level 2 digit  5:    1280 ms
	// level 3 digit  6:   24576 ms
	// level 4 digit  2:  131072 ms
	// level 5 digit  5: 5242880 ms
}

// With LongestFirst (the textbook order) the same delay enters at its highest level.
func ExampleLadder_Plan_longestFirst() {
	l := ttlbuckets.Ladder{Order: ttlbuckets.LongestFirst}
	p, _ := l.Plan(90*time.Minute, ttlbuckets.RoundUp)
	fmt.Println("entry", p.Entry)
	for _, h := range p.Hops {
		fmt.Printf("level %d digit %2d\n", h.Level, h.Digit)
	}
	// Output:
	// entry 5
	// level 5 digit  5
	// level 4 digit  2
	// level 3 digit  6
	// level 2 digit  5
	// level 1 digit 12
}

// A delay that is not a whole number of units is rounded up, never down; Strict refuses
// it instead. A delay of zero or less needs no ladder at all.
func ExampleLadder_Plan_rounding() {
	l := ttlbuckets.Ladder{Unit: 10 * time.Millisecond, Max: time.Hour}
	p, _ := l.Plan(25*time.Millisecond, ttlbuckets.RoundUp)
	fmt.Println(p.Effective, p.Rounded)
	_, err := l.Plan(25*time.Millisecond, ttlbuckets.Strict)
	fmt.Println(err)
	_, err = l.Plan(2*time.Hour, ttlbuckets.RoundUp)
	fmt.Println(err)
	p, err = l.Plan(-time.Second, ttlbuckets.RoundUp)
	fmt.Println(p.Entry, len(p.Hops), err)
	// Output:
	// 30ms true
	// ttlbuckets: delay not a whole number of units: 25ms is not a whole number of the ladder's Unit 10ms (Strict rounding)
	// ttlbuckets: delay too long: 2h0m0s is above the ladder's maximum (Max) of 1h0m0s (3600000 ms)
	// -1 0 <nil>
}

// Validate reports every problem at once.
func ExampleLadder_Validate() {
	l := ttlbuckets.Ladder{Unit: 1500 * time.Microsecond, Radix: 10}
	fmt.Println(l.Validate())
	l = ttlbuckets.Ladder{Max: 5 * 365 * 24 * time.Hour}
	fmt.Println(l.Validate())
	// Output:
	// ttlbuckets: invalid ladder: Unit 1.5ms: allowed a whole number of milliseconds, at least 1ms
	// ttlbuckets: invalid ladder: Radix 10: allowed a power of two from 2 to 64 (2, 4, 8, 16, 32 or 64)
	// ttlbuckets: invalid ladder: Max 43800h0m0s: needs 10 levels, whose longest queue (level 9, digit 15) would have x-message-ttl 1030792151040 ms, above RabbitMQ's limit of 315360000000 ms; allowed with Unit 1ms and Radix 16: 1ms to 19088h44m36.735s (68719476735 ms)
}

// Next tells where each level's queues dead-letter to; false means the dispatch exchange.
func ExampleLadder_Next() {
	for _, o := range []ttlbuckets.Order{ttlbuckets.ShortestFirst, ttlbuckets.LongestFirst} {
		l := ttlbuckets.Ladder{Max: 4095 * time.Millisecond, Order: o} // 3 levels
		fmt.Print(o, ":")
		for level := range l.Levels() {
			next, ok := l.Next(level)
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
func ExampleLadder_EncodeDigits() {
	l := ttlbuckets.Ladder{Max: 4095 * time.Millisecond}
	p, _ := l.Plan(1234*time.Millisecond, ttlbuckets.RoundUp) // 0x4D2
	h := map[string]any{}
	l.EncodeDigits(p, h)
	for _, k := range slices.Sorted(maps.Keys(h)) {
		fmt.Printf("%s: %T %v\n", k, h[k], h[k])
	}
	h[ttlbuckets.DigitHeader(1)] = int32(13) // as a broker might hand it back
	digits, err := l.DecodeDigits(h)
	fmt.Println(digits, err)
	// Output:
	// rabbitdelay-digit-0: int64 2
	// rabbitdelay-digit-1: int64 13
	// rabbitdelay-digit-2: int64 4
	// [2 13 4] <nil>
}

// Buckets serve a few fixed delays in one exact hop each.
func ExampleNewBuckets() {
	b, err := ttlbuckets.NewBuckets(time.Minute, 5*time.Second, 30*time.Second)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(b.List())
	fmt.Println(b.Lookup(30 * time.Second))
	fmt.Println(b.Lookup(31 * time.Second))
	_, err = ttlbuckets.NewBuckets(time.Second, 1500*time.Microsecond, time.Second)
	fmt.Println(err)
	// Output:
	// [{5s 5000} {30s 30000} {1m0s 60000}]
	// {30s 30000} true
	// {0s 0} false
	// ttlbuckets: invalid buckets: delay #1 1.5ms: allowed a whole number of milliseconds (x-message-ttl's resolution), 1ms to 315360000000 ms
	// ttlbuckets: invalid buckets: delay #2 1s: duplicate of delay #0; allowed each delay once
}

// DelayQueues lists everything to declare: ladder queues, then buckets.
func ExampleDelayQueues() {
	l := ttlbuckets.Ladder{Radix: 4, Max: 63 * time.Millisecond} // 3 levels of 3 queues
	b, _ := ttlbuckets.NewBuckets(time.Second)
	for _, q := range ttlbuckets.DelayQueues(l, b) {
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

func ExampleParseOrder() {
	o, err := ttlbuckets.ParseOrder("longest-first")
	fmt.Println(o, int(o), err)
	_, err = ttlbuckets.ParseOrder("newest-first")
	fmt.Println(err)
	// Output:
	// longest-first 1 <nil>
	// ttlbuckets: invalid ladder: Order "newest-first": allowed "shortest-first" (default), "longest-first" or "top-first"
}

// IsDelayHeader picks the headers to strip from a delivery before it is delayed again.
func ExampleIsDelayHeader() {
	delivered := map[string]any{
		"x-death": []any{}, "x-first-death-queue": "rabbitdelay.ladder.00.03", "x-delay": int32(-5000),
		"rabbitdelay-digit-0": int64(3), "rabbitdelay-target": "orders", "trace-id": "abc",
	}
	for k := range delivered {
		if ttlbuckets.IsDelayHeader(k) {
			delete(delivered, k)
		}
	}
	fmt.Println(delivered)
	// Output:
	// map[trace-id:abc]
}
