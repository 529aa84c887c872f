package revoke

import (
	"context"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/delaykit/rabbitdelay/internal/revlog"
)

// reader returns a Revocations with no connection whose fences already cover every due time,
// so that Revoked answers from the set alone.
func reader() *Revocations {
	r := &Revocations{set: map[string]entry{}, retention: time.Hour, progress: make(chan struct{}), covered: 1 << 62}
	r.ctx, r.cancel = context.WithCancel(context.Background())
	return r
}

func record(at time.Time, entries ...revlog.Entry) amqp.Delivery {
	return amqp.Delivery{Type: revlog.TypeRevocation, Headers: amqp.Table{revlog.AtHeader: at.UnixMilli()}, Body: revlog.Encode(nil, entries)}
}

func copyOf(id, tag string) amqp.Delivery {
	return amqp.Delivery{MessageId: id, Headers: amqp.Table{revlog.CopyHeader: tag}}
}

// TestRevokedRules: Revoke drops every copy; Reschedule's record keeps its one copy; the latest
// record of an id wins; ids without a record, and records past their retention, drop nothing.
func TestRevokedRules(t *testing.T) {
	r := reader()
	now := time.Now()
	r.apply(&amqp.Delivery{Type: revlog.TypeRevocation, Headers: amqp.Table{revlog.AtHeader: now.UnixMilli()},
		Body: revlog.Encode(nil, []revlog.Entry{{ID: "all"}, {ID: "moved", Keep: "new"}, {ID: "twice", Keep: "first"}})})
	r.apply(ptr(record(now, revlog.Entry{ID: "twice", Keep: "second"})))
	r.apply(ptr(record(now.Add(-2*time.Hour), revlog.Entry{ID: "old"}))) // past the retention
	cases := []struct {
		d    amqp.Delivery
		want bool
	}{
		{copyOf("all", "x"), true},
		{amqp.Delivery{MessageId: "all"}, true}, // no copy tag (published before copy tags)
		{copyOf("moved", "old-copy"), true},
		{copyOf("moved", "new"), false},
		{copyOf("twice", "first"), true},
		{copyOf("twice", "second"), false},
		{copyOf("old", "x"), false},
		{copyOf("other", "x"), false},
		{amqp.Delivery{}, false}, // no MessageId
	}
	for _, c := range cases {
		got, err := r.Revoked(context.Background(), c.d)
		if err != nil || got != c.want {
			t.Errorf("Revoked(id %q, copy %v) = %v, %v; want %v", c.d.MessageId, c.d.Headers[revlog.CopyHeader], got, err, c.want)
		}
	}
	if st := r.Stats(); st.Known != 3 || st.Records != 2 {
		t.Errorf("Stats = %+v, want 3 known ids (the expired record is not taken) and 2 records", st)
	}
	r.sweep(now.Add(2 * time.Hour).UnixMilli())
	if n := r.Stats().Known; n != 0 {
		t.Errorf("after the retention, %d ids are still known", n)
	}
}

// TestFenceWait: a fence read back wakes the waiters whose due time it covers, and a later one is
// needed for a later due time.
func TestFenceWait(t *testing.T) {
	r := reader()
	r.covered = 0
	r.fenceReq = make(chan fenceReq, 1)
	done := make(chan error, 1)
	go func() { done <- r.wait(context.Background(), 1000, 0) }()
	req := <-r.fenceReq // the waiter asked for a fence
	at := req.at
	if at < 1000 {
		t.Fatalf("fence time %d, below the time needed", at)
	}
	r.apply(&amqp.Delivery{Type: revlog.TypeFence, Headers: amqp.Table{revlog.AtHeader: at}})
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := r.wait(ctx, at+1, 0); err == nil {
		t.Error("a wait for a time after the last fence returned without a new fence")
	}
	r.cancel()
	if err := r.wait(context.Background(), at+2, 0); err != ErrClosed {
		t.Errorf("wait after close = %v, want ErrClosed", err)
	}
}

