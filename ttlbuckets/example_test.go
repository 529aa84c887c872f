package ttlbuckets_test

import (
	"fmt"
	"time"

	"github.com/delaykit/rabbitdelay/ttlbuckets"
)

// The zero Ladder is the default ladder: 1 ms unit, radix 16, 8 levels of 15 queues each.
func ExampleLadder() {
	l := ttlbuckets.Ladder{}.WithDefaults()
	fmt.Println("unit", l.Unit, "radix", l.Radix, "max", l.Max, l.Order)
	fmt.Println(l.Levels(), "levels,", l.Levels()*(l.Radix-1), "queues, at most", l.Levels()+1, "hops (top-split: one more than the levels)")
	// Output:
	// unit 1ms radix 16 max 1193h2m47.295s top-split
	// 8 levels, 120 queues, at most 9 hops (top-split: one more than the levels)
}

// A 90-minute delay is 0x5265C0 ms: five non-zero hex digits. With ShortestFirst the
// message enters at its lowest non-zero level and climbs: five hops.
func ExampleLadder_Plan() {
	l := ttlbuckets.Ladder{Order: ttlbuckets.ShortestFirst}.WithDefaults()
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

// With the default order, TopSplit, the same delay takes 4 of its 5 units of level 5 first,
// then climbs from level 1, and takes the last unit of level 5 last: six hops, the short ones
// between two long ones.
func ExampleLadder_Plan_topSplit() {
	p, _ := ttlbuckets.Ladder{}.Plan(90*time.Minute, ttlbuckets.RoundUp)
	for _, h := range p.Hops {
		fmt.Printf("level %d digit %2d\n", h.Level, h.Digit)
	}
	// Output:
	// level 5 digit  4
	// level 1 digit 12
	// level 2 digit  5
	// level 3 digit  6
	// level 4 digit  2
	// level 5 digit  1
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

func ExampleParseOrder() {
	o, err := ttlbuckets.ParseOrder("longest-first")
	fmt.Println(o, int(o), err)
	_, err = ttlbuckets.ParseOrder("newest-first")
	fmt.Println(err)
	// Output:
	// longest-first 2 <nil>
	// ttlbuckets: invalid ladder: Order "newest-first": allowed "top-split" (default), "shortest-first", "longest-first" or "top-first"
}
