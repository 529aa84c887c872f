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

// connListWait bounds how long placeShards waits for its connections to appear in the
// management API's connection list: RabbitMQ lists a connection once its first statistics are
// emitted (collect_statistics_interval, 5 s by default), later on a node that just restarted.
const connListWait = 60 * time.Second

// connNodes returns the node each of conns is attached to, by index. Where every node listens
// on a port of its own (the overview's listeners), the server port of each connection names
// its node at once. Otherwise it matches the client's local port with the peer_port of the
// management API's connection list (GET /api/vhosts/<vhost>/connections), asking every second
// until all are listed or connListWait has passed. ok is false when one of them is still not
// found (a proxy between client and broker): the caller then places by slot alone.
func (m *Management) connNodes(ctx context.Context, conns []*amqp.Connection) (nodes []string, ok bool, err error) {
	if nodes, ok := m.listenerNodes(ctx, conns); ok {
		return nodes, true, nil
	}
	b := backoff.NewExponentialBackOff()
	b.InitialInterval, b.Multiplier, b.RandomizationFactor, b.MaxElapsedTime = time.Second, 1, 0, connListWait
	err = backoff.Retry(func() error {
		nodes, ok, err = m.connNodesOnce(ctx, conns)
		switch {
		case err != nil:
			return backoff.Permanent(err)
		case !ok:
			return errNotListed
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

// listenerNodes names the node of each of conns by its server port, when the overview's AMQP
// listeners give each port to one node only (nodes on one host); ok is false otherwise.
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

// errNotListed: a connection is not in the management API's connection list yet.
var errNotListed = errors.New("connection not listed")

func (m *Management) connNodesOnce(ctx context.Context, conns []*amqp.Connection) (nodes []string, ok bool, err error) {
	var raw []struct {
		Node     string `json:"node"`
		PeerPort int    `json:"peer_port"`
	}
	if err := m.get(ctx, "api/vhosts/"+url.PathEscape(m.vhost)+"/connections?columns=node,peer_port", &raw); err != nil {
		return nil, false, err
	}
	byPort := map[int][]string{}
	for _, c := range raw {
		byPort[c.PeerPort] = append(byPort[c.PeerPort], c.Node)
	}
	for _, c := range conns {
		a, isTCP := c.LocalAddr().(*net.TCPAddr)
		if !isTCP || len(byPort[a.Port]) != 1 {
			return nil, false, nil
		}
		nodes = append(nodes, byPort[a.Port][0])
	}
	return nodes, true, nil
}

// placeShards chooses, for each ladder queue of p that does not exist yet (exists: by the
// report's row key), the connection of conns to declare it through, so that it leads from a
// node that leads no other shard of the same queue (level and digit): the leaders of the shards
// that exist are read from the management API, and each missing shard takes the first node
// from its slot on (Queue.Slot, then Slot+1, ...) that none of its shards leads yet, or its
// slot's node when every node leads one (more shards than nodes). It returns nil, to place by
// slot alone, when the nodes of conns cannot be told (see connNodes).
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
		level, digit int
		lastHop      bool
		firstHop     bool
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
