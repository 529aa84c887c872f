package admin

import (
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/delaykit/rabbitdelay/internal/delayspec"
)

// TestExchangeMismatches: each property of an existing exchange that differs from the plan's
// is one Mismatch; an exchange as planned gives none, whatever the JSON type of its numbers.
func TestExchangeMismatches(t *testing.T) {
	entry := Exchange{Name: "p.ladder.04.03.last.entry", Type: amqp.ExchangeFanout, Role: RoleLadder}
	dispatch := Exchange{Name: "p.dispatch", Type: amqp.ExchangeHeaders, Args: amqp.Table{"alternate-exchange": "p.unroutable"}}
	plugin := Exchange{Name: "p.plugin", Type: PluginExchangeType, Args: amqp.Table{"x-delayed-type": "headers"}}
	numbered := Exchange{Name: "p.n", Type: amqp.ExchangeFanout, Args: amqp.Table{"x-n": int64(7)}}
	target := Exchange{Name: "orders", Type: amqp.ExchangeTopic, Role: RoleTarget}
	ok := func(typ string, args map[string]any) *managedObject {
		return &managedObject{Type: typ, Durable: true, Arguments: args}
	}
	tests := []struct {
		name string
		e    Exchange
		have *managedObject
		want []Mismatch
	}{
		{"as planned", entry, ok("fanout", nil), nil},
		{"as planned with arguments", dispatch, ok("headers", map[string]any{"alternate-exchange": "p.unroutable"}), nil},
		{"json.Number equals int64", numbered, ok("fanout", map[string]any{"x-n": json.Number("7")}), nil},
		{"float64 equals int64", numbered, ok("fanout", map[string]any{"x-n": float64(7)}), nil},
		{"type", entry, ok("direct", nil),
			[]Mismatch{{KindExchange, entry.Name, "type", "direct", "fanout"}}},
		{"topic", entry, ok("topic", nil),
			[]Mismatch{{KindExchange, entry.Name, "type", "topic", "fanout"}}},
		{"internal", entry, &managedObject{Type: "fanout", Durable: true, Internal: true},
			[]Mismatch{{KindExchange, entry.Name, "internal", "true", "false"}}},
		{"not durable", entry, &managedObject{Type: "fanout"},
			[]Mismatch{{KindExchange, entry.Name, "durable", "false", "true"}}},
		{"auto_delete", entry, &managedObject{Type: "fanout", Durable: true, AutoDelete: true},
			[]Mismatch{{KindExchange, entry.Name, "auto_delete", "true", "false"}}},
		{"argument missing", dispatch, ok("headers", nil),
			[]Mismatch{{KindExchange, dispatch.Name, "alternate-exchange", "none", "p.unroutable"}}},
		{"argument differs", plugin, ok(PluginExchangeType, map[string]any{"x-delayed-type": "direct"}),
			[]Mismatch{{KindExchange, plugin.Name, "x-delayed-type", "direct", "headers"}}},
		{"extra argument", entry, ok("fanout", map[string]any{"alternate-exchange": "elsewhere"}),
			[]Mismatch{{KindExchange, entry.Name, "alternate-exchange", "elsewhere", "none"}}},
		{"a target's own argument", target, ok("topic", map[string]any{"alternate-exchange": "mine"}), nil},
		{"a target's type", target, ok("direct", map[string]any{"alternate-exchange": "mine"}),
			[]Mismatch{{KindExchange, target.Name, "type", "direct", "topic"}}},
		{"number differs", numbered, ok("fanout", map[string]any{"x-n": json.Number("8")}),
			[]Mismatch{{KindExchange, numbered.Name, "x-n", "8", "7"}}},
		{"number as a string", numbered, ok("fanout", map[string]any{"x-n": "7"}),
			[]Mismatch{{KindExchange, numbered.Name, "x-n", "7 (string)", "7 (number)"}}},
		{"everything", dispatch, &managedObject{Type: "direct", AutoDelete: true, Internal: true, Arguments: map[string]any{"x-other": true}},
			[]Mismatch{
				{KindExchange, dispatch.Name, "type", "direct", "headers"},
				{KindExchange, dispatch.Name, "durable", "false", "true"},
				{KindExchange, dispatch.Name, "auto_delete", "true", "false"},
				{KindExchange, dispatch.Name, "internal", "true", "false"},
				{KindExchange, dispatch.Name, "alternate-exchange", "none", "p.unroutable"},
				{KindExchange, dispatch.Name, "x-other", "true", "none"},
			}},
	}
	for _, tt := range tests {
		if got := exchangeMismatches(tt.e, tt.have); !slices.Equal(got, tt.want) {
			t.Errorf("%s: exchangeMismatches = %v, want %v", tt.name, got, tt.want)
		}
	}
}

