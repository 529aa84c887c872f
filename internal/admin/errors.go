package admin

import (
	"errors"
	"fmt"
	"regexp"
	"strings"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/delaykit/rabbitdelay/internal/text"
	"github.com/delaykit/rabbitdelay/plugin"
)

// Sentinel errors, wrapped with %w; a broker refusal stays reachable with
// errors.As(err, **amqp091.Error).
var (
	// ErrConflict: an object exists with other arguments than the plan's (406
	// PRECONDITION_FAILED); see [ConflictError].
	ErrConflict = errors.New("topology: object exists with different arguments")
	// ErrTargetMissing: an exchange the topology binds to but does not declare does not exist.
	ErrTargetMissing = errors.New("topology: exchange does not exist")
	// ErrNotEmpty: teardown refused because delay or parking queues hold messages.
	ErrNotEmpty = errors.New("topology: queues hold messages")
	// ErrCannotCount: teardown without Force and without the management API met quorum
	// queues, whose unacknowledged and dead-letter-state messages AMQP cannot count.
	ErrCannotCount = errors.New("topology: cannot count every message without the management API")
	// ErrIncomplete: status found objects of the plan missing.
	ErrIncomplete = errors.New("topology: topology incomplete")
	// ErrPluginUnavailable: plugin mode is on and the broker has no delayed-message plugin
	// (it is [plugin.ErrUnavailable]).
	ErrPluginUnavailable = plugin.ErrUnavailable
	// ErrPolicy: a policy in effect on the topology breaks a guarantee; see [PolicyProblem].
	ErrPolicy = errors.New("topology: a policy in effect breaks a guarantee")
	// ErrUnhealthy: status found a state that breaks a guarantee ([Mismatch], consumers on
	// delay queues, messages stuck in dead-letter state, unplanned bindings, ...).
	ErrUnhealthy = errors.New("topology: topology unhealthy")
	// ErrAccessRefused: the broker refused an operation (403 ACCESS_REFUSED).
	ErrAccessRefused = errors.New("topology: access refused")
)

// ConflictError is a 406 PRECONDITION_FAILED "inequivalent arg" answer: an object exists with
// another value of Argument (the first that differs) than the plan's. It wraps ErrConflict
// and the *amqp091.Error.
type ConflictError struct {
	Kind     string // "queue" or "exchange"
	Name     string
	Argument string // x-message-ttl, x-queue-type, type, durable, ...
	// Existing and Wanted are as the broker describes them ("2000 (long)"; "none" if absent).
	Existing, Wanted string
	Err              *amqp.Error
}

// Error names the object, what differs, and the fix.
func (e *ConflictError) Error() string {
	var fix string
	if e.Kind == "exchange" {
		fix = fmt.Sprintf("RabbitMQ cannot change an exchange in place, and apply never deletes an exchange: either make the specification match what was declared before (prefix, ladder, order, queue type, target types), or delete the exchange %q yourself (the management UI, or DELETE /api/exchanges/<vhost>/<name> of its HTTP API: rabbitmqctl has no command for it; its bindings go with it) and run apply again", e.Name)
	} else {
		fix = fmt.Sprintf("RabbitMQ cannot change a queue's arguments in place, and apply never deletes a queue: either make the specification match what was declared before (prefix, ladder unit/radix/max/order, queue type), or move its messages elsewhere, delete the queue yourself (rabbitmqctl delete_queue %q) and run apply again", e.Name)
	}
	return fmt.Sprintf("%v: %s %q exists with %s = %s, this topology wants %s. %s",
		ErrConflict, e.Kind, e.Name, e.Argument, e.Existing, e.Wanted, fix)
}

// Unwrap returns ErrConflict and the broker's error.
func (e *ConflictError) Unwrap() []error { return []error{ErrConflict, e.Err} }

