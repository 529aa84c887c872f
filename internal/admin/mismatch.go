package admin

import (
	"fmt"
	"maps"
	"slices"
	"strconv"

	"github.com/delaykit/rabbitdelay/internal/text"
)

// Mismatch is one property of an existing exchange or queue that differs from the plan's,
// typically an object deleted and declared again with another type, flag or argument. A
// passive declare does not compare them, and RabbitMQ cannot change them in place.
type Mismatch struct {
	Kind Kind   `json:"kind"`
	Name string `json:"name"`
	// Property is "type" (a queue's is its x-queue-type), "durable", "auto_delete",
	// "internal", "exclusive", or an argument's name.
	Property string `json:"property"`
	// Existing is the broker's value and Wanted the plan's, printed (numbers in decimal, "none"
	// for an absent argument; each followed by its type when both print alike).
	Existing string `json:"existing"`
	Wanted   string `json:"wanted"`
}

// String is `exchange "NAME" has type = direct, the plan wants fanout`.
func (m Mismatch) String() string {
	return fmt.Sprintf("%s %q has %s = %s, the plan wants %s", m.Kind, m.Name, m.Property, m.Existing, m.Wanted)
}

// countedQueueArgs change what happens to a queue's messages: one that a queue has and the plan
// lacks is a mismatch (others, such as x-queue-leader-locator, only place the queue).
var countedQueueArgs = map[string]bool{
	"x-message-ttl": true, "x-expires": true, "x-max-length": true, "x-max-length-bytes": true, "x-overflow": true,
	"x-dead-letter-exchange": true, "x-dead-letter-routing-key": true, "x-dead-letter-strategy": true,
	"x-delivery-limit": true, "x-max-age": true,
}

// exchangeMismatches compares an existing exchange with the plan's e: type, flags, and
// arguments both ways except extra ones on a target (the application's own business). Nil when
// they agree.
func exchangeMismatches(e Exchange, have *managedObject) []Mismatch {
	var out []Mismatch
	if have.Type != e.Type {
		out = append(out, newMismatch(KindExchange, e.Name, "type", have.Type, e.Type, true, true))
	}
	out = append(out, flagMismatches(KindExchange, e.Name, have, "internal", have.Internal)...)
	extra := e.Role != RoleTarget
	return append(out, argMismatches(KindExchange, e.Name, e.Args, have.Arguments, func(string) bool { return extra })...)
}

// queueMismatches compares an existing queue with the plan's q: flags, type, q's arguments and
// the countedQueueArgs it lacks. Nil when they agree.
func queueMismatches(q Queue, have *managedObject) []Mismatch {
	out := flagMismatches(KindQueue, q.Name, have, "exclusive", have.Exclusive)
	if got, want := queueType(have.Type, have.Arguments), queueType("", q.Args); got != want {
		out = append(out, newMismatch(KindQueue, q.Name, "type", got, want, true, true))
	}
	wanted := maps.Clone(q.Args)
	delete(wanted, "x-queue-type")
	return append(out, argMismatches(KindQueue, q.Name, wanted, have.Arguments, func(k string) bool { return countedQueueArgs[k] })...)
}

// flagMismatches compares durable (wanted true), auto_delete and the flag last (wanted false).
func flagMismatches(kind Kind, name string, have *managedObject, last string, lastSet bool) []Mismatch {
	var out []Mismatch
	for _, f := range []struct {
		prop string
		have bool
		bad  bool
	}{{"durable", have.Durable, !have.Durable}, {"auto_delete", have.AutoDelete, have.AutoDelete}, {last, lastSet, lastSet}} {
		if f.bad {
			out = append(out, newMismatch(kind, name, f.prop, f.have, !f.have, true, true))
		}
	}
	return out
}

// queueType is typ when set, else the x-queue-type argument, else classic (RabbitMQ's default).
func queueType(typ string, args map[string]any) string {
	if typ != "" {
		return typ
	}
	if t, ok := args["x-queue-type"].(string); ok && t != "" {
		return t
	}
	return "classic"
}

// argMismatches compares arguments in key order: every wanted key must be there with an equal
// value ([sameValue]); a key only the object has counts when counted says so.
func argMismatches(kind Kind, name string, wanted, have map[string]any, counted func(string) bool) []Mismatch {
	keys := slices.Collect(maps.Keys(wanted))
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

// newMismatch prints both values ("none" when absent), with their types when they print alike.
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

func showValue(v any) string {
	if f, ok := numeric(v); ok {
		return strconv.FormatFloat(f, 'f', -1, 64)
	}
	return fmt.Sprint(v)
}

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

// sameValue compares an argument value from the management API with the plan's: numbers by
// value, strings and bools as they are, anything else by its printed form.
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

// mismatchError is ErrUnhealthy naming the first mismatch and the fix; nil when none.
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
	it, tool, warn := "it", "management UI or API", ""
	if len(objects) > 1 {
		it = "them"
	}
	if queues > 0 {
		tool, warn = tool+", or rabbitmqctl delete_queue", "; deleting a queue deletes the messages it holds: move them elsewhere first"
	}
	fix := fmt.Sprintf("delete %s (%s) and run rabbitdelay apply, which declares %s again as planned", it, tool, it) + warn
	return fmt.Errorf("%w: %s of %s %s from the plan's (first: %s): such an object routes, keeps or "+
		"dead-letters messages otherwise than planned, and RabbitMQ cannot change it in place; %s",
		ErrUnhealthy, text.Plural(len(mm), "property"), text.Plural(len(objects), "existing object"),
		map[bool]string{true: "differs", false: "differ"}[len(mm) == 1], mm[0], fix)
}
