package declare

import (
	"errors"
	"strconv"

	"github.com/delaykit/rabbitdelay/internal/admin"
)

// statusSchema is the version of the JSON that `rabbitdelay status --json` prints. It changes
// only when a field changes meaning or is removed; new fields may appear in any version.
const statusSchema = 1

// statusJSON is the documented shape of `rabbitdelay status --json` (docs/status-json.md).
// Counts from the management API are -1 when it has none yet (the queue's
// statistics are collected every collect_statistics_interval, 5 s by default) or without
// --management-url. Lists are [] when empty, never null; objects that need the management
// API are null without it.
type statusJSON struct {
	Schema int `json:"schema"`
	// OK is false exactly when status exits 1; Problems are the reasons, one sentence each.
	OK       bool     `json:"ok"`
	Problems []string `json:"problems"`
	Prefix   string   `json:"prefix"`
	VHost    string   `json:"vhost"`
	// Plugin is available, not_available, off (--plugin off) or unknown (the probe failed).
	Plugin     string            `json:"plugin"`
	Management bool              `json:"management"`
	Queues     []statusQueueJSON `json:"queues"`
	Parking    statusQueueJSON   `json:"parking"`
	// MissingObjects are the specification's objects (queue, exchange, binding, policy) that
	// the broker lacks: "queue NAME", "policy NAME", ...
	MissingObjects []string `json:"missing_objects"`
	// MissingExchanges are the exchanges the specification binds to but does not declare
	// (targets given without a type, ready queues' exchanges) that do not exist, each with
	// the vhost's exchanges of a similar name (management API only): apply declares nothing
	// until they exist.
	MissingExchanges []statusMissingExchangeJSON `json:"missing_exchanges"`
	// Mismatched are the properties of existing exchanges and queues that differ from the
	// specification (management API only; see admin.Mismatch).
	Mismatched []statusMismatchJSON `json:"mismatched"`
	// ExchangesPresent of ExchangesTotal exist; BindingsPresent of BindingsTotal (-1 without
	// --management-url).
	ExchangesPresent int `json:"exchanges_present"`
	ExchangesTotal   int `json:"exchanges_total"`
	BindingsPresent  int `json:"bindings_present"`
	BindingsTotal    int `json:"bindings_total"`
	// ConsumedDelayQueues are the delay queues with a consumer (must be none).
	ConsumedDelayQueues []string `json:"consumed_delay_queues"`
	// DeadLettering are the queues holding messages in dead-letter state while every node
	// involved is online (nothing routes them).
	DeadLettering []statusDLXJSON `json:"dead_lettering"`
	// UnplannedBindings are bindings on the topology that the specification lacks, as text.
	UnplannedBindings []string `json:"unplanned_bindings"`
	// RetryBindings are the consumers' retry bindings for queues outside the specification,
	// as text: expected, not a problem.
	RetryBindings []string `json:"retry_bindings"`
	// Unplanned are objects named like the topology's own that the specification lacks.
	Unplanned      []statusUnplannedJSON `json:"unplanned"`
	Policies       []statusPolicyJSON    `json:"policies"`
	PolicyProblems []statusProblemJSON   `json:"policy_problems"`
	// Cluster is null without --management-url.
	Cluster *statusClusterJSON `json:"cluster"`
	// RabbitMQVersion is the version the broker announced ("" when unknown).
	RabbitMQVersion string `json:"rabbitmq_version"`
	// NotDeclared: none of the topology's own exchanges and queues exist (never applied in
	// this vhost, or torn down); policy_problems is then empty.
	NotDeclared bool `json:"not_declared"`
	// RequeueLoops are the ready queues whose consumers requeue messages in a loop that no
	// delivery limit ends (management API; admin.RequeueLoop).
	RequeueLoops []statusRequeueLoopJSON `json:"requeue_loops"`
	// RecordDiffers: the spec record, which publishers and consumers use, is another
	// specification's than this one.
	RecordDiffers bool `json:"record_differs"`
	// RecordOnlyTargets are the targets of the spec record that this specification lacks.
	RecordOnlyTargets []string `json:"record_only_targets"`
	// PluginMessagesDelayed is how many messages the delayed-message plugin holds for the
	// plugin exchange (management API), -1 when unknown or there is none.
	PluginMessagesDelayed int64 `json:"plugin_messages_delayed"`
}

// statusRequeueLoopJSON is one admin.RequeueLoop: the rates per second, the cause
// (nack-not-counted, classic, no-delivery-limit) and what to do.
type statusRequeueLoopJSON struct {
	Queue         string  `json:"queue"`
	RedeliverRate float64 `json:"redeliver_rate"`
	DeliverRate   float64 `json:"deliver_rate"`
	Messages      int64   `json:"messages"`
	Cause         string  `json:"cause"`
	Advice        string  `json:"advice"`
}

