package admin

import (
	"cmp"
	"fmt"
	"maps"
	"slices"

	"github.com/delaykit/rabbitdelay/internal/delayspec"
)

// Breakage names the guarantee a policy key breaks (see [PolicyProblem]).
type Breakage string

// What a policy key can break.
const (
	BreaksEarly   Breakage = "early"   // delayed messages arrive before they are due
	BreaksDeletes Breakage = "deletes" // the queue is deleted with its messages
	BreaksDrops   Breakage = "drops"   // messages can be lost
	// BreaksStalls: messages stop moving (stuck in dead-letter state)
	BreaksStalls      Breakage = "stalls"
	BreaksRevocations Breakage = "revocations lost" // revoked messages reach handlers
	BreaksRouting     Breakage = "wrong routing"    // messages go somewhere they should not
	// BreaksUnknown: before 4.3, an operator policy whose pattern Go cannot run and that a new
	// queue's statistics do not name yet.
	BreaksUnknown Breakage = "not checked"
)

// PolicyProblem is one policy key in effect on an object of the topology that breaks (or, with
// Warning, may break) a guarantee. Error names the policy, key, value, object, effect and fix.
type PolicyProblem struct {
	Kind   Kind   `json:"kind"`
	Object string `json:"object"`
	// Policy sets Key; "" for the object's own argument or when no policy applies where one
	// should.
	Policy string `json:"policy"`
	// Operator: Policy is an operator policy, which no policy of the topology can shadow.
	Operator bool     `json:"operator,omitempty"`
	Key      string   `json:"key"`
	Value    any      `json:"value"` // value in effect (numbers as json.Number), nil when missing
	Breaks   Breakage `json:"breaks"`
	// Warning: not a broken guarantee by itself; Status and Apply do not fail on it.
	Warning bool   `json:"warning,omitempty"`
	Why     string `json:"why"`
}

// Error is `operator policy "p" sets message-ttl = 1000 on queue "q": early: ...`.
func (pp PolicyProblem) Error() string {
	var src string
	switch {
	case pp.Policy == "" && pp.Value == nil:
		src = "no policy sets " + pp.Key
	case pp.Policy == "":
		src = fmt.Sprintf("the argument %s = %v", pp.Key, pp.Value)
	case pp.Operator:
		src = fmt.Sprintf("operator policy %q sets %s = %v", pp.Policy, pp.Key, pp.Value)
	default:
		src = fmt.Sprintf("policy %q sets %s = %v", pp.Policy, pp.Key, pp.Value)
	}
	return fmt.Sprintf("%s on %s %q: %s: %s", src, pp.Kind, pp.Object, pp.Breaks, pp.Why)
}

// fix is the advice common to policy problems, by source.
func (pp PolicyProblem) fix(ours string, priority int) string {
	switch {
	case pp.Operator:
		return fmt.Sprintf("change the operator policy's pattern so it does not match %q, or remove %s from it "+
			"(operator policies are merged with every policy, the stricter value winning: no policy can shadow them)", pp.Object, pp.Key)
	case pp.Policy == "" || pp.Policy == ours:
		return ""
	default:
		return fmt.Sprintf("policy %q has a priority at or above %d, so it applies instead of %q: lower its priority, "+
			"or make its pattern not match %q (or raise --policy-priority above it and run rabbitdelay apply)", pp.Policy, priority, ours, pp.Object)
	}
}

func policyProblemsOf(p *Plan, pols, ops map[string]managedPolicy, queues, exchanges []managedObject, major int) []PolicyProblem {
	var out []PolicyProblem
	add := func(pp PolicyProblem, ourPolicy string) {
		if fix := pp.fix(ourPolicy, p.Spec.PolicyPriority); fix != "" {
			pp.Why += "; fix: " + fix
		}
		out = append(out, pp)
	}
	exists := make(map[string]bool, len(exchanges)) // the vhost's exchanges
	for _, x := range exchanges {
		exists[x.Name] = true
	}
	for _, mq := range queues {
		q, ok := p.Queue(mq.Name)
		switch {
		case !ok:
		case q.Role == RoleReady:
			out = append(out, readyQueueProblems(p, q, mq, pols, ops, major, exists)...) // with their own fix
		case q.Role == RoleRevoked:
			for _, pp := range revokedProblems(p, q, mq, pols, ops) {
				add(pp, p.Names.RevokedPolicy())
			}
		case q.IsDelay() || q.Role == RoleParking:
			for _, pp := range delayQueueProblems(p, q, mq, pols, ops, major) {
				add(pp, p.Names.DelayQueuesPolicy())
			}
		}
	}
	for _, mx := range exchanges {
		if pp, ok := exchangeProblem(p, mx, pols, exists); ok {
			out = append(out, pp)
		}
	}
	slices.SortStableFunc(out, func(a, b PolicyProblem) int {
		return cmp.Or(cmp.Compare(a.Object, b.Object), cmp.Compare(a.Key, b.Key))
	})
	return out
}

