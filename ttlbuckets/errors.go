package ttlbuckets

import "errors"

// Sentinel errors. Every error this package returns wraps exactly one of them, so callers
// test with [errors.Is]; the wrapping message adds the field, the bad value and the
// allowed range.
var (
	// ErrInvalidLadder is wrapped by every problem [Ladder.Validate] reports, by
	// [ParseOrder], [Order.UnmarshalText] and [Order.MarshalText] for an unknown order, and
	// by [Ladder.Plan] for an invalid ladder.
	ErrInvalidLadder = errors.New("ttlbuckets: invalid ladder")

	// ErrDelayTooLong is wrapped by [Ladder.Plan] when the requested delay is above
	// [Ladder.Max]; the message states the maximum.
	ErrDelayTooLong = errors.New("ttlbuckets: delay too long")

	// ErrNotWholeUnit is wrapped by [Ladder.Plan] in [Strict] mode when the requested
	// delay is not a whole number of [Ladder.Unit]; the message states the unit.
	ErrNotWholeUnit = errors.New("ttlbuckets: delay not a whole number of units")

	// ErrInvalidBuckets is wrapped by every problem [NewBuckets] reports.
	ErrInvalidBuckets = errors.New("ttlbuckets: invalid buckets")
)
