package admin

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/delaykit/rabbitdelay/internal/delayspec"
)

// queuesJSON4_3 is what RabbitMQ 4.3.6's GET /api/queues/%2F?columns=... answered (recorded
// while a consumer nack-requeued one message of loopq in a loop; loopparked has had no
// delivery, and 4.3.6 gives such a queue's message_stats as [] when asked for dotted columns).
const queuesJSON4_3 = `[{"delivery_limit":20,"messages":1,"messages_unacknowledged":0,"name":"loopparked","message_stats":[]},` +
	`{"delivery_limit":3,"message_stats":{"ack_details":{"rate":0.0},"deliver_get_details":{"rate":397.0},` +
	`"redeliver_details":{"rate":397.0}},"messages":1,"messages_unacknowledged":1,"name":"loopq","type":"quorum",` +
	`"arguments":{"x-delivery-limit":3,"x-queue-type":"quorum"}}]`

// TestQueuesRates: Management.Queues reads the redeliver, deliver and ack rates of the recorded
// answer, and -1 for a queue without statistics ([] or none).
func TestQueuesRates(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !strings.Contains(r.URL.RawQuery, "message_stats.redeliver_details.rate") {
			t.Errorf("columns asked: %s, want the redeliver rate", r.URL.RawQuery)
		}
		_, _ = w.Write([]byte(queuesJSON4_3))
	}))
	defer srv.Close()
	m, err := NewManagement(srv.URL, "/")
	if err != nil {
		t.Fatal(err)
	}
	qs, err := m.Queues(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if q := qs["loopq"]; q.RedeliverRate != 397 || q.DeliverRate != 397 || q.AckRate != 0 || q.Unacked != 1 || q.Messages != 1 {
		t.Errorf("loopq: %+v, want rates 397/397/0, 1 unacknowledged of 1", q)
	}
	if q := qs["loopparked"]; q.RedeliverRate != -1 || q.DeliverRate != -1 || q.AckRate != -1 {
		t.Errorf("loopparked (message_stats []): %+v, want rates -1", q)
	}
}

