package declare

import (
	"fmt"

	"github.com/delaykit/rabbitdelay/internal/admin"
)

// statusSchema is the version of status --json's shape: it changes only when a field changes
// meaning or is removed.
const statusSchema = 1

// statusJSON is the shape of status --json; docs/status-json.md says what each field holds.
// Counts the management API has no figure for are -1; lists are [] when empty, never null;
// objects that need the management API are null without it.
type statusJSON struct {
	Schema                int                         `json:"schema"`
	OK                    bool                        `json:"ok"` // false exactly when status exits 1
	Problems              []string                    `json:"problems"`
	Prefix                string                      `json:"prefix"`
	VHost                 string                      `json:"vhost"`
	Plugin                string                      `json:"plugin"`
	Management            bool                        `json:"management"`
	Queues                []statusQueueJSON           `json:"queues"`
	Parking               statusQueueJSON             `json:"parking"`
	MissingObjects        []string                    `json:"missing_objects"`
	MissingExchanges      []statusMissingExchangeJSON `json:"missing_exchanges"`
	Mismatched            []admin.Mismatch            `json:"mismatched"`
	ExchangesPresent      int                         `json:"exchanges_present"`
	ExchangesTotal        int                         `json:"exchanges_total"`
	BindingsPresent       int                         `json:"bindings_present"` // -1 without --management-url
	BindingsTotal         int                         `json:"bindings_total"`
	ConsumedDelayQueues   []string                    `json:"consumed_delay_queues"`
	DeadLettering         []statusDLXJSON             `json:"dead_lettering"`
	UnplannedBindings     []string                    `json:"unplanned_bindings"`
	RetryBindings         []string                    `json:"retry_bindings"`
	Unplanned             []admin.Unplanned           `json:"unplanned"`
	Policies              []statusPolicyJSON          `json:"policies"`
	PolicyProblems        []statusProblemJSON         `json:"policy_problems"`
	Cluster               *statusClusterJSON          `json:"cluster"`
	RabbitMQVersion       string                      `json:"rabbitmq_version"`
	NotDeclared           bool                        `json:"not_declared"`
	RequeueLoops          []statusRequeueLoopJSON     `json:"requeue_loops"`
	RecordDiffers         bool                        `json:"record_differs"`
	RecordOnlyTargets     []string                    `json:"record_only_targets"`
	PluginMessagesDelayed int64                       `json:"plugin_messages_delayed"`
}

type statusRequeueLoopJSON struct {
	admin.RequeueLoop
	Advice string `json:"advice"`
}

type statusQueueJSON struct {
	Name        string   `json:"name"`
	Role        string   `json:"role"`
	Level       int      `json:"level"`
	Digit       int      `json:"digit"`
	TTLMs       int64    `json:"ttl_ms"`
	Exists      bool     `json:"exists"`
	Ready       int      `json:"ready"`
	Consumers   int      `json:"consumers"`
	Messages    int64    `json:"messages"`
	MessagesDLX int64    `json:"messages_dlx"`
	Leader      string   `json:"leader"`
	Members     []string `json:"members"`
	Online      []string `json:"online"`
}

type statusDLXJSON struct {
	Queue       string `json:"queue"`
	MessagesDLX int64  `json:"messages_dlx"`
}

type statusMissingExchangeJSON struct {
	Name    string   `json:"name"`
	Similar []string `json:"similar"`
}

type statusPolicyJSON struct {
	Name     string `json:"name"`
	ApplyTo  string `json:"apply_to"`
	Priority int    `json:"priority"`
	Exists   bool   `json:"exists"`
	Current  bool   `json:"current"`
}

type statusProblemJSON struct {
	Severity string `json:"severity"`
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
	Balanced       bool                 `json:"balanced"`
	Nodes          []statusNodeJSON     `json:"nodes"`
	DegradedQueues []string             `json:"degraded_queues"`
	Waits          []statusWaitJSON     `json:"dead_letter_waits"`
	SharedLeaders  []admin.SharedLeader `json:"shared_leaders"`
}

