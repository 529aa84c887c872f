package declare

import (
	"errors"
	"strings"
	"testing"

	"github.com/delaykit/rabbitdelay/internal/admin"
	"github.com/delaykit/rabbitdelay/internal/delayspec"
)

// TestPluginText: on RabbitMQ 4.3 and later, which cannot load the delayed-message plugin,
// status says the plugin path is unavailable and the ladder carries every delay; before 4.3 it
// says only whether the broker has it.
func TestPluginText(t *testing.T) {
	for _, c := range []struct {
		mode    delayspec.PluginMode
		avail   bool
		err     error
		version string
		want    string
	}{
		{delayspec.PluginAuto, false, nil, "4.3.6", "unavailable: RabbitMQ 4.3.6 cannot load the delayed-message plugin"},
		{delayspec.PluginAuto, false, nil, "4.4.0", "the ladder and buckets carry every delay"},
		{delayspec.PluginOn, false, nil, "4.3.6", "NOT AVAILABLE, but --plugin on: RabbitMQ 4.3.6 cannot load"},
		{delayspec.PluginAuto, false, nil, "4.2.1", "not available (the ladder and buckets work without it)"},
		{delayspec.PluginAuto, false, nil, "3.10.8", "not available (the ladder and buckets work without it)"},
		{delayspec.PluginAuto, true, nil, "3.10.8", "available"},
		{delayspec.PluginOn, false, nil, "3.10.8", "NOT AVAILABLE, but --plugin on"},
		{delayspec.PluginOff, false, nil, "4.3.6", "off (--plugin off)"},
		{delayspec.PluginAuto, false, errors.New("boom"), "4.3.6", "unknown (boom)"},
	} {
		if got := pluginText(c.mode, c.avail, c.err, c.version); !strings.HasPrefix(got, c.want) && !strings.Contains(got, c.want) {
			t.Errorf("pluginText(%v, %v, %v, %q) = %q, want %q", c.mode, c.avail, c.err, c.version, got, c.want)
		}
	}
}

// TestPrintStatusCompact: the table form puts the problems first, then the parking queue,
// then one line per ladder level (not per queue), then the buckets and targets; it shows the
// plugin exchange's count when known; --queues prints one line per queue. The report is built
// here (pure formatting; the integration tests run status against brokers).
func TestPrintStatusCompact(t *testing.T) {
	spec := delayspec.Spec{Prefix: "rd", Targets: delayspec.Targets{{Name: "orders", Type: "topic"}}, Buckets: delayspec.Delays{30e9},
		ReadyQueues: delayspec.ReadyQueues{{Queue: "orders.ready", Exchange: "orders", BindingKey: "k"}}}
	p, err := admin.NewPlan(spec)
	if err != nil {
		t.Fatal(err)
	}
	rep := &admin.StatusReport{Management: true, Version: "3.10.8", PluginMessagesDelayed: 6}
	for _, x := range p.Exchanges {
		rep.Exchanges = append(rep.Exchanges, admin.ExchangeStatus{Exchange: x, Exists: true})
	}
	for _, q := range p.Queues {
		s := admin.QueueStatus{Queue: q, Exists: true, Messages: 0, MessagesDLX: 0}
		if q.Role == admin.RoleParking {
			s.Ready, s.Messages = 1, 1
		}
		rep.Queues = append(rep.Queues, s)
	}
	rep.ConsumedDelayQueues = []string{p.DelayQueues()[0].Name}
	problem := errors.New("consumers on delay queues")
	var out strings.Builder
	printStatus(&out, statusView{p: p, rep: rep, err: problem, plugin: "available", vhost: "/"})
	got := out.String()
	order := []string{"PROBLEMS:", "CONSUMERS ON DELAY QUEUES", "parking queue rd.parking: 1 message (1 ready)",
		"plugin exchange rd.plugin: holds 6 delayed messages", "ladder level 0", "ladder level 7", "bucket 30s", "target orders: exists",
		"ready queue orders.ready: 0 messages", "status: NOT OK"}
	at := 0
	for _, w := range order {
		i := strings.Index(got[at:], w)
		if i < 0 {
			t.Fatalf("status output lacks %q after position %d (want, in order, %q):\n%s", w, at, order, got)
		}
		at += i + len(w)
	}
	if n := strings.Count(got, "\n"); n > 60 {
		t.Errorf("compact status has %d lines, want one per level, not per queue:\n%s", n, got)
	}
	if strings.Contains(got, p.DelayQueues()[1].Name) {
		t.Errorf("compact status names a delay queue without a problem:\n%s", got)
	}
	out.Reset()
	printStatus(&out, statusView{p: p, rep: rep, err: problem, plugin: "available", vhost: "/", queues: true})
	for _, q := range p.DelayQueues() {
		if !strings.Contains(out.String(), q.Name+" ") {
			t.Fatalf("status --queues lacks the line of %s", q.Name)
		}
	}
	// Without the management API the table has no message columns, and so no "?" to explain.
	noMgmt := *rep
	noMgmt.Management = false
	noMgmt.Queues = nil
	for _, q := range rep.Queues {
		q.Messages, q.MessagesDLX = -1, -1
		noMgmt.Queues = append(noMgmt.Queues, q)
	}
	out.Reset()
	printStatus(&out, statusView{p: p, rep: &noMgmt, err: problem, plugin: "available", vhost: "/", queues: true})
	if strings.Contains(out.String(), statusUnknownNote) || strings.Contains(out.String(), "?") {
		t.Errorf("status --queues without the management API explains a \"?\" it does not show:\n%s", out.String())
	}
}