type statusQueueJSON struct {
	Name string `json:"name"`
	// Role is ladder, bucket, parking, ready, revoked (the revocation stream) or spec (the
	// spec stream); Level and
	// Digit place a ladder queue (-1 for others); TTLMs is a delay queue's x-message-ttl (0
	// for others).
	Role   string `json:"role"`
	Level  int    `json:"level"`
	Digit  int    `json:"digit"`
	TTLMs  int64  `json:"ttl_ms"`
	Exists bool   `json:"exists"`
	// Ready and Consumers come from AMQP (a passive declare); Messages (ready, unacknowledged)
	// and MessagesDLX from the management API (-1 when unknown).
	Ready       int   `json:"ready"`
	Consumers   int   `json:"consumers"`
	Messages    int64 `json:"messages"`
	MessagesDLX int64 `json:"messages_dlx"`
	// Leader ("" when none), Members and Online nodes of a quorum queue (management API).
	Leader  string   `json:"leader"`
	Members []string `json:"members"`
	Online  []string `json:"online"`
}

// statusMismatchJSON is one admin.Mismatch: Kind is exchange or queue; Property is type,
// durable, auto_delete, internal, exclusive or an argument's name; Existing and Wanted are
// the printed values ("none" for an absent argument).
type statusMismatchJSON struct {
	Kind     string `json:"kind"`
	Name     string `json:"name"`
	Property string `json:"property"`
	Existing string `json:"existing"`
	Wanted   string `json:"wanted"`
}

type statusDLXJSON struct {
	Queue       string `json:"queue"`
	MessagesDLX int64  `json:"messages_dlx"`
}

type statusMissingExchangeJSON struct {
	Name    string   `json:"name"`
	Similar []string `json:"similar"`
}

type statusUnplannedJSON struct {
	Kind     string `json:"kind"`
	Name     string `json:"name"`
	Messages int64  `json:"messages"`
}

type statusPolicyJSON struct {
	Name     string `json:"name"`
	ApplyTo  string `json:"apply_to"`
	Priority int    `json:"priority"`
	Exists   bool   `json:"exists"`
	Current  bool   `json:"current"`
}

type statusProblemJSON struct {
	// Severity is error (status exits 1) or warning.
	Severity string `json:"severity"`
	// Breaks is early, deletes, drops, stalls or wrong routing.
	Breaks   string `json:"breaks"`
	Kind     string `json:"kind"`
	Object   string `json:"object"`
	Policy   string `json:"policy"`
	Operator bool   `json:"operator"`
	Key      string `json:"key"`
	Value    any    `json:"value"`
	Message  string `json:"message"`
}

type statusClusterJSON struct {
	Balanced       bool             `json:"balanced"`
	Nodes          []statusNodeJSON `json:"nodes"`
	DegradedQueues []string         `json:"degraded_queues"`
	Waits          []statusWaitJSON `json:"dead_letter_waits"`
	// SharedLeaders are the shards of ladder queues (--shards > 1) that share a leader node.
	SharedLeaders []admin.SharedLeader `json:"shared_leaders"`
}

type statusNodeJSON struct {
	Name string `json:"name"`
	// Running is null when unknown (the user lacks the monitoring tag).
	Running           *bool `json:"running"`
	Leaders           int   `json:"leaders"`
	DelayQueueLeaders int   `json:"delay_queue_leaders"`
	Members           int   `json:"members"`
}

type statusWaitJSON struct {
	Node     string          `json:"node"`
	Messages int64           `json:"messages"`
	Queues   []statusDLXJSON `json:"queues"`
}

