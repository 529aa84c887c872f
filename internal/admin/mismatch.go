package admin

import (
	"fmt"
	"slices"
	"strconv"

	"github.com/delaykit/rabbitdelay/internal/text"
)

// Mismatch is one property of an existing exchange or queue that differs from what the plan
// declares: typically the object was deleted and declared again by hand or by another program
// with another type, flag or argument. RabbitMQ answers a passive declare without comparing
// these, and cannot change them in place: the object has to be deleted and declared again
// (declare apply does that once it is gone).
type Mismatch struct {
	// Kind is KindExchange or KindQueue.
	Kind Kind `json:"kind"`
	// Name is the object's name.
	Name string `json:"name"`
	// Property is what differs: "type" (an exchange's type, or a queue's type: quorum,
	// classic or stream, which a queue declares with its x-queue-type argument),
	// "durable", "auto_delete", "internal" (exchanges), "exclusive" (queues), or an
	// argument's name (x-message-ttl, alternate-exchange, ...).
	Property string `json:"property"`
	// Existing is the broker's value and Wanted the plan's, printed: numbers in decimal
	// (x-message-ttl in milliseconds), "none" for an argument the object lacks. When both
	// print alike they differ in type, and each is followed by its type ("2000 (string)").
	Existing string `json:"existing"`
	Wanted   string `json:"wanted"`
}

// String is `exchange "NAME" has type = direct, the plan wants fanout`.
func (m Mismatch) String() string {
	return fmt.Sprintf("%s %q has %s = %s, the plan wants %s", m.Kind, m.Name, m.Property, m.Existing, m.Wanted)
}

// countedQueueArgs are the queue arguments that change what happens to a queue's messages:
// one that a queue has and the plan lacks is a mismatch. Others (x-queue-leader-locator,
// x-quorum-initial-group-size, ...) place the queue or are added by the broker, and are not
// compared unless the plan has them. x-queue-type is compared as the queue's type.
var countedQueueArgs = map[string]bool{
	"x-message-ttl": true, "x-expires": true, "x-max-length": true, "x-max-length-bytes": true, "x-overflow": true,
	"x-dead-letter-exchange": true, "x-dead-letter-routing-key": true, "x-dead-letter-strategy": true,
	"x-delivery-limit": true, "x-max-age": true,
}

// exchangeMismatches compares an existing exchange (as the management API reports it) with
// the plan's e: its type; durable (true), auto_delete and internal (false); every argument
// of e, and every argument the exchange has that e lacks, except on a target exchange (an
// application's own exchange, whose alternate-exchange, say, is its business: the policy
// checks report what one does to due messages). Nil when they agree.
func exchangeMismatches(e Exchange, have *vhostObject) []Mismatch {
	var out []Mismatch
	add := func(prop string, existing, wanted any, present bool) {
		out = append(out, newMismatch(KindExchange, e.Name, prop, existing, wanted, present, true))
	}
	if have.Type != e.Type {
		add("type", have.Type, e.Type, true)
	}
	if !have.Durable {
		add("durable", false, true, true)
	}
	if have.AutoDelete {
		add("auto_delete", true, false, true)
	}
	if have.Internal {
		add("internal", true, false, true)
	}
	extra := e.Role != RoleTarget
	return append(out, argMismatches(KindExchange, e.Name, e.Args, have.Arguments, func(string) bool { return extra })...)
}

// queueMismatches compares an existing queue (as the management API reports it) with the
// plan's q: durable (true), auto_delete and exclusive (false), the queue type (q's
// x-queue-type argument, classic when it has none), every argument of q, and the arguments
// of countedQueueArgs that the queue has and q lacks. Nil when they agree.
func queueMismatches(q Queue, have *vhostObject) []Mismatch {
	var out []Mismatch
	add := func(prop string, existing, wanted any) {
		out = append(out, newMismatch(KindQueue, q.Name, prop, existing, wanted, true, true))
	}
	if !have.Durable {
		add("durable", false, true)
	}
	if have.AutoDelete {
		add("auto_delete", true, false)
	}
	if have.Exclusive {
		add("exclusive", true, false)
	}
	if got, want := queueType(have.Type, have.Arguments), queueType("", q.Args); got != want {
		add("type", got, want)
	}
	wanted := make(map[string]any, len(q.Args))
	for k, v := range q.Args {
		if k != "x-queue-type" {
			wanted[k] = v
		}
	}
	return append(out, argMismatches(KindQueue, q.Name, wanted, have.Arguments, func(k string) bool { return countedQueueArgs[k] })...)
}