// inEffect returns the policy definition in effect on queue mq and a function giving the
// problem of key k, named after the policy that sets it.
func inEffect(mq managedObject, pols, ops map[string]managedPolicy) (map[string]any, func(k string) PolicyProblem) {
	def, fromOp := definitionOf(mq, pols, ops)
	return def, func(k string) PolicyProblem {
		pp := PolicyProblem{Kind: KindQueue, Object: mq.Name, Policy: rawName(mq.Policy), Key: k, Value: def[k]}
		if fromOp[k] {
			pp.Policy, pp.Operator = rawName(mq.OperatorPolicy), true
		}
		return pp
	}
}

// delayQueueProblems are the policy problems of delay or parking queue q, without their fix.
func delayQueueProblems(p *Plan, q Queue, mq managedObject, pols, ops map[string]managedPolicy, major int) []PolicyProblem {
	def, problem := inEffect(mq, pols, ops)
	quorum := mq.Type == string(delayspec.Quorum)
	var out []PolicyProblem
	if _, argLimit := mq.Arguments["x-delivery-limit"]; q.Role == RoleParking && quorum && major >= 4 && !argLimit {
		if _, ok := def["delivery-limit"]; !ok {
			// Kept (warning): 4.x's default limit of 20 drops a parked message given back 21 times.
			out = append(out, parkingDefaultLimit(p, q.Name, rawName(mq.Policy)))
		}
	}
	for _, k := range slices.Sorted(maps.Keys(def)) {
		if pp := problem(k); delayKeyProblem(&pp, q, delayOverflow(def, quorum), quorum) {
			out = append(out, pp)
		}
	}
	return out
}