// orEmpty returns s, or an empty list for nil (JSON [] rather than null).
func orEmpty[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

// queueJSON is q in the JSON shape.
func queueJSON(q admin.QueueStatus) statusQueueJSON {
	return statusQueueJSON{Name: q.Name, Role: string(q.Role), Level: q.Level, Digit: q.Digit, TTLMs: q.TTL, Exists: q.Exists,
		Ready: q.Ready, Consumers: q.Consumers, Messages: q.Messages, MessagesDLX: q.MessagesDLX,
		Leader: q.Leader, Members: orEmpty(q.Members), Online: orEmpty(q.Online)}
}

// newStatusJSON builds the JSON of rep, whose Status call returned err, with the plugin's
// state and the vhost.
func newStatusJSON(p *admin.Plan, rep *admin.StatusReport, err error, plugin, vhost string) statusJSON {
	out := statusJSON{Schema: statusSchema, OK: err == nil, Problems: []string{}, Prefix: p.Spec.Prefix, VHost: vhost,
		Plugin: plugin, Management: rep.Management, Queues: []statusQueueJSON{}, MissingObjects: orEmpty(rep.Missing),
		Mismatched: []statusMismatchJSON{}, MissingExchanges: []statusMissingExchangeJSON{},
		ExchangesTotal: len(rep.Exchanges), BindingsPresent: -1, BindingsTotal: -1,
		ConsumedDelayQueues: orEmpty(rep.ConsumedDelayQueues), DeadLettering: []statusDLXJSON{}, UnplannedBindings: []string{}, RetryBindings: []string{},
		Unplanned: []statusUnplannedJSON{}, Policies: []statusPolicyJSON{}, PolicyProblems: []statusProblemJSON{},
		RabbitMQVersion: rep.Version, NotDeclared: rep.NotDeclared, RequeueLoops: []statusRequeueLoopJSON{},
		RecordDiffers: rep.RecordDiffers, RecordOnlyTargets: append([]string{}, rep.RecordOnlyTargets...),
		PluginMessagesDelayed: rep.PluginMessagesDelayed}
	for _, l := range rep.RequeueLoops {
		out.RequeueLoops = append(out.RequeueLoops, statusRequeueLoopJSON{Queue: l.Queue, RedeliverRate: l.RedeliverRate,
			DeliverRate: l.DeliverRate, Messages: l.Messages, Cause: l.Cause, Advice: l.Advice(p.Names.Parking())})
	}
	if err != nil {
		if j, ok := err.(interface{ Unwrap() []error }); ok {
			for _, e := range j.Unwrap() {
				out.Problems = append(out.Problems, e.Error())
			}
		} else {
			out.Problems = append(out.Problems, err.Error())
		}
	}
	waiting := map[string]bool{} // dead-lettering that waits on an unreachable node (cluster.dead_letter_waits)
	if rep.Cluster != nil {
		for _, w := range rep.Cluster.Waits {
			for _, q := range w.Queues {
				waiting[q.Name] = true
			}
		}
	}
	for _, x := range rep.MissingExchanges {
		out.MissingExchanges = append(out.MissingExchanges, statusMissingExchangeJSON{Name: x.Name, Similar: orEmpty(x.Similar)})
	}
	for _, q := range rep.Queues {
		out.Queues = append(out.Queues, queueJSON(q))
		if q.MessagesDLX > 0 && !waiting[q.Name] {
			out.DeadLettering = append(out.DeadLettering, statusDLXJSON{Queue: q.Name, MessagesDLX: q.MessagesDLX})
		}
	}
	out.Parking = queueJSON(rep.Parking())
	for _, x := range rep.Exchanges {
		if x.Exists {
			out.ExchangesPresent++
		}
	}
	if rep.Management {
		out.BindingsPresent, out.BindingsTotal = 0, len(rep.Bindings)
		for _, b := range rep.Bindings {
			if b.Exists {
				out.BindingsPresent++
			}
		}
	}
	for _, m := range rep.Mismatched {
		out.Mismatched = append(out.Mismatched, statusMismatchJSON{Kind: string(m.Kind), Name: m.Name, Property: m.Property,
			Existing: m.Existing, Wanted: m.Wanted})
	}
	for _, b := range rep.UnplannedBindings {
		out.UnplannedBindings = append(out.UnplannedBindings, b.String())
	}
	for _, b := range rep.RetryBindings {
		out.RetryBindings = append(out.RetryBindings, b.String())
	}
	for _, u := range rep.Unplanned {
		out.Unplanned = append(out.Unplanned, statusUnplannedJSON{Kind: string(u.Kind), Name: u.Name, Messages: u.Messages})
	}
	for _, ps := range rep.Policies {
		out.Policies = append(out.Policies, statusPolicyJSON{Name: ps.Name, ApplyTo: ps.ApplyTo, Priority: ps.Priority,
			Exists: ps.Exists, Current: ps.Current})
	}
	for _, pp := range rep.PolicyProblems {
		sev := "error"
		if pp.Warning {
			sev = "warning"
		}
		out.PolicyProblems = append(out.PolicyProblems, statusProblemJSON{Severity: sev, Breaks: string(pp.Breaks), Kind: string(pp.Kind),
			Object: pp.Object, Policy: pp.Policy, Operator: pp.Operator, Key: pp.Key, Value: pp.Value, Message: pp.Error()})
	}
	if c := rep.Cluster; c != nil {
		cj := &statusClusterJSON{Balanced: c.Balanced, Nodes: []statusNodeJSON{}, DegradedQueues: []string{}, Waits: []statusWaitJSON{},
			SharedLeaders: orEmpty(c.SharedLeaders)}
		for _, n := range c.Nodes {
			cj.Nodes = append(cj.Nodes, statusNodeJSON{Name: n.Name, Running: n.Running, Leaders: n.Leaders,
				DelayQueueLeaders: n.DelayQueues, Members: n.Members})
		}
		for _, d := range c.Degraded {
			cj.DegradedQueues = append(cj.DegradedQueues, d.Queue)
		}
		for _, w := range c.Waits {
			wj := statusWaitJSON{Node: w.Node, Messages: w.Messages, Queues: []statusDLXJSON{}}
			for _, q := range w.Queues {
				wj.Queues = append(wj.Queues, statusDLXJSON{Queue: q.Name, MessagesDLX: q.MessagesDLX})
			}
			cj.Waits = append(cj.Waits, wj)
		}
		out.Cluster = cj
	}
	return out
}

// jsonOption is --json, the same as --output json.
func jsonOption(s *settings) option {
	return option{name: "json", bool: true, usage: "the same as --output json: the documented JSON shape (schema 1)",
		set: func(v string) error {
			b, err := strconv.ParseBool(v)
			if err != nil {
				return errors.New("want true or false")
			}
			if b {
				s.output = "json"
			}
			return nil
		}}
}
