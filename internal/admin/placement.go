package admin

import (
	"context"
	"errors"
	"net"
	"net/url"
	"time"

	"github.com/cenkalti/backoff/v4"
	amqp "github.com/rabbitmq/amqp091-go"
)

// connListWait bounds the wait for connections to appear in the management API's list (once
// their first statistics are emitted).
const connListWait = 60 * time.Second

// connNodes returns the node of each of conns: by server port when each node listens on its
// own (listenerNodes), else by matching the local port with the connection list's peer_port,
// asked every second up to connListWait. ok is false when one is not found (a proxy).
func (m *Management) connNodes(ctx context.Context, conns []*amqp.Connection) (nodes []string, ok bool, err error) {
	if nodes, ok := m.listenerNodes(ctx, conns); ok {
		return nodes, true, nil
	}
	b := backoff.NewExponentialBackOff()
	b.InitialInterval, b.Multiplier, b.RandomizationFactor, b.MaxElapsedTime = time.Second, 1, 0, connListWait
	err = backoff.Retry(func() error {
		var raw []struct {
			Node     string `json:"node"`
			PeerPort int    `json:"peer_port"`
		}
		if err := m.get(ctx, "api/vhosts/"+url.PathEscape(m.vhost)+"/connections?columns=node,peer_port", &raw); err != nil {
			return backoff.Permanent(err)
		}
		byPort := map[int][]string{}
		for _, c := range raw {
			byPort[c.PeerPort] = append(byPort[c.PeerPort], c.Node)
		}
		nodes = nil
		for _, c := range conns {
			a, isTCP := c.LocalAddr().(*net.TCPAddr)
			if !isTCP || len(byPort[a.Port]) != 1 {
				return errNotListed
			}
			nodes = append(nodes, byPort[a.Port][0])
		}
		return nil
	}, backoff.WithContext(b, ctx))
	if errors.Is(err, errNotListed) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	return nodes, true, nil
}

// listenerNodes names each conn's node by server port, when the overview's AMQP listeners give
// each port to one node only; ok is false otherwise.
func (m *Management) listenerNodes(ctx context.Context, conns []*amqp.Connection) (nodes []string, ok bool) {
	var raw struct {
		Listeners []struct {
			Node     string `json:"node"`
			Protocol string `json:"protocol"`
			Port     int    `json:"port"`
		} `json:"listeners"`
	}
	if m.get(ctx, "api/overview", &raw) != nil {
		return nil, false
	}
	byPort := map[int]map[string]bool{}
	for _, l := range raw.Listeners {
		if l.Protocol == "amqp" || l.Protocol == "amqp/ssl" {
			if byPort[l.Port] == nil {
				byPort[l.Port] = map[string]bool{}
			}
			byPort[l.Port][l.Node] = true
		}
	}
	for _, c := range conns {
		a, isTCP := c.RemoteAddr().(*net.TCPAddr)
		if !isTCP || len(byPort[a.Port]) != 1 {
			return nil, false
		}
		for n := range byPort[a.Port] {
			nodes = append(nodes, n)
		}
	}
	return nodes, true
}

var errNotListed = errors.New("connection not listed")

// placeShards picks, for each missing ladder queue of p, the index of the conn to declare it
// through: the first from its slot on whose node leads no other shard of the same queue, or
// its slot's when all do. nil (place by slot) when the nodes cannot be told apart.
func placeShards(ctx context.Context, m *Management, p *Plan, conns []*amqp.Connection, exists map[string]bool) (map[string]int, error) {
	nodes, ok, err := m.connNodes(ctx, conns)
	if err != nil || !ok {
		return nil, err
	}
	queues, err := m.Queues(ctx)
	if err != nil {
		return nil, err
	}
	type ld struct {
		level, digit      int
		lastHop, firstHop bool
	}
	used := map[ld]map[string]bool{}
	for _, q := range p.Queues {
		if q.Role != RoleLadder {
			continue
		}
		k := ld{q.Level, q.Digit, q.LastHop, q.FirstHop}
		if used[k] == nil {
			used[k] = map[string]bool{}
		}
		if exists[rowKey(KindQueue, q.Name)] {
			if l := queues[q.Name].Leader; l != "" {
				used[k][l] = true
			}
		}
	}
	out := map[string]int{}
	n := len(conns)
	for _, q := range p.Queues {
		if q.Role != RoleLadder || q.Slot < 0 || exists[rowKey(KindQueue, q.Name)] {
			continue
		}
		u := used[ld{q.Level, q.Digit, q.LastHop, q.FirstHop}]
		pick := q.Slot % n
		for j := range n {
			if i := (q.Slot + j) % n; !u[nodes[i]] {
				pick = i
				break
			}
		}
		u[nodes[pick]] = true
		out[q.Name] = pick
	}
	return out, nil
}