// delayKeyProblem fills in what pp.Key breaks on delay or parking queue q under overflow, and
// reports whether it breaks anything.
func delayKeyProblem(pp *PolicyProblem, q Queue, overflow string, quorum bool) bool {
	k, v := pp.Key, pp.Value
	n, isNum := numeric(v)
	switch {
	// Kept: the broker takes the lower TTL silently, so delayed messages arrive early.
	case q.IsDelay() && k == "message-ttl" && isNum && n < float64(q.TTL):
		pp.Breaks = BreaksEarly
		pp.Why = fmt.Sprintf("RabbitMQ applies the lower of the policy's message-ttl and the queue's x-message-ttl (%d ms), "+
			"so messages leave this delay queue after %v ms: delayed messages arrive up to %v ms early", q.TTL, v, float64(q.TTL)-n)
	// Kept: the broker deletes the queue with the messages it holds.
	case k == "expires":
		pp.Breaks = BreaksDeletes
		pp.Why = fmt.Sprintf("RabbitMQ deletes the queue, with every message it holds, once it has been unused for %v ms "+
			"(no consumer, no basic.get, no redeclaration: a delay or parking queue is always unused)", v)
	// Kept: at the limit, messages leave before their TTL (early) or are refused (stall or drop).
	case q.IsDelay() && (k == "max-length" || k == "max-length-bytes"):
		switch {
		case overflow != "reject-publish":
			pp.Breaks = BreaksEarly
			pp.Why = fmt.Sprintf("with overflow %s in effect, once the queue holds %v (messages or bytes) it dead-letters the "+
				"message it drops (the oldest; with reject-publish-dlx on a classic queue, the one arriving) into its "+
				"dead-letter exchange (reason maxlen): the message moves on before its TTL and arrives early", overflow, v)
		case quorum:
			pp.Breaks = BreaksStalls
			pp.Why = fmt.Sprintf("once the queue holds %v (messages or bytes) it refuses more (reject-publish): delayed publishes are "+
				"nacked, and messages dead-lettered into it stay in the dead-letter state of the queue before it (messages_dlx), "+
				"holding up the messages behind them", v)
		default:
			pp.Breaks = BreaksDrops
			pp.Why = fmt.Sprintf("once the queue holds %v (messages or bytes) it refuses more (overflow reject-publish): "+
				"delayed publishes are nacked, and messages dead-lettered into it are dropped", v)
		}
	// Kept: dead-lettering falls back to at-most-once, so a message in flight is lost when a node fails.
	case q.IsDelay() && quorum && k == "overflow" && fmt.Sprint(v) != "reject-publish":
		pp.Breaks = BreaksDrops
		pp.Why = fmt.Sprintf("for quorum queues a policy's overflow wins over x-overflow; with %v, at-least-once "+
			"dead-lettering falls back to at-most-once: a message being dead-lettered when a broker node fails is lost", v)
	// Kept: due messages reach their target with another routing key.
	case q.IsDelay() && k == "dead-letter-routing-key":
		pp.Breaks = BreaksRouting
		pp.Why = fmt.Sprintf("delay queues dead-letter with the message's own routing key (they have no "+
			"x-dead-letter-routing-key); this policy replaces it with %q, so due messages reach their target with the wrong "+
			"routing key", fmt.Sprint(v))
	// Kept: parked messages expire or are dropped.
	case q.Role == RoleParking && (k == "message-ttl" || k == "max-length" || k == "max-length-bytes"):
		pp.Breaks = BreaksDrops
		pp.Why = fmt.Sprintf("parked messages are kept for an operator to look at; with %s %v they expire or are dropped "+
			"(or refused, and then stall in a delay queue's dead-letter state)", k, v)
	// Kept (warning): a parked message given back more often than the limit is dropped.
	case q.Role == RoleParking && k == "delivery-limit" && fmt.Sprint(v) != "-1":
		pp.Breaks, pp.Warning = BreaksDrops, true
		pp.Why = fmt.Sprintf("a parked message returned (nack or reject with requeue) more than %v times is dropped: "+
			"read parked messages with acknowledgements and ack them", v)
	default:
		return false
	}
	return true
}

// stallOrDrop is what a due message nothing routes suffers (classic delay queues drop it).
func stallOrDrop(p *Plan) Breakage {
	if p.Spec.QueueType == delayspec.Classic {
		return BreaksDrops
	}
	return BreaksStalls
}

// exchangeProblem is the policy problem of exchange mx, if any: a target whose unroutable due
// messages are not parked, or a topology exchange with a policy's alternate exchange.
func exchangeProblem(p *Plan, mx managedObject, pols map[string]managedPolicy, exists map[string]bool) (PolicyProblem, bool) {
	userName := rawName(mx.Policy)
	if p.Spec.HasTarget(mx.Name) {
		return targetProblem(p, mx, pols, exists)
	}
	if _, hasArg := mx.Arguments["alternate-exchange"]; hasArg || userName == "" {
		return PolicyProblem{}, false
	}
	if _, ok := p.Exchange(mx.Name); !ok {
		return PolicyProblem{}, false
	}
	// Kept: a message no queue takes goes to the alternate exchange instead of back to its publisher.
	ae := pols[userName].Definition["alternate-exchange"]
	return PolicyProblem{Kind: KindExchange, Object: mx.Name, Policy: userName, Key: "alternate-exchange", Value: ae, Breaks: BreaksRouting,
		Why: fmt.Sprintf("a message this exchange of the topology routes to no queue goes to %q instead of being returned to "+
			"its publisher (mandatory) or parked; fix: make the policy's pattern not match %q", fmt.Sprint(ae), mx.Name)}, ae != nil
}