// TestRequeueLoopOf: each member of the kind "a ready queue, or the parking queue, redelivers
// in a loop that no delivery limit ends" is reported with its cause, and the cases a limit
// ends are not.
func TestRequeueLoopOf(t *testing.T) {
	quorum := Queue{Name: "r", Role: RoleReady, Args: map[string]any{"x-queue-type": "quorum", "x-delivery-limit": int64(20)}}
	classic := Queue{Name: "r", Role: RoleReady, Args: map[string]any{"x-queue-type": "classic"}}
	parkingQuorum := Queue{Name: "r", Role: RoleParking, Args: map[string]any{"x-queue-type": "quorum"}}
	parkingClassic := Queue{Name: "r", Role: RoleParking, Args: map[string]any{"x-queue-type": "classic"}}
	looping := func(typ string, limit bool) ManagedQueue {
		mq := ManagedQueue{Type: typ, Messages: 1, RedeliverRate: 700, DeliverRate: 700, AckRate: 0, Arguments: map[string]any{}}
		if limit {
			mq.Arguments["x-delivery-limit"] = 20
		}
		return mq
	}
	for _, c := range []struct {
		name    string
		q       Queue
		mq      ManagedQueue
		version string
		cause   string // "" for no loop
	}{
		{"4.3 quorum with a limit (nack does not count)", quorum, looping("quorum", true), "4.3.6", CauseNackNotCounted},
		{"4.4 quorum", quorum, looping("quorum", true), "4.4.0", CauseNackNotCounted},
		{"4.2 quorum with a limit (counted)", quorum, looping("quorum", true), "4.2.1", ""},
		{"3.10 quorum with a limit (counted)", quorum, looping("quorum", true), "3.10.8", ""},
		{"3.10 quorum without a limit", quorum, looping("quorum", false), "3.10.8", CauseNoLimit},
		{"4.0 quorum without a limit argument (default 20)", quorum, looping("quorum", false), "4.0.5", ""},
		{"3.10 classic", classic, looping("classic", false), "3.10.8", CauseClassic},
		{"4.3 classic", classic, looping("classic", false), "4.3.6", CauseClassic},
		{"type from the plan when the API does not say", classic, looping("", false), "3.10.8", CauseClassic},
		{"stream", quorum, looping("stream", false), "4.3.6", ""},
		{"slow redeliveries", quorum, ManagedQueue{Type: "quorum", Messages: 5, RedeliverRate: 0.4, DeliverRate: 0.4}, "4.3.6", ""},
		{"redeliveries a small part of the deliveries", quorum, ManagedQueue{Type: "quorum", Messages: 50, RedeliverRate: 3, DeliverRate: 900}, "4.3.6", ""},
		{"empty queue (the loop ended)", quorum, ManagedQueue{Type: "quorum", Messages: 0, RedeliverRate: 700, DeliverRate: 700}, "4.3.6", ""},
		{"no statistics", quorum, ManagedQueue{Type: "quorum", Messages: -1, RedeliverRate: -1, DeliverRate: -1}, "4.3.6", ""},
		{"unknown version, quorum with a limit", quorum, looping("quorum", true), "", ""},
		// The parking queue has no delivery limit (Plan.ForBroker: delivery-limit -1 on 4.x), on any version.
		{"parking, quorum, 3.10", parkingQuorum, looping("quorum", false), "3.10.8", CauseParking},
		{"parking, quorum, 4.0", parkingQuorum, looping("quorum", false), "4.0.5", CauseParking},
		{"parking, quorum, 4.3", parkingQuorum, looping("quorum", false), "4.3.6", CauseParking},
		{"parking, classic, 4.3", parkingClassic, looping("classic", false), "4.3.6", CauseParking},
		{"parking, slow redeliveries", parkingQuorum, ManagedQueue{Type: "quorum", Messages: 5, RedeliverRate: 0.4, DeliverRate: 0.4}, "4.3.6", ""},
		{"parking, empty", parkingQuorum, ManagedQueue{Type: "quorum", Messages: 0, RedeliverRate: 700, DeliverRate: 700}, "4.3.6", ""},
	} {
		loop, ok := RequeueLoopOf(c.q, c.mq, c.version)
		if ok != (c.cause != "") || loop.Cause != c.cause {
			t.Errorf("%s: loop %v cause %q, want cause %q", c.name, ok, loop.Cause, c.cause)
		}
		if ok && loop.Cause != CauseParking && (loop.Queue != "r" || !strings.Contains(loop.Advice("p.parking"), "p.parking")) {
			t.Errorf("%s: %+v, advice %q: want the queue and the parking queue named", c.name, loop, loop.Advice("p.parking"))
		}
		if want := map[bool]string{true: "parking", false: "ready"}[c.q.Role == RoleParking]; ok && loop.Kind() != want {
			t.Errorf("%s: Kind %q, want %q", c.name, loop.Kind(), want)
		}
		if ok && loop.Cause == CauseParking && (loop.Queue != "r" || !strings.Contains(loop.Advice("p.parking"), "cancel the reader's consumer")) {
			t.Errorf("%s: %+v, advice %q: want the queue named and how to leave messages parked", c.name, loop, loop.Advice("p.parking"))
		}
	}
}