// queueType is a queue's type: typ when set (the management API's type column), else its
// x-queue-type argument, else classic (RabbitMQ's default).
func queueType(typ string, args map[string]any) string {
	if typ != "" {
		return typ
	}
	if t, ok := args["x-queue-type"].(string); ok && t != "" {
		return t
	}
	return "classic"
}

// argMismatches compares the arguments an object has with the ones it should have: every
// wanted key must be there with an equal value ([sameValue]); a key only the object has is a
// mismatch when counted says so. In key order.
func argMismatches(kind Kind, name string, wanted, have map[string]any, counted func(string) bool) []Mismatch {
	keys := make([]string, 0, len(wanted)+len(have))
	for k := range wanted {
		keys = append(keys, k)
	}
	for k := range have {
		if _, ok := wanted[k]; !ok && counted(k) {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	var out []Mismatch
	for _, k := range keys {
		w, inPlan := wanted[k]
		h, exists := have[k]
		switch {
		case !inPlan:
			out = append(out, newMismatch(kind, name, k, h, nil, true, false))
		case !exists:
			out = append(out, newMismatch(kind, name, k, nil, w, false, true))
		case !sameValue(h, w):
			out = append(out, newMismatch(kind, name, k, h, w, true, true))
		}
	}
	return out
}

// newMismatch prints the existing and wanted values ("none" for one that is absent), with
// their types when they print alike.
func newMismatch(kind Kind, name, prop string, existing, wanted any, hasExisting, hasWanted bool) Mismatch {
	e, w := "none", "none"
	if hasExisting {
		e = showValue(existing)
	}
	if hasWanted {
		w = showValue(wanted)
	}
	if e == w && hasExisting && hasWanted {
		e += " (" + valueType(existing) + ")"
		w += " (" + valueType(wanted) + ")"
	}
	return Mismatch{Kind: kind, Name: name, Property: prop, Existing: e, Wanted: w}
}

// showValue prints an argument value: numbers in decimal whatever their Go type.
func showValue(v any) string {
	if f, ok := numeric(v); ok {
		return strconv.FormatFloat(f, 'f', -1, 64)
	}
	return fmt.Sprint(v)
}

// valueType names the kind of an argument value: number, string, bool, or its Go type.
func valueType(v any) string {
	if _, ok := numeric(v); ok {
		return "number"
	}
	switch v.(type) {
	case string:
		return "string"
	case bool:
		return "bool"
	}
	return fmt.Sprintf("%T", v)
}

// sameValue reports whether an argument value as the management API gives it (numbers as
// json.Number) equals the plan's (numbers as int64): numbers by value ([numeric]), strings
// and bools as they are, anything else by its printed form.
func sameValue(have, want any) bool {
	a, haveNum := numeric(have)
	b, wantNum := numeric(want)
	if haveNum || wantNum {
		return haveNum && wantNum && a == b
	}
	switch w := want.(type) {
	case string:
		h, ok := have.(string)
		return ok && h == w
	case bool:
		h, ok := have.(bool)
		return ok && h == w
	}
	return fmt.Sprint(have) == fmt.Sprint(want)
}

// mismatchError is ErrUnhealthy naming the first of the mismatched properties and what to do,
// or nil when there are none.
func mismatchError(mm []Mismatch) error {
	if len(mm) == 0 {
		return nil
	}
	objects, queues := map[string]bool{}, 0
	for _, m := range mm {
		key := string(m.Kind) + " " + m.Name
		if !objects[key] && m.Kind == KindQueue {
			queues++
		}
		objects[key] = true
	}
	first := mm[0]
	it, tool := "it", "management UI or API"
	if len(objects) > 1 {
		it = "them"
	}
	if queues > 0 {
		tool += ", or rabbitmqctl delete_queue"
	}
	fix := fmt.Sprintf("delete %s (%s) and run rabbitdelay apply, which declares %s again as planned", it, tool, it)
	if queues > 0 {
		fix += "; deleting a queue deletes the messages it holds: move them elsewhere first"
	}
	return fmt.Errorf("%w: %s of %s %s from the plan's (first: %s): such an object routes, keeps or "+
		"dead-letters messages otherwise than planned, and RabbitMQ cannot change it in place; %s",
		ErrUnhealthy, text.Plural(len(mm), "property"), text.Plural(len(objects), "existing object"),
		map[bool]string{true: "differs", false: "differ"}[len(mm) == 1], first, fix)
}
