package admin

import (
	"cmp"
	"encoding/json"
	"fmt"
)

// Definitions is the part of RabbitMQ's definitions format
// (https://www.rabbitmq.com/docs/definitions) that a topology needs.
type Definitions struct {
	VHosts    []DefVHost    `json:"vhosts"`
	Exchanges []DefExchange `json:"exchanges"`
	Queues    []DefQueue    `json:"queues"`
	Bindings  []DefBinding  `json:"bindings"`
	Policies  []DefPolicy   `json:"policies"`
}

// DefPolicy is a policy in definitions.
type DefPolicy struct {
	VHost      string         `json:"vhost"`
	Name       string         `json:"name"`
	Pattern    string         `json:"pattern"`
	ApplyTo    string         `json:"apply-to"`
	Definition map[string]any `json:"definition"`
	Priority   int            `json:"priority"`
}

// DefVHost is a vhost in definitions.
type DefVHost struct {
	Name string `json:"name"`
}

// DefExchange is an exchange in definitions.
type DefExchange struct {
	Name       string         `json:"name"`
	VHost      string         `json:"vhost"`
	Type       string         `json:"type"`
	Durable    bool           `json:"durable"`
	AutoDelete bool           `json:"auto_delete"`
	Internal   bool           `json:"internal"`
	Arguments  map[string]any `json:"arguments"`
}

// DefQueue is a queue in definitions.
type DefQueue struct {
	Name       string         `json:"name"`
	VHost      string         `json:"vhost"`
	Durable    bool           `json:"durable"`
	AutoDelete bool           `json:"auto_delete"`
	Arguments  map[string]any `json:"arguments"`
}

// DefBinding is a binding in definitions.
type DefBinding struct {
	Source          string         `json:"source"`
	VHost           string         `json:"vhost"`
	Destination     string         `json:"destination"`
	DestinationType string         `json:"destination_type"`
	RoutingKey      string         `json:"routing_key"`
	Arguments       map[string]any `json:"arguments"`
}

// Definitions returns p as RabbitMQ definitions for vhost ("/" when empty): what Apply would
// declare, and the vhost (created by an import, without permissions). Exchanges of
// p.Existing must exist before an import.
func (p *Plan) Definitions(vhost string) Definitions {
	vhost = cmp.Or(vhost, "/")
	args := func(t map[string]any) map[string]any {
		if t == nil {
			return map[string]any{}
		}
		return t
	}
	d := Definitions{VHosts: []DefVHost{{Name: vhost}}, Exchanges: []DefExchange{}, Queues: []DefQueue{}, Bindings: []DefBinding{}, Policies: []DefPolicy{}}
	for _, pol := range p.Policies {
		d.Policies = append(d.Policies, DefPolicy{VHost: vhost, Name: pol.Name, Pattern: pol.Pattern, ApplyTo: pol.ApplyTo,
			Definition: pol.Definition, Priority: pol.Priority})
	}
	for _, e := range p.Exchanges {
		d.Exchanges = append(d.Exchanges, DefExchange{Name: e.Name, VHost: vhost, Type: e.Type, Durable: true, Arguments: args(e.Args)})
	}
	for _, q := range p.Queues {
		d.Queues = append(d.Queues, DefQueue{Name: q.Name, VHost: vhost, Durable: true, Arguments: args(q.Args)})
	}
	for _, b := range p.Bindings {
		d.Bindings = append(d.Bindings, DefBinding{Source: b.Source, VHost: vhost, Destination: b.Destination,
			DestinationType: b.DestinationType, RoutingKey: b.RoutingKey, Arguments: args(b.Args)})
	}
	return d
}

// Export returns [Plan.Definitions] as indented JSON. Integers are JSON numbers, which RabbitMQ
// imports as longs as Apply declares them, so Apply after an import changes nothing.
func Export(p *Plan, vhost string) ([]byte, error) {
	out, err := json.MarshalIndent(p.Definitions(vhost), "", "  ")
	if err != nil {
		return nil, fmt.Errorf("topology: export: %w", err)
	}
	return append(out, '\n'), nil
}