// targetProblem is the problem of target exchange mx, if any: a due message it routes to no
// queue must be parked through the targets policy's alternate exchange.
func targetProblem(p *Plan, mx managedObject, pols map[string]managedPolicy, exists map[string]bool) (PolicyProblem, bool) {
	userName := rawName(mx.Policy)
	argAE, hasArg := mx.Arguments["alternate-exchange"]
	pp := PolicyProblem{Kind: KindExchange, Object: mx.Name, Key: "alternate-exchange", Breaks: stallOrDrop(p)}
	ours, stall := p.Names.TargetsPolicy(), stallText(p.Spec.QueueType)
	switch ae := pols[userName].Definition["alternate-exchange"]; {
	// Kept (warning): unroutable due messages go to the target's own alternate exchange, not to parking.
	case hasArg:
		pp.Value, pp.Warning = argAE, true
		pp.Why = fmt.Sprintf("this target exchange has its own alternate exchange %q (an argument, which wins over "+
			"policy %q): a due message it routes to no queue goes there, not to the parking queue; make sure %q takes every message",
			fmt.Sprint(argAE), ours, fmt.Sprint(argAE))
		missingAE(p, &pp, argAE, exists)
	// Kept: the alternate exchange is gone, so an unroutable due message goes nowhere.
	case userName == ours:
		due := p.Names.DueUnroutable()
		if exists[due] {
			return pp, false
		}
		pp.Policy, pp.Value = userName, due
		pp.Why = fmt.Sprintf("policy %q gives this target the alternate exchange %q, which does not exist (a teardown "+
			"without the management API leaves the policy): a due message the target routes to no queue goes nowhere: %s; "+
			"fix: run rabbitdelay apply, or delete the policy", userName, due, stall)
	// Kept (warning): unroutable due messages go to that policy's alternate exchange, not to parking.
	case userName != "" && ae != nil:
		pp.Policy, pp.Value, pp.Warning = userName, ae, true
		pp.Why = fmt.Sprintf("policy %q applies to this target instead of %q and sends what it cannot route to %q: "+
			"a due message it routes to no queue goes there, not to the parking queue; make sure %q takes every message",
			userName, ours, fmt.Sprint(ae), fmt.Sprint(ae))
		missingAE(p, &pp, ae, exists)
	// Kept: an unroutable due message is not parked: it stalls (quorum) or is dropped (classic).
	case userName != "":
		pp.Policy = userName
		pp.Why = fmt.Sprintf("policy %q applies to this target instead of %q and sets no alternate-exchange: a due "+
			"message the target routes to no queue is not parked; %s", userName, ours, stall)
		pp.Why += "; fix: " + pp.fix(ours, p.Spec.PolicyPriority)
	// Kept: as above, the targets policy not being in effect.
	default:
		pp.Why = fmt.Sprintf("policy %q is not in effect on this target (not set: run rabbitdelay apply with the management API, "+
			"or the rabbitmqctl set_policy command it prints): a due message the target routes to no queue is not parked; %s", ours, stall)
	}
	return pp, true
}

// missingAE turns a warning about a target's alternate exchange into an error when that
// exchange does not exist (the message then goes nowhere).
func missingAE(p *Plan, pp *PolicyProblem, ae any, exists map[string]bool) {
	if name := fmt.Sprint(ae); !exists[name] {
		pp.Warning = false
		pp.Why = fmt.Sprintf("the alternate exchange %q in effect on this target exchange does not exist, so a due message "+
			"the target routes to no queue goes nowhere: %s; fix: declare %q, or remove it from the target (the argument or "+
			"the policy) so that %q, which parks such messages, applies", name, stallText(p.Spec.QueueType), name, p.Names.TargetsPolicy())
	}
}

// readyQueueProblems are the policy problems of ready queue q: the topology sets no policy on
// the application's queues, but reports what loses or misroutes due messages (a warning when
// they are parked through the queue's x-dead-letter-exchange, which wins over a policy's).
func readyQueueProblems(p *Plan, q Queue, mq managedObject, pols, ops map[string]managedPolicy, major int, exchanges map[string]bool) []PolicyProblem {
	def, problem := inEffect(mq, pols, ops)
	dlxValue, ownDLX := def["dead-letter-exchange"]
	r := readyQueue{p: p, parks: q.Args["x-dead-letter-exchange"] == p.Names.Unroutable(), ownDLX: ownDLX, dlx: fmt.Sprint(dlxValue),
		exchanges: exchanges, overflow: fmt.Sprint(def["overflow"])}
	var out []PolicyProblem
	_, argLimit := mq.Arguments["x-delivery-limit"]
	// Kept: 4.x's default limit of 20 drops a due message given back 21 times (no dead-letter exchange).
	if _, policyLimit := def["delivery-limit"]; major >= 4 && mq.Type == "quorum" && !argLimit && !policyLimit && !r.parks && !ownDLX {
		out = append(out, PolicyProblem{Kind: KindQueue, Object: q.Name, Key: "delivery-limit", Value: "none (RabbitMQ 4.x default: 20)",
			Breaks: BreaksDrops, Why: "RabbitMQ 4.x gives a quorum queue without a delivery limit one of 20, and this ready queue (declared " +
				"without x-delivery-limit: AMQPDELAY_READY_DELIVERY_LIMIT=-1) has no dead-letter exchange, so a due message returned " +
				"(nack or reject with requeue, or its consumer gone) more than 20 times is dropped; fix: give it a delivery limit " +
				"(AMQPDELAY_READY_DELIVERY_LIMIT, after deleting the queue: the topology then parks what it takes out), or set a " +
				"policy with delivery-limit -1 (none) on it"})
	}
	for _, k := range slices.Sorted(maps.Keys(def)) {
		pp := problem(k)
		if !r.keyProblem(&pp) {
			continue
		}
		if pp.Operator {
			pp.Why += "; fix: " + pp.fix("", 0)
		} else if !pp.Warning {
			pp.Why += fmt.Sprintf("; fix: remove %s from policy %q or make its pattern not match this ready queue (the topology sets no "+
				"policy on ready queues: they are the application's)", k, pp.Policy)
		}
		out = append(out, pp)
	}
	return out
}

