package ttlbuckets

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"time"
)

// Bucket is one fixed delay served by its own queue with x-message-ttl TTL ms (Delay in ms):
// one hop, exact (as exact as the broker's TTL timer).
type Bucket struct {
	Delay time.Duration
	TTL   int64 // ms
}

// Buckets is a set of fixed delays with exact-match lookup. The zero value is the empty set.
// A Buckets value is immutable and safe for concurrent use.
type Buckets struct {
	list []Bucket // ascending Delay, no duplicates
}

// NewBuckets returns the set of the given delays. Each must be a whole number of milliseconds
// (x-message-ttl's resolution), in 1 ms to [MaxQueueTTL] ms, and appear once. Every problem is
// reported, joined with [errors.Join], each wrapping [ErrInvalidBuckets] and naming the delay,
// its position and the allowed range; the set is then empty. No delays give the empty set.
func NewBuckets(delays ...time.Duration) (Buckets, error) {
	var errs []error
	first := make(map[time.Duration]int, len(delays))
	list := make([]Bucket, 0, len(delays))
	const maxDelay = time.Duration(MaxQueueTTL) * time.Millisecond
	for i, d := range delays {
		switch {
		case d <= 0 || d > maxDelay:
			errs = append(errs, fmt.Errorf("%w: delay #%d %v: allowed 1ms to %v (%d ms, RabbitMQ's x-message-ttl limit)",
				ErrInvalidBuckets, i, d, maxDelay, MaxQueueTTL))
		case d%time.Millisecond != 0:
			errs = append(errs, fmt.Errorf("%w: delay #%d %v: allowed a whole number of milliseconds (x-message-ttl's resolution), 1ms to %d ms",
				ErrInvalidBuckets, i, d, MaxQueueTTL))
		default:
			if j, dup := first[d]; dup {
				errs = append(errs, fmt.Errorf("%w: delay #%d %v: duplicate of delay #%d; allowed each delay once",
					ErrInvalidBuckets, i, d, j))
				continue
			}
			first[d] = i
			list = append(list, Bucket{Delay: d, TTL: int64(d / time.Millisecond)})
		}
	}
	if len(errs) > 0 {
		return Buckets{}, errors.Join(errs...)
	}
	slices.SortFunc(list, func(a, b Bucket) int { return cmp.Compare(a.Delay, b.Delay) })
	return Buckets{list: list}, nil
}

// List returns the buckets in ascending order of delay. The slice is a copy.
func (b Buckets) List() []Bucket { return slices.Clone(b.list) }

// Lookup returns the bucket whose Delay is exactly d (no rounding). It does not allocate.
func (b Buckets) Lookup(d time.Duration) (Bucket, bool) {
	i, ok := slices.BinarySearchFunc(b.list, d, func(x Bucket, d time.Duration) int { return cmp.Compare(x.Delay, d) })
	if !ok {
		return Bucket{}, false
	}
	return b.list[i], true
}
