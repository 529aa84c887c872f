//go:build integration

package integration

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/delaykit/rabbitdelay/internal/delayspec"
	"github.com/delaykit/rabbitdelay/internal/route"
	"github.com/delaykit/rabbitdelay/ttlbuckets"
)

// plainLadder publishes ladder messages of the same shape as the Publisher's (the entry
// level's headers exchange, the digit, target and due headers that ttlbuckets computes,
// mandatory, persistent) with amqp091 alone: no amqpdelay code, one connection and channel in
// confirm mode per worker, each pipelining batches and waiting for the batch's confirms with
// amqp091's own DeferredConfirmation. A message counts as confirmed on an ack without a
// basic.return (amqp091 hands the return over before the ack; the return channel is buffered,
// so it is there when the ack is seen). Run next to the Publisher in TestClusterSoak
// (SOAK_PLAIN=1) it tells a loss of the broker from one of the Publisher: ids plain-<n>.
type plainLadder struct {
	urls    []string
	names   delayspec.Names
	ladder  ttlbuckets.Ladder
	target  string
	l       *soakLedger
	minD    time.Duration
	maxD    time.Duration
	prefer  atomic.Int32 // 1-based node dialed first
	gen     atomic.Int64 // bumped by moveTo: workers reconnect to prefer
	seq     atomic.Int64
	stop    chan struct{}
	wg      sync.WaitGroup
	onNode  []atomic.Int32 // each worker's node, 0 while not connected
	conns   []atomic.Pointer[amqp.Connection]
	returns atomic.Int64
}

// startPlainLadder starts workers publishing batches of batch messages each, rate messages
// per second in all, until close.
func startPlainLadder(urls []string, prefer int, spec delayspec.Spec, ladder ttlbuckets.Ladder, target string,
	minD, maxD time.Duration, workers, batch, rate int, l *soakLedger) *plainLadder {
	pl := &plainLadder{urls: urls, names: spec.Names(), ladder: ladder, target: target, l: l, minD: minD, maxD: maxD,
		stop: make(chan struct{}), onNode: make([]atomic.Int32, workers),
		conns: make([]atomic.Pointer[amqp.Connection], workers)}
	pl.prefer.Store(int32(prefer))
	every := time.Duration(float64(time.Second) * float64(batch*workers) / float64(rate))
	for w := range workers {
		pl.wg.Add(1)
		go func() { defer pl.wg.Done(); pl.worker(w, batch, every) }()
	}
	return pl
}

// moveTo makes every worker reconnect, to node i first: connections elsewhere are closed
// (their outstanding publishes count as unknown).
func (pl *plainLadder) moveTo(i int) {
	pl.prefer.Store(int32(i))
	pl.gen.Add(1)
	for w := range pl.conns {
		if c := pl.conns[w].Load(); c != nil && int(pl.onNode[w].Load()) != i {
			_ = c.Close()
		}
	}
}

// nodes lists the nodes the workers are connected to.
func (pl *plainLadder) nodes() string {
	var s []string
	for i := range pl.onNode {
		s = append(s, fmt.Sprint(pl.onNode[i].Load()))
	}
	return strings.Join(s, ",")
}

func (pl *plainLadder) close() {
	select {
	case <-pl.stop:
	default:
		close(pl.stop)
	}
	pl.wg.Wait()
}

func (pl *plainLadder) stopped() bool {
	select {
	case <-pl.stop:
		return true
	default:
		return false
	}
}

func (pl *plainLadder) dial() (*amqp.Connection, int) {
	first := int(pl.prefer.Load())
	order := []int{first}
	for i := 1; i <= len(pl.urls); i++ {
		if i != first {
			order = append(order, i)
		}
	}
	for _, i := range order {
		if conn, err := clusterDial(pl.urls[i-1]); err == nil {
			return conn, i
		}
	}
	return nil, 0
}