// TestParseMessagesDelayed: the plugin's messages_delayed is read from the management API's view
// of one exchange. The plugin cannot run on any broker here (none of Debian's packages has it,
// and RabbitMQ 4.3 cannot load it), so this answer is composed, not recorded: the fields of
// GET /api/exchanges/<vhost>/<name> as RabbitMQ 3.10.8 answers for a headers exchange, plus
// messages_delayed, the item rabbit_exchange_type_delayed_message:info/2 adds to the
// exchange's information (rabbitmq-delayed-message-exchange, main branch), which the
// management UI reads as obj.messages_delayed (rabbitmq_management's formatters.js,
// fmt_features, 3.10.8).
func TestParseMessagesDelayed(t *testing.T) {
	const plugin = `{"arguments":{"x-delayed-type":"headers"},"auto_delete":false,"durable":true,"incoming":[],"internal":false,` +
		`"messages_delayed":6,"name":"rabbitdelay.plugin","outgoing":[],"type":"x-delayed-message",` +
		`"user_who_performed_action":"guest","vhost":"/"}`
	const headers = `{"arguments":{},"auto_delete":false,"durable":true,"incoming":[],"internal":false,"name":"rabbitdelay.dispatch",` +
		`"outgoing":[],"type":"headers","user_who_performed_action":"guest","vhost":"/"}`
	if n, ok, err := parseMessagesDelayed([]byte(plugin)); err != nil || !ok || n != 6 {
		t.Errorf("plugin exchange: %d %v %v, want 6", n, ok, err)
	}
	if n, ok, err := parseMessagesDelayed([]byte(headers)); err != nil || ok || n != 0 {
		t.Errorf("headers exchange: %d %v %v, want not found", n, ok, err)
	}
	for _, bad := range []string{`{"messages_delayed":-1}`, `{"messages_delayed":"x"}`, `{"messages_delayed":1.5}`, `[`} {
		if _, _, err := parseMessagesDelayed([]byte(bad)); err == nil {
			t.Errorf("%s: no error", bad)
		}
	}
	// Through the client: the exchange's own view, and 404 for an exchange that does not exist.
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.EscapedPath() {
		case "/api/exchanges/%2F/rabbitdelay.plugin":
			_, _ = w.Write([]byte(plugin))
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()
	m, err := NewManagement(srv.URL, "/")
	if err != nil {
		t.Fatal(err)
	}
	if n, ok, err := m.MessagesDelayed(context.Background(), "rabbitdelay.plugin"); err != nil || !ok || n != 6 {
		t.Errorf("MessagesDelayed: %d %v %v, want 6", n, ok, err)
	}
	if _, ok, err := m.MessagesDelayed(context.Background(), "gone"); err != nil || ok {
		t.Errorf("MessagesDelayed of a missing exchange: %v %v, want not found and no error", ok, err)
	}
}

// TestParseVersion reads RabbitMQ versions as the broker and --rabbitmq-version give them.
func TestParseVersion(t *testing.T) {
	for v, want := range map[string][3]int{"4.3.6": {4, 3, 1}, "3.10.8": {3, 10, 1}, "4": {4, 0, 1}, "3.13": {3, 13, 1},
		"4.3.0-rc.1": {4, 3, 1}, "4.3+": {4, 3, 1}, "": {0, 0, 0}, "x": {0, 0, 0}, "4.x": {0, 0, 0}} {
		major, minor, ok := ParseVersion(v)
		if got := [3]int{major, minor, map[bool]int{true: 1}[ok]}; got != want {
			t.Errorf("ParseVersion(%q) = %v, want %v", v, got, want)
		}
	}
}

// TestRecheckDeadLettering: a queue of the plan is reported in its dead-letter state only when
// both readings show messages there (the smaller count); one that emptied between them (a
// message in passing), one that filled only at the second reading, and a queue outside the plan
// are not, and nothing is read again when no queue of the plan held such messages.
func TestRecheckDeadLettering(t *testing.T) {
	p := mustPlan(t, delayspec.Spec{Targets: delayspec.Targets{{Name: "orders"}}, Buckets: delayspec.Delays{time.Second, 2 * time.Second, 3 * time.Second}})
	stuck, passing, later := p.Names.BucketQueue(1000), p.Names.BucketQueue(2000), p.Names.BucketQueue(3000)
	second := fmt.Sprintf(`[{"name":%q,"messages_dlx":2},{"name":%q,"messages_dlx":0},{"name":%q,"messages_dlx":4},{"name":"other","messages_dlx":9}]`,
		stuck, passing, later)
	reads := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		reads++
		_, _ = w.Write([]byte(second))
	}))
	defer srv.Close()
	m, err := NewManagement(srv.URL, "/")
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	v := &statusView{queues: map[string]ManagedQueue{stuck: {MessagesDLX: 3}, passing: {MessagesDLX: 1}, later: {MessagesDLX: 0}, "other": {MessagesDLX: 9}}}
	if err := v.recheckDeadLettering(ctx, m, p, time.Millisecond); err != nil || reads != 1 {
		t.Fatalf("recheck: %v after %d readings, want one", err, reads)
	}
	for q, want := range map[string]int64{stuck: 2, passing: 0, later: 0} {
		if got := v.stillDeadLettering(q, v.queues[q].MessagesDLX); got != want {
			t.Errorf("%s: %d still in dead-letter state, want %d", q, got, want)
		}
	}
	quiet := &statusView{queues: map[string]ManagedQueue{stuck: {MessagesDLX: 0}, "other": {MessagesDLX: 9}}}
	if err := quiet.recheckDeadLettering(ctx, m, p, time.Hour); err != nil || reads != 1 || quiet.dlxAgain != nil {
		t.Errorf("recheck with no queue of the plan in dead-letter state: %v, %d readings, want none", err, reads)
	}
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	v = &statusView{queues: map[string]ManagedQueue{stuck: {MessagesDLX: 1}}}
	if err := v.recheckDeadLettering(cancelled, m, p, time.Hour); !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), stuck) {
		t.Errorf("recheck with its context ended: %v, want context.Canceled naming %s", err, stuck)
	}
}
