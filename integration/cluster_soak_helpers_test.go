//go:build integration

package integration

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	neturl "net/url"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/delaykit/rabbitdelay/amqpdelay"
	"github.com/delaykit/rabbitdelay/internal/admin"
)

// soakFlag turns TestClusterSoak on (go test ... -args -soak); RABBITDELAY_SOAK=1 does too.
var soakFlag = flag.Bool("soak", false, "run TestClusterSoak (node kills on a 3-node cluster; minutes)")

func soakEnabled() bool {
	return *soakFlag || os.Getenv("RABBITDELAY_SOAK") == "1"
}

// soakEnvInt reads an integer knob of the soak from the environment.
func soakEnvInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

func soakEnvDur(name string, def time.Duration) time.Duration {
	if v, err := time.ParseDuration(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

// soakNodes reads the management API of every node from scripts/broker's state directory
// (node.env, node-2.env, ...: MGMT_PORT, NODENAME), node 1 first.
func soakNodes(t *testing.T, c *testCluster) (mgmt []string, names []string) {
	t.Helper()
	for i := 1; i <= len(c.URLs); i++ {
		f := filepath.Join(c.state, "node.env")
		if i > 1 {
			f = filepath.Join(c.state, fmt.Sprintf("node-%d.env", i))
		}
		fh, err := os.Open(f)
		if err != nil {
			t.Fatalf("node %d: %v", i, err)
		}
		kv := map[string]string{}
		sc := bufio.NewScanner(fh)
		for sc.Scan() {
			if k, v, ok := strings.Cut(sc.Text(), "="); ok {
				kv[k] = strings.Trim(v, `'"`)
			}
		}
		fh.Close()
		if kv["MGMT_PORT"] == "" || kv["NODENAME"] == "" {
			t.Fatalf("node %d: no MGMT_PORT or NODENAME in %s", i, f)
		}
		mgmt = append(mgmt, "http://guest:guest@127.0.0.1:"+kv["MGMT_PORT"]+"/")
		names = append(names, kv["NODENAME"])
	}
	return mgmt, names
}

// soakMgmt asks the management API of whichever node answers (the nodes in order, skipping
// the ones known down).
type soakMgmt struct {
	urls []string
	down []atomic.Bool
	hc   *http.Client
}

func newSoakMgmt(urls []string) *soakMgmt {
	return &soakMgmt{urls: urls, down: make([]atomic.Bool, len(urls)), hc: &http.Client{Timeout: 15 * time.Second}}
}

// get decodes GET path of the first node that answers into out.
func (m *soakMgmt) get(path string, out any) error {
	var last error
	for pass := 0; pass < 2; pass++ {
		for i, u := range m.urls {
			if pass == 0 && m.down[i].Load() {
				continue
			}
			pu, _ := neturl.Parse(u)
			pw, _ := pu.User.Password()
			req, _ := http.NewRequest("GET", strings.TrimSuffix(u, "/")+"/"+path, nil)
			req.SetBasicAuth(pu.User.Username(), pw)
			resp, err := m.hc.Do(req)
			if err != nil {
				last = err
				continue
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 {
				last = fmt.Errorf("GET %s: %s: %.200s", path, resp.Status, b)
				continue
			}
			return json.Unmarshal(b, out)
		}
	}
	return last
}

// management returns a admin.Management of vhost on the first node not known down.
func (m *soakMgmt) management(vhost string) *admin.Management {
	for i, u := range m.urls {
		if !m.down[i].Load() {
			tm, err := admin.NewManagement(u, vhost)
			if err == nil {
				return tm
			}
		}
	}
	tm, _ := admin.NewManagement(m.urls[0], vhost)
	return tm
}

// soakQueue is one queue's counts.
type soakQueue struct {
	Name        string `json:"name"`
	Type        string `json:"type"`
	Messages    int    `json:"messages"`
	MessagesDLX int    `json:"messages_dlx"`
	Leader      string `json:"leader"`
}

func (m *soakMgmt) queues(vhost string) ([]soakQueue, error) {
	var qs []soakQueue
	err := m.get("api/queues/"+neturl.PathEscape(vhost)+"?columns=name,type,messages,messages_dlx,leader", &qs)
	return qs, err
}

// held sums messages and messages_dlx over the vhost's queues (ready queue excluded; streams
// too: the spec and revocation streams hold records, not messages), and names the queues holding
// any.
func (m *soakMgmt) held(vhost, except string) (msgs, dlx int, where []string, err error) {
	qs, err := m.queues(vhost)
	if err != nil {
		return 0, 0, nil, err
	}
	for _, q := range qs {
		if q.Name == except || q.Type == "stream" {
			continue
		}
		msgs += q.Messages
		dlx += q.MessagesDLX
		if q.Messages > 0 || q.MessagesDLX > 0 {
			where = append(where, fmt.Sprintf("%s=%d(dlx %d, leader %s)", q.Name, q.Messages, q.MessagesDLX, q.Leader))
		}
	}
	return msgs, dlx, where, nil
}

// connectionNode returns the node of the connection whose client-provided name is name.
func (m *soakMgmt) connectionNode(name string) (string, error) {
	var cs []struct {
		Node             string `json:"node"`
		UserProvidedName string `json:"user_provided_name"`
		ClientProperties struct {
			ConnectionName string `json:"connection_name"`
		} `json:"client_properties"`
	}
	if err := m.get("api/connections?columns=node,user_provided_name,client_properties", &cs); err != nil {
		return "", err
	}
	for _, c := range cs {
		if c.UserProvidedName == name || c.ClientProperties.ConnectionName == name {
			return c.Node, nil
		}
	}
	return "", fmt.Errorf("no connection named %q", name)
}

// soakRecord is what the ledger knows of one message.
type soakRecord struct {
	due        time.Time
	hops       int
	confirmed  bool
	unknown    bool // Publish returned an error: may or may not be stored
	confirmAt  time.Time
	deliveries int
	redeliv    int // deliveries flagged redelivered by the broker
	first      time.Time
	early      time.Duration
	parked     string // reason, when found in the parking queue
}

// soakLedger accounts for every message of one run.
type soakLedger struct {
	mu   sync.Mutex
	recs map[string]*soakRecord
	// unexpected counts deliveries of ids the ledger never saw published.
	unexpected int
	// errs counts the Publish errors by message (digits dropped).
	errs map[string]int
}

func newSoakLedger() *soakLedger {
	return &soakLedger{recs: map[string]*soakRecord{}, errs: map[string]int{}}
}

func (l *soakLedger) rec(id string) *soakRecord {
	r := l.recs[id]
	if r == nil {
		r = &soakRecord{}
		l.recs[id] = r
	}
	return r
}

func (l *soakLedger) published(id string, rc amqpdelay.Receipt, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	r := l.rec(id)
	if err != nil {
		r.unknown = true
		msg := strings.Map(func(c rune) rune {
			if c >= '0' && c <= '9' {
				return '#'
			}
			return c
		}, err.Error())
		if len(msg) > 160 {
			msg = msg[:160]
		}
		l.errs[msg]++
		return
	}
	r.confirmed, r.due, r.hops, r.confirmAt = true, rc.Due, rc.Hops, time.Now()
}

func (l *soakLedger) delivered(d amqp.Delivery, at time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	r, ok := l.recs[d.MessageId]
	if !ok {
		// A delivery can beat Publish's return (the confirm travels back after routing): keep it.
		r = l.rec(d.MessageId)
	}
	r.deliveries++
	if d.Redelivered {
		r.redeliv++
	}
	if r.deliveries == 1 {
		r.first = at
		if due, ok := amqpdelay.Due(d); ok && at.Before(due) {
			r.early = due.Sub(at)
		}
	}
}

// missing counts confirmed messages not delivered nor parked.
func (l *soakLedger) missing() (n int, ids []string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for id, r := range l.recs {
		if r.confirmed && r.deliveries == 0 && r.parked == "" {
			n++
			if len(ids) < 20 {
				ids = append(ids, id)
			}
		}
	}
	sort.Strings(ids)
	return n, ids
}

func (l *soakLedger) lastDue() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	var last time.Time
	for _, r := range l.recs {
		if r.due.After(last) {
			last = r.due
		}
	}
	return last
}

// soakResult is one row of the report.
type soakResult struct {
	Fault                                    string
	Confirmed, Unknown, UnknownArrived       int
	Delivered, Parked, Lost, Held, Early     int
	Duplicates, DupRedelivered, DupBrokerNew int
	Unexpected                               int
	P50, P99, Max                            time.Duration
	LateOver10s                              int
	Note                                     string
}

func (l *soakLedger) result(fault string) soakResult {
	l.mu.Lock()
	defer l.mu.Unlock()
	res := soakResult{Fault: fault, Unexpected: l.unexpected}
	var late []time.Duration
	for _, r := range l.recs {
		switch {
		case r.confirmed:
			res.Confirmed++
		case r.unknown:
			res.Unknown++
			if r.deliveries > 0 || r.parked != "" {
				res.UnknownArrived++
			}
		default:
			if r.deliveries > 0 {
				res.Unexpected++
			}
		}
		if r.deliveries > 0 {
			res.Delivered++
			if r.early > 0 {
				res.Early++
			}
			if r.deliveries > 1 {
				res.Duplicates += r.deliveries - 1
				// A consumer-side redelivery (the delivery was not acked before the consumer's
				// connection was lost) carries the redelivered flag; a duplicate without it is a
				// second copy that the broker's dead-lettering produced.
				res.DupRedelivered += r.redeliv
				res.DupBrokerNew += r.deliveries - 1 - r.redeliv
			}
			if !r.due.IsZero() {
				late = append(late, r.first.Sub(r.due))
			}
		} else if r.parked != "" {
			res.Parked++
		} else if r.confirmed {
			res.Lost++ // for now: corrected by Held below
		}
	}
	slices.Sort(late)
	pct := func(p float64) time.Duration {
		if len(late) == 0 {
			return 0
		}
		return late[min(len(late)-1, int(p*float64(len(late))))]
	}
	res.P50, res.P99 = pct(0.50), pct(0.99)
	if len(late) > 0 {
		res.Max = late[len(late)-1]
	}
	for _, d := range late {
		if d > 10*time.Second {
			res.LateOver10s++
		}
	}
	return res
}

// soakConsumer consumes queue with manual acks (prefetch 200), dialing nodes in order (its
// own node first, the others when it is down) and reconnecting after every loss.
type soakConsumer struct {
	node atomic.Int32 // 1-based node it is connected to, 0 when none
	stop chan struct{}
	done chan struct{}
}

func startSoakConsumer(urls []string, prefer int, queue string, l *soakLedger) *soakConsumer {
	c := &soakConsumer{stop: make(chan struct{}), done: make(chan struct{})}
	order := []int{prefer}
	for i := 1; i <= len(urls); i++ {
		if i != prefer {
			order = append(order, i)
		}
	}
	go func() {
		defer close(c.done)
		for {
			select {
			case <-c.stop:
				return
			default:
			}
			var conn *amqp.Connection
			var node int
			for _, i := range order {
				cn, err := amqp.DialConfig(urls[i-1], amqp.Config{Dial: amqp.DefaultDial(2 * time.Second), Heartbeat: 5 * time.Second})
				if err == nil {
					conn, node = cn, i
					break
				}
			}
			if conn == nil {
				time.Sleep(200 * time.Millisecond)
				continue
			}
			ch, err := conn.Channel()
			var ds <-chan amqp.Delivery
			if err == nil {
				if err = ch.Qos(200, 0, false); err == nil {
					ds, err = ch.Consume(queue, "soak-consumer", false, false, false, false, nil)
				}
			}
			if err != nil {
				_ = conn.Close()
				time.Sleep(200 * time.Millisecond)
				continue
			}
			c.node.Store(int32(node))
		loop:
			for {
				select {
				case <-c.stop:
					_ = conn.Close()
					return
				case d, ok := <-ds:
					if !ok {
						break loop
					}
					l.delivered(d, time.Now())
					_ = d.Ack(false)
				}
			}
			c.node.Store(0)
			_ = conn.Close()
			// Its own node first again: back there once it is up.
		}
	}()
	return c
}

func (c *soakConsumer) close() { close(c.stop); <-c.done }

// soakPublishing publishes n messages at rate per second from workers goroutines, ids
// prefix-<i>, delays uniform in [minD, maxD], and records each outcome in l. Closing stop
// ends the publishing (publishes under way finish); ctx bounds each Publish.
func soakPublishing(ctx context.Context, stop <-chan struct{}, p *amqpdelay.Publisher, target, prefix string, n, rate, workers int, minD, maxD time.Duration, l *soakLedger) (wait func()) {
	jobs := make(chan int)
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range jobs {
				id := fmt.Sprintf("%s-%06d", prefix, i)
				delay := minD + time.Duration(rand.Int64N(int64(maxD-minD)))
				pctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
				rc, err := p.Publish(pctx, target, "k", amqp.Publishing{MessageId: id, ContentType: "text/plain", Body: []byte(id)}, delay)
				cancel()
				l.published(id, rc, err)
			}
		}()
	}
	go func() {
		defer close(jobs)
		tick := time.NewTicker(time.Second / time.Duration(rate))
		defer tick.Stop()
		for i := 0; i < n; i++ {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			select {
			case jobs <- i:
			case <-stop:
				return
			}
		}
	}()
	return wg.Wait
}