func (pl *plainLadder) worker(w, batch int, every time.Duration) {
	for !pl.stopped() {
		gen := pl.gen.Load()
		conn, node := pl.dial()
		if conn == nil {
			time.Sleep(200 * time.Millisecond)
			continue
		}
		ch, err := conn.Channel()
		if err == nil {
			err = ch.Confirm(false)
		}
		if err != nil {
			_ = conn.Close()
			time.Sleep(200 * time.Millisecond)
			continue
		}
		pl.onNode[w].Store(int32(node))
		pl.conns[w].Store(conn)
		if node == int(pl.prefer.Load()) {
			gen = pl.gen.Load() // already where moveTo wants it
		}
		returns := ch.NotifyReturn(make(chan amqp.Return, 4*batch))
		for err == nil && !pl.stopped() && pl.gen.Load() == gen {
			next := time.Now().Add(every)
			err = pl.publishBatch(ch, returns, batch)
			time.Sleep(time.Until(next))
		}
		pl.onNode[w].Store(0)
		pl.conns[w].Store(nil)
		_ = conn.Close()
	}
}

// publishBatch publishes batch messages, waits for their confirms and records the outcomes.
func (pl *plainLadder) publishBatch(ch *amqp.Channel, returns <-chan amqp.Return, batch int) error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	type sent struct {
		id   string
		due  time.Time
		hops int
		dc   *amqp.DeferredConfirmation
	}
	var out []sent
	var err error
	for range batch {
		id := fmt.Sprintf("plain-%06d", pl.seq.Add(1))
		d := pl.minD + time.Duration(rand.Int64N(int64(pl.maxD-pl.minD)))
		plan, perr := pl.ladder.Plan(d, ttlbuckets.RoundUp)
		if perr != nil {
			return perr
		}
		h := amqp.Table{}
		route.EncodeDigits(pl.ladder, plan, h)
		due := time.Now().Add(plan.Effective)
		h[route.TargetHeader] = pl.target
		h[route.DueHeader] = due.UnixMilli()
		s := sent{id: id, due: due, hops: len(plan.Hops)}
		s.dc, err = ch.PublishWithDeferredConfirmWithContext(ctx, pl.names.LadderExchange(plan.Entry), "k", true, false,
			amqp.Publishing{MessageId: id, ContentType: "text/plain", DeliveryMode: amqp.Persistent, Headers: h, Body: []byte(id)})
		out = append(out, s)
		if err != nil {
			break
		}
	}
	acks := make([]bool, len(out))
	for i, s := range out {
		if s.dc == nil {
			continue
		}
		ok, werr := s.dc.WaitContext(ctx)
		acks[i] = ok && werr == nil
		if !acks[i] && err == nil {
			err = fmt.Errorf("not confirmed: ack %v, %v", ok, werr)
		}
	}
	returned := map[string]bool{}
drain:
	for {
		select {
		case r, ok := <-returns:
			if !ok { // the channel is closed
				break drain
			}
			returned[r.MessageId] = true
			pl.returns.Add(1)
		default:
			break drain
		}
	}
	pl.l.mu.Lock()
	for i, s := range out {
		r := pl.l.rec(s.id)
		if acks[i] && !returned[s.id] {
			r.confirmed, r.due, r.hops, r.confirmAt = true, time.UnixMilli(s.due.UnixMilli()), s.hops, time.Now()
		} else {
			r.unknown = true
		}
	}
	pl.l.mu.Unlock()
	return err
}

// byPrefix counts the messages for which count returns true by id prefix (the part before
// the first '-'), as "plain 3, pubkills 1".
func (l *soakLedger) byPrefix(count func(*soakRecord) bool) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := map[string]int{}
	for id, r := range l.recs {
		if count(r) {
			p, _, _ := strings.Cut(id, "-")
			n[p]++
		}
	}
	var parts []string
	for p, k := range n {
		parts = append(parts, fmt.Sprintf("%s %d", p, k))
	}
	sort.Strings(parts)
	return strings.Join(parts, ", ")
}
