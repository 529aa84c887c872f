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
	r.fenceReq = make(chan int64, 1)
	done := make(chan error, 1)
	go func() { done <- r.wait(context.Background(), 1000) }()
	at := <-r.fenceReq // the waiter asked for a fence
	if at < 1000 {
		t.Fatalf("fence time %d, below the time needed", at)
	}
	r.apply(&amqp.Delivery{Type: revlog.TypeFence, Headers: amqp.Table{revlog.AtHeader: at}})
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := r.wait(ctx, at+1); err == nil {
		t.Error("a wait for a time after the last fence returned without a new fence")
	}
	r.cancel()
	if err := r.wait(context.Background(), at+2); err != ErrClosed {
		t.Errorf("wait after close = %v, want ErrClosed", err)
	}
}

func ptr[T any](v T) *T { return &v }