// inequivalentRE, receivedRE and valueRE read the broker's 406 text ("inequivalent arg 'x' for
// queue 'q' in vhost 'v': received the value '1000' of type 'long' but current is ..."), which
// is cut at 255 bytes: missing values are filled in by [ConflictError.fill].
var inequivalentRE = regexp.MustCompile(`inequivalent arg '([^']*)' for (queue|exchange) '([^']*)'`)
var receivedRE = regexp.MustCompile(`in vhost '[^']*': received (.*) but current is (.*)$`)
var valueRE = regexp.MustCompile(`^the value '(.*)' of type '([^']*)'$`)

const unknownValue = "(not in the broker's message, which RabbitMQ cuts at 255 bytes)"

// parseConflict turns a 406 "inequivalent arg" answer into a ConflictError (nil otherwise).
func parseConflict(err error) *ConflictError {
	var ae *amqp.Error
	if !errors.As(err, &ae) || ae.Code != amqp.PreconditionFailed {
		return nil
	}
	m := inequivalentRE.FindStringSubmatch(ae.Reason)
	if m == nil {
		return nil
	}
	c := &ConflictError{Kind: m[2], Name: m[3], Argument: m[1], Wanted: unknownValue, Existing: unknownValue, Err: ae}
	if r := receivedRE.FindStringSubmatch(ae.Reason); r != nil {
		c.Wanted, c.Existing = brokerValue(r[1]), brokerValue(r[2])
	}
	return c
}

// fill completes values the broker's message lacked: the wanted one from what was declared,
// the existing one from the management API's view (nil: unknown).
func (c *ConflictError) fill(wanted amqp.Table, typ string, existing map[string]any) {
	if c.Wanted == unknownValue {
		switch {
		case c.Argument == "type":
			c.Wanted = typ
		case c.Argument == "durable":
			c.Wanted = "true"
		case wanted[c.Argument] != nil:
			c.Wanted = fmt.Sprint(wanted[c.Argument])
		default:
			c.Wanted = "none"
		}
	}
	if c.Existing == unknownValue && existing != nil {
		if v, ok := existing[c.Argument]; ok {
			c.Existing = fmt.Sprint(v)
		} else if c.Argument != "type" && c.Argument != "durable" {
			c.Existing = "none"
		}
	}
}

// brokerValue rewrites "the value '2000' of type 'long'" as "2000 (long)", "'true'" as "true".
func brokerValue(s string) string {
	if m := valueRE.FindStringSubmatch(s); m != nil {
		return m[1] + " (" + m[2] + ")"
	}
	return strings.Trim(s, "'")
}

func code(err error) int {
	var ae *amqp.Error
	if errors.As(err, &ae) {
		return ae.Code
	}
	return 0
}

// found reads the answers of passive declarations: true for none, false for 404 NOT_FOUND;
// another refusal is returned wrapped with what(i).
func found(errs []error, what func(i int) string) ([]bool, error) {
	out := make([]bool, len(errs))
	for i, e := range errs {
		if out[i] = e == nil; e != nil && code(e) != amqp.NotFound {
			return nil, wrapBroker(e, what(i))
		}
	}
	return out, nil
}

// wrapBroker wraps a broker refusal with its sentinel and a hint; what says what was being done.
func wrapBroker(err error, what string) error {
	if c := parseConflict(err); c != nil {
		return c
	}
	if code(err) == amqp.AccessRefused {
		return fmt.Errorf("%w: %s: %w (the user needs configure permission on this vhost for names starting with the prefix, and write/read permission on the target exchanges: rabbitmqctl set_permissions)", ErrAccessRefused, what, err)
	}
	return fmt.Errorf("topology: %s: %w", what, err)
}

// policyError wraps ErrPolicy and lists the failing problems (at most 5 in full).
func policyError(failing []PolicyProblem) error {
	var sb strings.Builder
	fmt.Fprintf(&sb, "%s in effect %s guarantees", text.Plural(len(failing), "policy key"), map[bool]string{true: "breaks", false: "break"}[len(failing) == 1])
	for i, pp := range failing {
		if i == 5 {
			fmt.Fprintf(&sb, "\n  ... and %d more (see the report)", len(failing)-5)
			break
		}
		sb.WriteString("\n  ")
		sb.WriteString(pp.Error())
	}
	return fmt.Errorf("%w: %s", ErrPolicy, sb.String())
}