// TestQueueMismatches: each property of an existing queue that differs from the plan's is one
// Mismatch; an extra argument counts only when it changes what happens to messages.
func TestQueueMismatches(t *testing.T) {
	quorum, err := NewPlan(delayspec.Spec{Prefix: "p", Targets: delayspec.Targets{{Name: "orders"}}, Plugin: delayspec.PluginOff, QueueType: delayspec.Quorum})
	if err != nil {
		t.Fatal(err)
	}
	classic, err := NewPlan(delayspec.Spec{Prefix: "p", Targets: delayspec.Targets{{Name: "orders"}}, Plugin: delayspec.PluginOff, QueueType: delayspec.Classic})
	if err != nil {
		t.Fatal(err)
	}
	delay := quorum.DelayQueues()[0] // x-queue-type quorum, x-message-ttl, x-dead-letter-*, x-overflow
	classicDelay := classic.DelayQueues()[0]
	parking, _ := classic.Queue(classic.Names.Parking()) // classic: no arguments
	ttl := delay.TTL
	// asJSON is q's arguments as the management API gives them (numbers as json.Number).
	asJSON := func(q Queue, change map[string]any) map[string]any {
		out := map[string]any{}
		for k, v := range q.Args {
			if n, ok := v.(int64); ok {
				v = json.Number(showValue(n))
			}
			out[k] = v
		}
		for k, v := range change {
			if v == nil {
				delete(out, k)
			} else {
				out[k] = v
			}
		}
		return out
	}
	as := func(typ string, args map[string]any) *managedObject {
		return &managedObject{Type: typ, Durable: true, Arguments: args}
	}
	ttlStr := showValue(ttl)
	tests := []struct {
		name string
		q    Queue
		have *managedObject
		want []Mismatch
	}{
		{"quorum as planned", delay, as("quorum", asJSON(delay, nil)), nil},
		{"float64 ttl equals int64", delay, as("quorum", asJSON(delay, map[string]any{"x-message-ttl": float64(ttl)})), nil},
		{"classic as planned", classicDelay, as("classic", asJSON(classicDelay, nil)), nil},
		{"classic without a type column", parking, as("", nil), nil},
		{"classic with x-queue-type classic", parking, as("classic", map[string]any{"x-queue-type": "classic"}), nil},
		{"placement argument ignored", delay, as("quorum", asJSON(delay, map[string]any{"x-queue-leader-locator": "balanced"})), nil},
		{"other ttl", delay, as("quorum", asJSON(delay, map[string]any{"x-message-ttl": json.Number("1234")})),
			[]Mismatch{{KindQueue, delay.Name, "x-message-ttl", "1234", ttlStr}}},
		{"no dead-letter exchange", delay, as("quorum", asJSON(delay, map[string]any{"x-dead-letter-exchange": nil})),
			[]Mismatch{{KindQueue, delay.Name, "x-dead-letter-exchange", "none", delay.DeadLetterExchange}}},
		{"x-max-length added", delay, as("quorum", asJSON(delay, map[string]any{"x-max-length": json.Number("10")})),
			[]Mismatch{{KindQueue, delay.Name, "x-max-length", "10", "none"}}},
		{"x-expires added", parking, as("classic", map[string]any{"x-expires": json.Number("60000")}),
			[]Mismatch{{KindQueue, parking.Name, "x-expires", "60000", "none"}}},
		{"x-dead-letter-routing-key added", delay, as("quorum", asJSON(delay, map[string]any{"x-dead-letter-routing-key": "k"})),
			[]Mismatch{{KindQueue, delay.Name, "x-dead-letter-routing-key", "k", "none"}}},
		{"classic instead of quorum", delay, as("classic", asJSON(delay, map[string]any{"x-queue-type": "classic",
			"x-dead-letter-strategy": nil, "x-overflow": nil})),
			[]Mismatch{
				{KindQueue, delay.Name, "type", "classic", "quorum"},
				{KindQueue, delay.Name, "x-dead-letter-strategy", "none", "at-least-once"},
				{KindQueue, delay.Name, "x-overflow", "none", "reject-publish"},
			}},
		{"quorum instead of classic", parking, as("quorum", map[string]any{"x-queue-type": "quorum"}),
			[]Mismatch{{KindQueue, parking.Name, "type", "quorum", "classic"}}},
		{"x-queue-type argument without a type column", parking, as("", map[string]any{"x-queue-type": "stream"}),
			[]Mismatch{{KindQueue, parking.Name, "type", "stream", "classic"}}},
		{"not durable", parking, &managedObject{Type: "classic"},
			[]Mismatch{{KindQueue, parking.Name, "durable", "false", "true"}}},
		{"auto_delete", parking, &managedObject{Type: "classic", Durable: true, AutoDelete: true},
			[]Mismatch{{KindQueue, parking.Name, "auto_delete", "true", "false"}}},
		{"exclusive", parking, &managedObject{Type: "classic", Durable: true, Exclusive: true},
			[]Mismatch{{KindQueue, parking.Name, "exclusive", "true", "false"}}},
	}
	for _, tt := range tests {
		if got := queueMismatches(tt.q, tt.have); !slices.Equal(got, tt.want) {
			t.Errorf("%s: queueMismatches = %v, want %v", tt.name, got, tt.want)
		}
	}
}