type statusNodeJSON struct {
	Name              string `json:"name"`
	Running           *bool  `json:"running"` // null when unknown (no monitoring tag)
	Leaders           int    `json:"leaders"`
	DelayQueueLeaders int    `json:"delay_queue_leaders"`
	Members           int    `json:"members"`
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

func mapList[T, U any](in []T, f func(T) U) []U {
	out := make([]U, 0, len(in))
	for _, v := range in {
		out = append(out, f(v))
	}
	return out
}

func strs[T fmt.Stringer](in []T) []string { return mapList(in, T.String) }

func queueJSON(q admin.QueueStatus) statusQueueJSON {
	return statusQueueJSON{Name: q.Name, Role: string(q.Role), Level: q.Level, Digit: q.Digit, TTLMs: q.TTL, Exists: q.Exists,
		Ready: q.Ready, Consumers: q.Consumers, Messages: q.Messages, MessagesDLX: q.MessagesDLX,
		Leader: q.Leader, Members: orEmpty(q.Members), Online: orEmpty(q.Online)}
}

func count[T any](in []T, ok func(T) bool) int {
	n := 0
	for _, v := range in {
		if ok(v) {
			n++
		}
	}
	return n
}

func newStatusJSON(p *admin.Plan, rep *admin.StatusReport, err error, plugin, vhost string) statusJSON {
	out := statusJSON{Schema: statusSchema, OK: err == nil, Problems: []string{}, Prefix: p.Spec.Prefix, VHost: vhost,
		Plugin: plugin, Management: rep.Management, MissingObjects: orEmpty(rep.Missing),
		ExchangesTotal: len(rep.Exchanges), BindingsPresent: -1, BindingsTotal: -1,
		ExchangesPresent:    count(rep.Exchanges, func(x admin.ExchangeStatus) bool { return x.Exists }),
		ConsumedDelayQueues: orEmpty(rep.ConsumedDelayQueues),
		DeadLettering:       mapList(rep.DeadLettering, dlxJSON),
		RabbitMQVersion:     rep.Version, NotDeclared: rep.NotDeclared,
		RecordDiffers: rep.RecordDiffers, RecordOnlyTargets: orEmpty(rep.RecordOnlyTargets),
		PluginMessagesDelayed: rep.PluginMessagesDelayed,
		Queues:                mapList(rep.Queues, queueJSON),
		Parking:               queueJSON(rep.Parking()),
		UnplannedBindings:     strs(rep.UnplannedBindings),
		RetryBindings:         strs(rep.RetryBindings),
		RequeueLoops: mapList(rep.RequeueLoops, func(l admin.RequeueLoop) statusRequeueLoopJSON {
			return statusRequeueLoopJSON{l, l.Advice(p.Names.Parking())}
		}),
		MissingExchanges: mapList(rep.MissingExchanges, func(x admin.MissingExchange) statusMissingExchangeJSON {
			return statusMissingExchangeJSON{Name: x.Name, Similar: orEmpty(x.Similar)}
		}),
		Mismatched: orEmpty(rep.Mismatched), Unplanned: orEmpty(rep.Unplanned),
		Policies: mapList(rep.Policies, func(ps admin.PolicyStatus) statusPolicyJSON {
			return statusPolicyJSON{Name: ps.Name, ApplyTo: ps.ApplyTo, Priority: ps.Priority, Exists: ps.Exists, Current: ps.Current}
		}),
		PolicyProblems: mapList(rep.PolicyProblems, func(pp admin.PolicyProblem) statusProblemJSON {
			return statusProblemJSON{Severity: map[bool]string{false: "error", true: "warning"}[pp.Warning], Breaks: string(pp.Breaks),
				Kind: string(pp.Kind), Object: pp.Object, Policy: pp.Policy, Operator: pp.Operator, Key: pp.Key, Value: pp.Value,
				Message: pp.Error()}
		}),
		Cluster: clusterJSON(rep.Cluster),
	}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		out.Problems = mapList(j.Unwrap(), error.Error)
	} else if err != nil {
		out.Problems = append(out.Problems, err.Error())
	}
	if rep.Management {
		out.BindingsTotal = len(rep.Bindings)
		out.BindingsPresent = count(rep.Bindings, func(b admin.BindingStatus) bool { return b.Exists })
	}
	return out
}

func dlxJSON(q admin.WaitingQueue) statusDLXJSON {
	return statusDLXJSON{Queue: q.Name, MessagesDLX: q.MessagesDLX}
}

func clusterJSON(c *admin.ClusterStatus) *statusClusterJSON {
	if c == nil {
		return nil
	}
	return &statusClusterJSON{Balanced: c.Balanced, SharedLeaders: orEmpty(c.SharedLeaders),
		Nodes: mapList(c.Nodes, func(n admin.NodeLeaders) statusNodeJSON {
			return statusNodeJSON{Name: n.Name, Running: n.Running, Leaders: n.Leaders, DelayQueueLeaders: n.DelayQueues, Members: n.Members}
		}),
		DegradedQueues: mapList(c.Degraded, func(d admin.DegradedQueue) string { return d.Queue }),
		Waits: mapList(c.Waits, func(w admin.DeadLetterWait) statusWaitJSON {
			return statusWaitJSON{Node: w.Node, Messages: w.Messages, Queues: mapList(w.Queues, dlxJSON)}
		}),
	}
}