// TestRescheduleOrder: Reschedule writes an allow record, publishes the new copy, then writes
// its revocation. In every order in which a reader can see the records and the new copy, the
// new copy is kept and the old ones are dropped once the revocation is read; an earlier
// Revoke or Reschedule of the id (a record the reader already knows) never drops the new copy,
// even when it arrives before the reader has read the allow record: the reader then waits for
// a fence of its own sent after the copy arrived.
func TestRescheduleOrder(t *testing.T) {
	now := time.Now()
	allow := func(id, tag string) *amqp.Delivery {
		return &amqp.Delivery{Type: revlog.TypeAllow, Headers: amqp.Table{revlog.AtHeader: now.UnixMilli()},
			Body: revlog.Encode(nil, []revlog.Entry{{ID: id, Keep: tag}})}
	}
	const newTag = "r0123456789abcde"
	for _, earlier := range []struct {
		name string
		rec  []revlog.Entry // the record the reader knows before the Reschedule ("" none)
		old  string         // a copy it kept
	}{
		{"first reschedule", nil, "0000000000000001"},
		{"after a Revoke", []revlog.Entry{{ID: "x"}}, ""},
		{"after a Reschedule", []revlog.Entry{{ID: "x", Keep: "r000000000000001"}}, "r000000000000001"},
	} {
		t.Run(earlier.name, func(t *testing.T) {
			r := reader()
			echoFences(r)
			defer r.cancel()
			if earlier.rec != nil {
				r.apply(ptr(record(now, earlier.rec...)))
			}
			// The allow record is read before the new copy arrives.
			r.apply(allow("x", newTag))
			if got, err := r.Revoked(context.Background(), copyOf("x", newTag)); err != nil || got {
				t.Errorf("new copy after the allow record: Revoked = %v, %v; want kept", got, err)
			}
			if earlier.old != "" {
				if got, _ := r.Revoked(context.Background(), copyOf("x", earlier.old)); got {
					t.Errorf("old copy %q dropped before the revocation was written", earlier.old)
				}
			}
			// The revocation (step 3) is read: only the new copy is kept.
			r.apply(ptr(record(now, revlog.Entry{ID: "x", Keep: newTag})))
			if got, _ := r.Revoked(context.Background(), copyOf("x", newTag)); got {
				t.Error("new copy dropped by its own revocation")
			}
			if got, _ := r.Revoked(context.Background(), copyOf("x", "0000000000000001")); !got {
				t.Error("old plain copy kept after the revocation")
			}
			if got, _ := r.Revoked(context.Background(), copyOf("x", "r000000000000001")); !got {
				t.Error("old rescheduled copy kept after the revocation")
			}
		})
	}
	// The new copy (due at once) arrives before the reader has read the allow record, after an
	// earlier Revoke: Revoked waits for its own fence, which the stream delivers after the
	// allow record, and keeps the copy.
	r := reader()
	defer r.cancel()
	r.fenceReq = make(chan fenceReq, 1)
	r.self = "me"
	r.apply(ptr(record(now, revlog.Entry{ID: "x"})))
	done := make(chan bool, 1)
	go func() {
		got, err := r.Revoked(context.Background(), copyOf("x", newTag))
		if err != nil {
			t.Error(err)
		}
		done <- got
	}()
	req := <-r.fenceReq
	if req.seq == 0 {
		t.Fatal("the reader asked for a fence without a number")
	}
	// A fence of another reader, or an own fence numbered before the copy arrived, does not do.
	r.apply(&amqp.Delivery{Type: revlog.TypeFence, Headers: amqp.Table{revlog.AtHeader: now.UnixMilli() + 1000, revlog.ReaderHeader: "other", revlog.SeqHeader: int64(req.seq)}})
	select {
	case got := <-done:
		t.Fatalf("Revoked answered %v on another reader's fence", got)
	case <-time.After(20 * time.Millisecond):
	}
	r.apply(allow("x", newTag))
	r.apply(&amqp.Delivery{Type: revlog.TypeFence, Headers: amqp.Table{revlog.AtHeader: now.UnixMilli(), revlog.ReaderHeader: "me", revlog.SeqHeader: int64(req.seq)}})
	if got := <-done; got {
		t.Error("the new copy, arrived before its allow record was read, was dropped")
	}
	// A superseded rescheduled copy is dropped after the same wait.
	r.apply(ptr(record(now, revlog.Entry{ID: "x", Keep: "r00000000000000f"})))
	go func() {
		got, _ := r.Revoked(context.Background(), copyOf("x", newTag))
		done <- got
	}()
	req = <-r.fenceReq
	r.apply(&amqp.Delivery{Type: revlog.TypeFence, Headers: amqp.Table{revlog.AtHeader: now.UnixMilli(), revlog.ReaderHeader: "me", revlog.SeqHeader: int64(req.seq)}})
	if got := <-done; !got {
		t.Error("a rescheduled copy superseded by a later Reschedule was kept")
	}
	// An allow record of an id without a revocation revokes nothing and is not remembered.
	r2 := reader()
	r2.apply(allow("y", newTag))
	if n := r2.Stats().Known; n != 0 {
		t.Errorf("an allow record alone made %d ids known", n)
	}
}

// echoFences makes r read back every fence it asks for at once, as a stream with nothing
// unread would; it stops when r is closed.
func echoFences(r *Revocations) {
	r.self = "me"
	r.fenceReq = make(chan fenceReq, 1)
	go func() {
		for {
			select {
			case <-r.ctx.Done():
				return
			case req := <-r.fenceReq:
				r.apply(&amqp.Delivery{Type: revlog.TypeFence, Headers: amqp.Table{
					revlog.AtHeader: req.at, revlog.ReaderHeader: r.self, revlog.SeqHeader: int64(req.seq)}})
			}
		}
	}()
}

func ptr[T any](v T) *T { return &v }
