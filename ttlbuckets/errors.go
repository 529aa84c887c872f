package ttlbuckets

import "errors"

// Sentinel errors. Every error this package returns wraps exactly one of them (test with
// [errors.Is]); the message adds the field, the bad value and the allowed range.
var (
	// ErrInvalidLadder is wrapped by [Ladder.Validate]'s problems, by [Ladder.Plan] for an
	// invalid ladder, and by [ParseOrder], [Order.UnmarshalText] and [Order.MarshalText].
	ErrInvalidLadder = errors.New("ttlbuckets: invalid ladder")
	// ErrDelayTooLong is wrapped by [Ladder.Plan] for a delay above [Ladder.Max].
	ErrDelayTooLong = errors.New("ttlbuckets: delay too long")
	// ErrNotWholeUnit is wrapped by [Ladder.Plan] in [Strict] mode for a delay that is not a
	// whole number of [Ladder.Unit].
	ErrNotWholeUnit = errors.New("ttlbuckets: delay not a whole number of units")
	// ErrInvalidBuckets is wrapped by every problem [NewBuckets] reports.
	ErrInvalidBuckets = errors.New("ttlbuckets: invalid buckets")
)