// drainParking takes every message of the parking queue (through any node) and marks it in
// the ledger with its reason; it returns how many it took.
func drainParking(urls []string, queue string, l *soakLedger) (int, error) {
	var last error
	for _, u := range urls {
		conn, err := clusterDial(u)
		if err != nil {
			last = err
			continue
		}
		defer conn.Close()
		ch, err := conn.Channel()
		if err != nil {
			last = err
			continue
		}
		n := 0
		for {
			d, ok, err := ch.Get(queue, false)
			if err != nil {
				return n, err
			}
			if !ok {
				return n, nil
			}
			reason := "parked"
			if v, ok := d.Headers["x-first-death-reason"].(string); ok {
				reason = v
			} else if xs, ok := d.Headers["x-death"].([]any); ok && len(xs) > 0 {
				if t, ok := xs[0].(amqp.Table); ok {
					reason = fmt.Sprint(t["reason"])
				}
			}
			if tg, ok := d.Headers["rabbitdelay-target"].(string); ok {
				reason += " (target " + tg + ")"
			}
			l.mu.Lock()
			l.rec(d.MessageId).parked = reason
			l.mu.Unlock()
			_ = d.Ack(false)
			n++
		}
	}
	return 0, last
}

// soakTable renders results as a Markdown table.
func soakTable(version string, rs []soakResult) string {
	var b strings.Builder
	fmt.Fprintf(&b, "\nRabbitMQ %s, 3 nodes\n\n", version)
	b.WriteString("| fault | confirmed | unknown (arrived) | delivered | parked | lost | held in queues | early | duplicates (redelivered / new copies) | lateness p50 | p99 | max | >10 s late | note |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	r1 := func(d time.Duration) string { return d.Round(10 * time.Millisecond).String() }
	for _, r := range rs {
		fmt.Fprintf(&b, "| %s | %d | %d (%d) | %d | %d | %d | %d | %d | %d (%d / %d) | %s | %s | %s | %d | %s |\n",
			r.Fault, r.Confirmed, r.Unknown, r.UnknownArrived, r.Delivered, r.Parked, r.Lost, r.Held, r.Early,
			r.Duplicates, r.DupRedelivered, r.DupBrokerNew, r1(r.P50), r1(r.P99), r1(r.Max), r.LateOver10s, r.Note)
	}
	return b.String()
}
