// Package revlog is the format of the records of the revocation stream <prefix>.revoked,
// written by amqpdelay's Publisher.Revoke and Reschedule and read by package revoke. A record
// is one message with the header [AtHeader], of one of three types:
//
//   - [TypeRevocation]: a body of entries, each a byte n (1 to 255), n bytes of message id, a
//     byte k (0 to 255) and k bytes of copy tag to keep ("" keeps none).
//   - [TypeAllow]: entries as a revocation's, each a copy tag to keep in addition to those the
//     id's latest record keeps. Reschedule writes it before it publishes the new copy.
//   - [TypeFence]: no body; a reader that reads one back has read every record confirmed
//     before it was sent. [ReaderHeader] and [SeqHeader] let a reader recognise its own.
package revlog

import (
	"errors"
	"fmt"
)

const (
	// TypeRevocation is the AMQP type property of a revocation record.
	TypeRevocation = "rabbitdelay.revocation"
	// TypeAllow is the AMQP type property of an allow record (Reschedule's first record).
	TypeAllow = "rabbitdelay.allow"
	// TypeFence is the AMQP type property of a fence record.
	TypeFence = "rabbitdelay.fence"
	// ReaderHeader holds the random id of the reader that wrote a fence (a string).
	ReaderHeader = "rabbitdelay-reader"
	// SeqHeader holds a fence's number among its reader's fences (int64, from 1).
	SeqHeader = "rabbitdelay-seq"
	// RescheduledPrefix starts the copy tag of a copy that Reschedule published, and only
	// those.
	RescheduledPrefix = 'r'
	// AtHeader is the header holding a record's write time (Unix ms, int64).
	AtHeader = "rabbitdelay-at"
	// CopyHeader is the header holding a message copy's tag (a string of 1 to 64 bytes).
	CopyHeader = "rabbitdelay-copy"
	// MaxTagLen is the longest copy tag, in bytes.
	MaxTagLen = 64
	// MaxBody is the largest record body, in bytes.
	MaxBody = 1 << 20
)

// Entry is one revocation: every copy of the message ID is revoked but the one whose copy tag
// is Keep ("" keeps none).
type Entry struct {
	ID   string
	Keep string
}

// Rescheduled reports whether tag is the copy tag of a copy that Reschedule published.
func Rescheduled(tag string) bool { return tag != "" && tag[0] == RescheduledPrefix }

// Size is the number of bytes e takes in a body.
func (e Entry) Size() int { return 2 + len(e.ID) + len(e.Keep) }

// Encode appends the entries to b; the caller checked each ID (1 to 255 bytes) and Keep.
func Encode(b []byte, entries []Entry) []byte {
	for _, e := range entries {
		b = append(b, byte(len(e.ID)))
		b = append(b, e.ID...)
		b = append(b, byte(len(e.Keep)))
		b = append(b, e.Keep...)
	}
	return b
}

// Split cuts entries into groups whose encoded size is at most MaxBody each.
func Split(entries []Entry) [][]Entry {
	var out [][]Entry
	start, size := 0, 0
	for i, e := range entries {
		if size+e.Size() > MaxBody && i > start {
			out = append(out, entries[start:i])
			start, size = i, 0
		}
		size += e.Size()
	}
	if start < len(entries) {
		out = append(out, entries[start:])
	}
	return out
}

var errCorrupt = errors.New("revlog: corrupt revocation record")

// Decode calls f for every entry of body, in order, until an entry is cut short or has an
// empty id (an error).
func Decode(body []byte, f func(id, keep []byte)) error {
	for i := 0; i < len(body); {
		n := int(body[i])
		if n == 0 || i+1+n >= len(body) {
			return fmt.Errorf("%w at byte %d", errCorrupt, i)
		}
		id := body[i+1 : i+1+n]
		i += 1 + n
		k := int(body[i])
		if i+1+k > len(body) {
			return fmt.Errorf("%w at byte %d", errCorrupt, i)
		}
		f(id, body[i+1:i+1+k])
		i += 1 + k
	}
	return nil
}