type readyQueue struct {
	p         *Plan
	parks     bool   // the queue dead-letters to <prefix>.unroutable (its argument, which wins over a policy's)
	ownDLX    bool   // the policy in effect sets dead-letter-exchange
	dlx       string // that exchange
	exchanges map[string]bool
	overflow  string // the policy's overflow
}

// keyProblem fills in what pp.Key breaks, and reports whether it breaks anything (warnings
// included).
func (r readyQueue) keyProblem(pp *PolicyProblem) bool {
	v := pp.Value
	switch pp.Key {
	// Kept: the broker deletes the ready queue with its due messages.
	case "expires":
		pp.Breaks = BreaksDeletes
		pp.Why = fmt.Sprintf("RabbitMQ deletes this ready queue, with every due message it holds, once it has been unused for %v ms "+
			"(no consumer, no basic.get, no redeclaration), and due messages for it are then routed elsewhere or parked", v)
	// Kept: due messages expire from the ready queue (parked or lost).
	case "message-ttl":
		r.lost(pp, fmt.Sprintf("due messages not consumed within %v ms expire from this ready queue", v))
	// Kept: at the limit due messages are dropped, or refused so that dead-lettering stalls.
	case "max-length", "max-length-bytes":
		if r.overflow == "reject-publish" || r.overflow == "reject-publish-dlx" {
			pp.Breaks = stallOrDrop(r.p)
			pp.Why = fmt.Sprintf("once this ready queue holds %v (messages or bytes), overflow %s refuses due messages "+
				"dead-lettered into it: %s", v, r.overflow, stallText(r.p.Spec.QueueType))
		} else {
			r.lost(pp, fmt.Sprintf("once this ready queue holds %v (messages or bytes), it drops the oldest due messages", v))
		}
	// Kept: a due message given back past the limit is taken out (parked or lost).
	case "delivery-limit":
		if fmt.Sprint(v) == "-1" {
			return false // none (RabbitMQ 4.x)
		}
		r.lost(pp, fmt.Sprintf("a due message returned (nack or reject with requeue, or its consumer gone) more than %v times "+
			"is taken out of this ready queue", v))
	// Kept (warning): parked messages lose their routing key.
	case "dead-letter-routing-key":
		if !r.parks {
			return false // the application's own dead-lettering
		}
		pp.Breaks, pp.Warning = BreaksRouting, true
		pp.Why = fmt.Sprintf("messages this ready queue parks (rejected, or past its delivery limit) lose their routing key for %q", fmt.Sprint(v))
	default:
		return false
	}
	return true
}