// TestSameValue: numbers compare by value whatever their Go type; strings and bools as they
// are; a number never equals a string.
func TestSameValue(t *testing.T) {
	tests := []struct {
		have, want any
		same       bool
	}{
		{float64(315360000000), int64(315360000000), true},
		{json.Number("315360000000"), int64(315360000000), true},
		{json.Number("3.1536e+11"), int64(315360000000), true},
		{float64(2000), int64(2001), false},
		{json.Number("2000.5"), int64(2000), false},
		{"2000", int64(2000), false},
		{int64(2000), "2000", false},
		{"quorum", "quorum", true},
		{"quorum", "classic", false},
		{true, true, true},
		{true, false, false},
		{"true", true, false},
	}
	for _, tt := range tests {
		if got := sameValue(tt.have, tt.want); got != tt.same {
			t.Errorf("sameValue(%#v, %#v) = %v, want %v", tt.have, tt.want, got, tt.same)
		}
	}
}

// TestMismatchError: the error names the first mismatch and the fix, and says that deleting a
// queue deletes its messages only when a queue is among the objects.
func TestMismatchError(t *testing.T) {
	if err := mismatchError(nil); err != nil {
		t.Errorf("no mismatches: %v", err)
	}
	x := Mismatch{KindExchange, "p.e", "type", "direct", "fanout"}
	err := mismatchError([]Mismatch{x})
	if !errors.Is(err, ErrUnhealthy) || !strings.Contains(err.Error(), `exchange "p.e" has type = direct, the plan wants fanout`) ||
		!strings.Contains(err.Error(), "rabbitdelay apply") || strings.Contains(err.Error(), "messages it holds") {
		t.Errorf("exchange mismatch: %v", err)
	}
	q := Mismatch{KindQueue, "p.q", "x-message-ttl", "1", "2"}
	err = mismatchError([]Mismatch{x, q})
	if !errors.Is(err, ErrUnhealthy) || !strings.Contains(err.Error(), "2 properties of 2 existing objects") ||
		!strings.Contains(err.Error(), "deletes the messages it holds") {
		t.Errorf("two mismatches: %v", err)
	}
}