// lost says where the due messages the queue takes out (what) go: parked or dead-lettered by
// the policy (warnings), or lost.
func (r readyQueue) lost(pp *PolicyProblem, what string) {
	switch {
	case r.parks:
		pp.Breaks, pp.Warning = BreaksDrops, true
		pp.Why = what + fmt.Sprintf(": this ready queue dead-letters them to %q, so they are parked in %q, not lost", r.p.Names.Unroutable(), r.p.Names.Parking())
	case r.ownDLX && (r.dlx == "" || r.exchanges[r.dlx]):
		pp.Breaks, pp.Warning = BreaksRouting, true
		pp.Why = what + fmt.Sprintf(": they are dead-lettered to the policy's dead-letter-exchange %q", r.dlx)
	case r.ownDLX:
		// RabbitMQ drops what it dead-letters to a missing exchange (rabbit_dead_letter).
		pp.Breaks = BreaksDrops
		pp.Why = what + fmt.Sprintf(": the policy dead-letters them to exchange %q, which does not exist, so they are lost", r.dlx)
	default:
		pp.Breaks = BreaksDrops
		pp.Why = what + ": this ready queue has no dead-letter exchange, so they are lost"
	}
}

// revokedProblems are the policy problems of the revocation stream q: a policy's max-age and
// max-length-bytes win over the stream's arguments (rabbit_stream_queue:policy_precedence/2);
// no other stream key drops a record.
func revokedProblems(p *Plan, q Queue, mq managedObject, pols, ops map[string]managedPolicy) []PolicyProblem {
	def, problem := inEffect(mq, pols, ops)
	retention := p.Spec.RevocationRetention()
	var out []PolicyProblem
	for _, k := range []string{"max-age", "max-length-bytes"} {
		v, ok := def[k]
		if !ok {
			continue
		}
		pp := problem(k)
		pp.Breaks = BreaksRevocations
		const lost = "revoked messages due after that reach handlers"
		switch k {
		// Kept: revocations are deleted before their messages are due, which then reach handlers.
		case "max-age":
			if age, ok := delayspec.ParseMaxAge(v); ok && age >= retention {
				continue
			}
			pp.Why = fmt.Sprintf("RabbitMQ applies a policy's max-age to a stream instead of its x-max-age (%s): revocations are deleted "+
				"after %v, before the messages they name are due (the topology's longest delay plus a day), and %s", revokedMaxAge(p.Spec), v, lost)
		// Kept: as max-age, by size.
		case "max-length-bytes":
			pp.Why = fmt.Sprintf("RabbitMQ deletes a stream's oldest records once it holds more than %v bytes (the policy's value wins "+
				"over an x-max-length-bytes argument), whatever their age: revocations (and fences) fill it, and %s", v, lost)
		}
		out = append(out, pp)
	}
	return out
}

func stallText(t delayspec.QueueType) string {
	if t == delayspec.Classic {
		return "classic queues drop it"
	}
	return "quorum queues keep it in their dead-letter state and retry it forever, and once more such messages are stuck " +
		"than the dead-letter worker's prefetch (dead_letter_worker_consumer_prefetch, 32 by default) the whole delay queue stalls"
}

// Failing returns the problems that are not warnings (nil when none).
func Failing(problems []PolicyProblem) []PolicyProblem {
	var out []PolicyProblem
	for _, pp := range problems {
		if !pp.Warning {
			out = append(out, pp)
		}
	}
	return out
}

// parkingDefaultLimit is the warning for a quorum parking queue on 4.x without delivery limit
// (policy userName, or none, applies instead of ours), which then gets 4.x's default of 20.
func parkingDefaultLimit(p *Plan, parking, userName string) PolicyProblem {
	ours := p.Names.DelayQueuesPolicy()
	pp := PolicyProblem{Kind: KindQueue, Object: parking, Policy: userName, Key: "delivery-limit", Value: "none (RabbitMQ 4.x default: 20)",
		Breaks: BreaksDrops, Warning: true}
	var src string
	switch userName {
	case "":
		pp.Value = nil // Error: "no policy sets delivery-limit"
		src = fmt.Sprintf("policy %q, which sets delivery-limit -1 (none), is not in effect on it (run rabbitdelay apply with the management API)", ours)
	case ours:
		src = fmt.Sprintf("policy %q lacks delivery-limit -1 (none), as rabbitdelay apply sets it for RabbitMQ 3.x (run rabbitdelay apply again)", ours)
	default:
		src = fmt.Sprintf("policy %q applies to it instead of %q, which sets delivery-limit -1 (none)", userName, ours)
	}
	pp.Why = "RabbitMQ 4.x gives a quorum queue without a delivery limit one of 20, and " + src + ": a parked message returned " +
		"as failed (reject with requeue, or its reader gone; before 4.3 also nack with requeue) more than 20 times is " +
		"dropped; read parked messages with acknowledgements and ack them"
	return pp
}
