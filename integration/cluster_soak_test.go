//go:build integration

package integration

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/delaykit/rabbitdelay/amqpdelay"
	"github.com/delaykit/rabbitdelay/integration/brokertest"
	"github.com/delaykit/rabbitdelay/internal/admin"
	"github.com/delaykit/rabbitdelay/internal/delayspec"
)

// TestClusterSoak: node failures on a 3-node cluster while delayed messages flow, with every
// message accounted for. Each fault runs in a vhost of its own: `rabbitdelay apply` of a quorum
// topology (test ladder: 4 levels, radix 16, up to 65.5 s; the policy's
// queue-leader-locator balanced spreads the leaders), a direct target with a ready queue, a
// Publisher given the address list of the three nodes, a plain consumer (manual acks) on
// another node than the Publisher's that falls back to the other nodes while its own is down,
// and SOAK_MESSAGES messages (default 4,000) published at SOAK_RATE/s (default 100) with
// delays uniform in 5-60 s. The faults (SOAK_FAULTS, comma-separated, default all):
//
//	none       no fault
//	publisher  kill -9 the Publisher's node 10 s into the publishing, start it 30 s later
//	leader     the same with the node leading the most delay queues
//	consumer   the same with the consumer's node
//	permanent  kill -9 the node leading the most delay queues and keep it down: are due
//	           messages held in messages_dlx until it returns (SOAK_STALL_WAIT, default 3 min,
//	           after the last due time), then start it and account for everything
//	soak       SOAK_KILLS (default 6) kills of 30 s each, cycling over the leader's, the
//	           Publisher's and the consumer's node (each node killed at least twice), while
//	           messages flow at SOAK_SOAK_RATE/s (default 50)
//	pubkills   SOAK_KILLS kills of 30 s each, every one of the node the Publisher is connected
//	           to at that moment (so every kill makes it reconnect), at SOAK_SOAK_RATE/s
//
// Knobs of the Publisher: SOAK_CHANNELS (Config.Channels; default the Publisher's) and
// SOAK_WORKERS (publishing goroutines, default 16). SOAK_PLAIN=1 runs a plainLadder next to
// the Publisher at the same rate (ids plain-<n>: the same ladder messages published with
// amqp091 alone), connected to the node the fault kills, so that a loss can be told apart:
// the broker's if plain messages are lost too.
//
// Accounting: a confirmed message must be delivered (duplicates counted by id; a duplicate
// with the redelivered flag is the consumer's redelivery, one without it a second copy from
// the broker's dead-lettering) or parked in <prefix>.parking; what is neither is looked for
// in every queue's messages and messages_dlx; the rest is lost. A publish that returned an
// error is an unknown outcome (counted, with how many arrived anyway). Early is a delivery
// before its rabbitdelay-due header. The test fails on a lost or early message.
//
// Skipped unless a cluster is configured (AMQP_URLS of 3+ nodes and BROKER_STATE, as
// `scripts/broker env` exports them) and -soak or RABBITDELAY_SOAK=1 is given: `make soak`.
// SOAK_REPORT names a file to append the Markdown tables to.
func TestClusterSoak(t *testing.T) {
	if !soakEnabled() {
		t.Skip("a soak of minutes: run `make soak`, or go test -tags integration -run TestClusterSoak ./integration -args -soak (or RABBITDELAY_SOAK=1) under a 3-node cluster")
	}
	c := getCluster(t)
	mgmtURLs, names := soakNodes(t, c)
	m := newSoakMgmt(mgmtURLs)
	version := os.Getenv("RABBITMQ_VERSION")
	faults := strings.Split(os.Getenv("SOAK_FAULTS"), ",")
	if os.Getenv("SOAK_FAULTS") == "" {
		faults = []string{"none", "publisher", "leader", "consumer", "permanent", "soak"}
	}
	var results []soakResult
	for _, f := range faults {
		f = strings.TrimSpace(f)
		t.Run(f, func(t *testing.T) {
			r := &soakRun{t: t, c: c, m: m, names: names, fault: f}
			res := r.run()
			results = append(results, res)
			t.Logf("RESULT %s: %+v", f, res)
			if res.Lost > 0 {
				t.Errorf("%s: %d confirmed messages lost", f, res.Lost)
			}
			if res.Early > 0 {
				t.Errorf("%s: %d messages delivered early", f, res.Early)
			}
		})
	}
	table := soakTable(version, results)
	t.Log(table)
	if f := os.Getenv("SOAK_REPORT"); f != "" {
		if fh, err := os.OpenFile(f, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644); err == nil {
			_, _ = fh.WriteString(table)
			fh.Close()
		}
	}
}

// soakRun is one fault's run.
type soakRun struct {
	t       *testing.T
	c       *testCluster
	m       *soakMgmt
	names   []string
	fault   string
	env     *brokertest.Env
	plan    *admin.Plan
	target  string
	ready   string
	pubName string
	p       *amqpdelay.Publisher
	ev      *events
	cons    *soakConsumer
	spec    delayspec.Spec
	plain   *plainLadder
	l       *soakLedger
	start   time.Time
	notes   []string
	mu      sync.Mutex
	kills   []string
	down    map[int]bool
	killCnt map[int]int
}

func (r *soakRun) note(format string, a ...any) {
	s := fmt.Sprintf(format, a...)
	r.t.Logf("+%v %s", time.Since(r.start).Round(100*time.Millisecond), s)
	r.mu.Lock()
	r.notes = append(r.notes, s)
	r.mu.Unlock()
}

func (r *soakRun) urls() []string { return r.c.vhostURLs(r.env.VHost) }

func (r *soakRun) nodeIndex(name string) int {
	for i, n := range r.names {
		if n == name {
			return i + 1
		}
	}
	return r.c.nodeOf(name)
}

func (r *soakRun) kill(i int, role string) {
	r.m.down[i-1].Store(true)
	r.down[i] = true
	r.killCnt[i]++
	r.c.kill(r.t, i)
	r.note("killed node %d (%s) [%s]", i, r.names[i-1], role)
}

func (r *soakRun) restart(i int) {
	t0 := time.Now()
	// A node of a 2-core machine running three may not see the others within
	// scripts/broker's deadline: try again before giving up on the run.
	if out, err := r.c.script("start-node", fmt.Sprint(i)); err != nil {
		r.note("start-node %d: %v: %s; trying again", i, err, clusterTailLine(out))
		r.c.startNode(r.t, i)
	}
	r.m.down[i-1].Store(false)
	delete(r.down, i)
	r.note("node %d started again (start-node took %v)", i, time.Since(t0).Round(time.Second))
}

// leaderNode is the node leading the most delay queues (any when the API does not answer).
func (r *soakRun) leaderNode() int {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cs, err := r.m.management(r.env.VHost).Cluster(ctx, r.plan)
	if err != nil {
		r.note("leaders: %v", err)
		return 2
	}
	best, bestN := 0, -1
	var parts []string
	for _, n := range cs.Nodes {
		parts = append(parts, fmt.Sprintf("%s:%d", n.Name, n.DelayQueues))
		if i := r.nodeIndex(n.Name); i > 0 && !r.down[i] && n.DelayQueues > bestN {
			best, bestN = i, n.DelayQueues
		}
	}
	r.note("delay-queue leaders %s", strings.Join(parts, " "))
	if best == 0 {
		best = 2
	}
	return best
}

// publisherNode is the node of the Publisher's connection (the management API's view).
func (r *soakRun) publisherNode() int {
	deadline := time.Now().Add(30 * time.Second)
	for {
		n, err := r.m.connectionNode(r.pubName)
		if err == nil {
			if i := r.nodeIndex(n); i > 0 && !r.down[i] {
				return i
			}
		}
		if time.Now().After(deadline) {
			r.note("publisher's node unknown: %v", err)
			return 1
		}
		time.Sleep(time.Second)
	}
}

func (r *soakRun) setup() {
	t := r.t
	r.env = brokertest.NewEnv(t)
	r.target = r.env.Name("orders")
	r.ready = r.env.Name("ready")
	spec := delayspec.Spec{
		Prefix:      r.env.Prefix,
		Targets:     delayspec.Targets{{Name: r.target, Type: "direct"}},
		Ladder:      testLadder(),
		Plugin:      delayspec.PluginOff,
		QueueType:   delayspec.Quorum,
		ReadyQueues: delayspec.ReadyQueues{{Queue: r.ready, Exchange: r.target, BindingKey: "k"}},
	}
	p, err := admin.NewPlan(spec)
	if err != nil {
		t.Fatal(err)
	}
	r.plan = p
	r.spec = spec
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	conn, err := clusterDial(r.c.nodeURL(1, r.env.VHost))
	if err != nil {
		t.Fatalf("dial node 1: %v", err)
	}
	if _, err := admin.Apply(ctx, conn, p, admin.ApplyOptions{Management: r.m.management(r.env.VHost)}); err != nil {
		t.Fatalf("rabbitdelay apply: %v", err)
	}
	_ = conn.Close()
	// Every quorum queue led, every member online.
	deadline := time.Now().Add(5 * time.Minute)
	for {
		cs, err := r.m.management(r.env.VHost).Cluster(ctx, p)
		if err == nil && len(cs.Degraded) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("topology not healthy after 5 min: %v %+v", err, cs)
		}
		time.Sleep(2 * time.Second)
	}
	r.ev = &events{}
	r.pubName = "soak-publisher-" + r.env.Prefix
	pcfg := amqpdelay.Config{ConnectionName: r.pubName, OnReconnect: r.ev.add, ReconnectMin: 50 * time.Millisecond, ReconnectMax: time.Second}
	if n := soakEnvInt("SOAK_CHANNELS", 0); n > 0 {
		pcfg.Channels = n
	}
	r.p = newPublisherURL(t, strings.Join(r.urls(), ","), spec, pcfg)
	pn := r.publisherNode()
	cn := pn%len(r.c.URLs) + 1
	r.l = newSoakLedger()
	r.cons = startSoakConsumer(r.urls(), cn, r.ready, r.l)
	t.Cleanup(r.cons.close)
	r.note("vhost %s: Publisher on node %d (channels %d, workers %d), consumer on node %d", r.env.VHost, pn,
		soakEnvInt("SOAK_CHANNELS", 0), soakEnvInt("SOAK_WORKERS", 16), cn)
}

func (r *soakRun) run() soakResult {
	t := r.t
	r.start = time.Now()
	r.down = map[int]bool{}
	r.killCnt = map[int]int{}
	t.Cleanup(func() { // leave the cluster whole for the next run
		for i := range r.down {
			if out, err := r.c.script("start-node", fmt.Sprint(i)); err != nil {
				t.Logf("start-node %d after the run: %v\n%s", i, err, out)
			}
			r.m.down[i-1].Store(false)
		}
	})
	r.setup()

	n := soakEnvInt("SOAK_MESSAGES", 4000)
	rate := soakEnvInt("SOAK_RATE", 100)
	downFor := soakEnvDur("SOAK_DOWN", 30*time.Second)
	minD, maxD := 5*time.Second, 60*time.Second
	if r.fault == "soak" || r.fault == "pubkills" {
		rate = soakEnvInt("SOAK_SOAK_RATE", 50)
		n = 1 << 30 // until the kills are done
	}
	if os.Getenv("SOAK_PLAIN") == "1" {
		r.plain = startPlainLadder(r.urls(), r.publisherNode(), r.spec, testLadder(), r.target, minD, maxD, 4, 10, rate, r.l)
		defer r.plain.close()
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stop := make(chan struct{})
	var stopOnce sync.Once
	stopPub := func() { stopOnce.Do(func() { close(stop) }) }
	wait := soakPublishing(ctx, stop, r.p, r.target, r.fault, n, rate, soakEnvInt("SOAK_WORKERS", 16), minD, maxD, r.l)
	var stall string

	switch r.fault {
	case "none":
	case "publisher", "leader", "consumer":
		time.Sleep(10 * time.Second)
		var victim int
		switch r.fault {
		case "publisher":
			victim = r.publisherNode()
			r.movePlain(victim)
		case "leader":
			victim = r.leaderNode()
		case "consumer":
			victim = int(r.cons.node.Load())
			if victim == 0 {
				victim = 3
			}
		}
		r.kill(victim, r.fault)
		time.Sleep(downFor)
		r.restart(victim)
	case "permanent":
		time.Sleep(10 * time.Second)
		victim := r.leaderNode()
		r.kill(victim, "leader, kept down")
		wait()
		lastDue := r.l.lastDue()
		r.note("publishing done; last due %v from now", time.Until(lastDue).Round(time.Second))
		time.Sleep(time.Until(lastDue.Add(30 * time.Second)))
		observe := soakEnvDur("SOAK_STALL_WAIT", 3*time.Minute)
		end := time.Now().Add(observe)
		var firstStuck, lastStuck, lastDLX int
		var where []string
		recovered := time.Duration(-1)
		for i := 0; ; i++ {
			miss, _ := r.l.missing()
			_, dlx, w, err := r.m.held(r.env.VHost, r.ready)
			if err != nil {
				r.note("queues: %v", err)
			}
			if i == 0 {
				firstStuck = miss
				r.note("30 s after the last due time, node %d down: %d confirmed messages not delivered, messages_dlx %d in %v", victim, miss, dlx, w)
			}
			lastStuck, lastDLX, where = miss, dlx, w
			if miss == 0 && dlx == 0 {
				recovered = time.Since(lastDue)
				break
			}
			if time.Now().After(end) {
				break
			}
			time.Sleep(5 * time.Second)
		}
		if recovered >= 0 {
			stall = fmt.Sprintf("node %d down: every due message delivered without it (%v after the last due time; %d were outstanding at +30 s)", victim, recovered.Round(time.Second), firstStuck)
		} else {
			stall = fmt.Sprintf("node %d down: %d messages still held %v after the last due time (messages_dlx %d: %s)", victim, lastStuck, time.Since(lastDue).Round(time.Second), lastDLX, strings.Join(where, " "))
		}
		r.note("STALL: %s", stall)
		back := time.Now()
		r.restart(victim)
		for {
			miss, _ := r.l.missing()
			_, dlx, _, _ := r.m.held(r.env.VHost, r.ready)
			if miss == 0 && dlx == 0 {
				r.note("STALL: all delivered %v after start-node returned", time.Since(back).Round(time.Second))
				stall += fmt.Sprintf("; after restart, all delivered within %v", time.Since(back).Round(time.Second))
				break
			}
			if time.Since(back) > 5*time.Minute {
				r.note("STALL: %d still missing, messages_dlx %d, 5 min after the restart", miss, dlx)
				break
			}
			time.Sleep(2 * time.Second)
		}
	case "pubkills":
		for k := 0; k < soakEnvInt("SOAK_KILLS", 6); k++ {
			time.Sleep(10 * time.Second)
			victim := r.publisherNode()
			r.movePlain(victim)
			r.kill(victim, "publisher")
			time.Sleep(downFor)
			r.restart(victim)
		}
		time.Sleep(10 * time.Second)
		stopPub()
		r.note("kills per node: %v", r.killCnt)
	case "soak":
		kills := soakEnvInt("SOAK_KILLS", 6)
		roles := []string{"leader", "publisher", "consumer"}
		for k := 0; k < kills; k++ {
			time.Sleep(15 * time.Second)
			role := roles[k%3]
			var victim int
			switch role {
			case "leader":
				victim = r.leaderNode()
			case "publisher":
				victim = r.publisherNode()
			case "consumer":
				victim = int(r.cons.node.Load())
			}
			// Every node killed about as often as the others.
			least := 1
			for i := 1; i <= len(r.c.URLs); i++ {
				if r.killCnt[i] < r.killCnt[least] {
					least = i
				}
			}
			if victim == 0 || r.killCnt[victim] > r.killCnt[least] {
				r.note("role %s is node %d (killed %d times); node %d instead", role, victim, r.killCnt[victim], least)
				victim, role = least, role+" (rotated)"
			}
			r.kill(victim, role)
			time.Sleep(downFor)
			r.restart(victim)
		}
		time.Sleep(10 * time.Second)
		stopPub()
		r.note("kills per node: %v", r.killCnt)
	}
	wait()
	stopPub()
	if r.plain != nil {
		r.plain.close()
		r.note("plain publisher: %d returned", r.plain.returns.Load())
	}

	// Everything due delivered, or a generous deadline.
	lastDue := r.l.lastDue()
	deadline := lastDue.Add(soakEnvDur("SOAK_GRACE", 3*time.Minute))
	for {
		miss, _ := r.l.missing()
		if miss == 0 && time.Now().After(lastDue) {
			break
		}
		if time.Now().After(deadline) {
			break
		}
		time.Sleep(2 * time.Second)
	}
	time.Sleep(5 * time.Second) // late duplicates
	parked, err := drainParking(r.urls(), r.env.Name("parking"), r.l)
	if err != nil {
		r.note("parking queue: %v", err)
	}
	time.Sleep(6 * time.Second) // the management API's statistics interval
	msgs, dlx, where, err := r.m.held(r.env.VHost, "")
	if err != nil {
		r.note("queues: %v", err)
	}
	res := r.l.result(r.fault)
	res.Held = msgs
	if res.Lost > 0 {
		miss, ids := r.l.missing()
		r.note("%d confirmed messages neither delivered nor parked; queues hold %d (messages_dlx %d): %v", miss, msgs, dlx, where)
		r.describe(ids)
		res.Lost = max(0, res.Lost-msgs)
	}
	r.note("confirmed by publisher: %s; not delivered nor parked: %s",
		r.l.byPrefix(func(r *soakRecord) bool { return r.confirmed }),
		r.l.byPrefix(func(r *soakRecord) bool { return r.confirmed && r.deliveries == 0 && r.parked == "" }))
	var ks []string
	r.mu.Lock()
	for _, s := range r.notes {
		if strings.HasPrefix(s, "killed") {
			ks = append(ks, strings.SplitN(s, " (", 2)[0]+" ["+strings.SplitN(s, "[", 2)[1])
		}
	}
	r.mu.Unlock()
	res.Note = strings.Join(ks, "; ")
	if stall != "" {
		res.Note += "; " + stall
	}
	if parked > 0 {
		res.Note += fmt.Sprintf("; %d parked", parked)
	}
	res.Note += fmt.Sprintf("; %d publisher reconnect events", r.ev.count())
	r.l.mu.Lock()
	for e, k := range r.l.errs {
		r.t.Logf("Publish error x%d: %s", k, e)
	}
	r.l.mu.Unlock()
	return res
}

// movePlain moves the plain publisher's connections (SOAK_PLAIN) to node i, 5 s before i is
// killed.
func (r *soakRun) movePlain(i int) {
	if r.plain == nil {
		return
	}
	r.plain.moveTo(i)
	time.Sleep(5 * time.Second)
	r.note("plain publisher's workers on nodes %s", r.plain.nodes())
}

// describe logs what the ledger knows of the missing ids.
func (r *soakRun) describe(ids []string) {
	r.l.mu.Lock()
	defer r.l.mu.Unlock()
	for _, id := range ids {
		rc := r.l.recs[id]
		r.t.Logf("missing %s: confirmed at +%v, due at +%v, %d hops", id,
			rc.confirmAt.Sub(r.start).Round(time.Millisecond), rc.due.Sub(r.start).Round(time.Millisecond), rc.hops)
	}
}

// TestClusterSoakDeadLetterRepro is the plain-queue reproduction of fault "leader" of
// TestClusterSoak, without rabbitdelay code: a chain of four quorum queues with at-least-once
// dead-lettering through the default exchange (hop1 TTL 2 s, hop2 3 s, hop3 4 s, hop4 5 s, then
// sink, a plain quorum queue), hop1 and hop3 led by node 2, hop2 and sink by node 1, hop4 by
// node 3 (each declared through its node's connection), confirmed persistent publishes (from
// 8 channels, each pipelining batches of 25) to hop1 through node 2, or node 1 while node 2 is
// down, for 60 s, node 2 killed 10 s in and started again 30 s later, the sink consumed through node 3. Every confirmed body
// must reach the sink (duplicates counted). Same gate as TestClusterSoak.
func TestClusterSoakDeadLetterRepro(t *testing.T) {
	if !soakEnabled() {
		t.Skip("see TestClusterSoak")
	}
	c := getCluster(t)
	mgmtURLs, _ := soakNodes(t, c)
	m := newSoakMgmt(mgmtURLs)
	env := brokertest.NewEnv(t)
	hops := []string{env.Name("hop1"), env.Name("hop2"), env.Name("hop3"), env.Name("hop4")}
	sink := env.Name("sink")
	declare := func(node int, name string, args amqp.Table) {
		conn, err := clusterDial(c.nodeURL(node, env.VHost))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		ch, err := conn.Channel()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := ch.QueueDeclare(name, true, false, false, false, args); err != nil {
			t.Fatalf("declare %s: %v", name, err)
		}
	}
	dl := func(ttl int, next string) amqp.Table {
		return amqp.Table{"x-queue-type": "quorum", "x-message-ttl": int32(ttl), "x-dead-letter-exchange": "",
			"x-dead-letter-routing-key": next, "x-dead-letter-strategy": "at-least-once", "x-overflow": "reject-publish"}
	}
	declare(1, sink, amqp.Table{"x-queue-type": "quorum"})
	declare(3, hops[3], dl(5000, sink))
	declare(2, hops[2], dl(4000, hops[3]))
	declare(1, hops[1], dl(3000, hops[2]))
	declare(2, hops[0], dl(2000, hops[1]))
	time.Sleep(6 * time.Second)
	for _, q := range append(hops, sink) {
		info, err := c.queueMembers(env.VHost, q)
		t.Logf("%s: leader %s members %v (%v)", q, info.Leader, info.Members, err)
	}

	l := newSoakLedger()
	cons := startSoakConsumer([]string{c.nodeURL(3, env.VHost), c.nodeURL(1, env.VHost), c.nodeURL(2, env.VHost)}, 1, sink, l)
	defer cons.close()

	start := time.Now()
	const publishFor = 60 * time.Second
	var confirmedAt sync.Map
	var pubErrs []string
	var errMu sync.Mutex
	// workers goroutines, each with a channel of its own through node 2 (node 1 while node 2
	// is down), publish in batches of 25 (pipelined: 25 publishes outstanding) and wait for
	// the batch's confirms, like the Publisher's concurrent publishes.
	const workers, batch = 8, 25
	pub := func(w int) {
		seq := 0
		for time.Since(start) < publishFor {
			conn, err := clusterDial(c.nodeURL(2, env.VHost))
			if err != nil {
				conn, err = clusterDial(c.nodeURL(1, env.VHost))
			}
			if err != nil {
				time.Sleep(200 * time.Millisecond)
				continue
			}
			ch, err := conn.Channel()
			if err == nil {
				err = ch.Confirm(false)
			}
			for err == nil && time.Since(start) < publishFor {
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				var ids []string
				var dcs []*amqp.DeferredConfirmation
				for range batch {
					id := fmt.Sprintf("r-%d-%06d", w, seq)
					seq++
					dc, perr := ch.PublishWithDeferredConfirmWithContext(ctx, "", hops[0], false, false,
						amqp.Publishing{DeliveryMode: amqp.Persistent, MessageId: id, Body: []byte(id)})
					ids = append(ids, id)
					dcs = append(dcs, dc)
					if perr != nil {
						err = perr
						break
					}
				}
				for k, id := range ids {
					var ok bool
					var werr error
					if dcs[k] != nil {
						ok, werr = dcs[k].WaitContext(ctx)
					} else {
						werr = err
					}
					l.mu.Lock()
					r := l.rec(id)
					if werr == nil && ok {
						r.confirmed, r.confirmAt = true, time.Now()
						confirmedAt.Store(id, time.Since(start))
					} else {
						r.unknown = true
						errMu.Lock()
						pubErrs = append(pubErrs, fmt.Sprintf("%s at +%v: ack %v, %v", id, time.Since(start).Round(time.Millisecond), ok, werr))
						errMu.Unlock()
						if err == nil {
							err = fmt.Errorf("not confirmed")
						}
					}
					l.mu.Unlock()
				}
				cancel()
				time.Sleep(500 * time.Millisecond) // at most about 400 publishes/s in all
			}
			_ = conn.Close()
		}
	}
	done := make(chan struct{})
	var pwg sync.WaitGroup
	for w := range workers {
		pwg.Add(1)
		go func() { defer pwg.Done(); pub(w) }()
	}
	go func() { pwg.Wait(); close(done) }()
	time.Sleep(10 * time.Second)
	m.down[1].Store(true)
	c.kill(t, 2)
	killedAt := time.Since(start)
	time.Sleep(30 * time.Second)
	c.startNode(t, 2)
	m.down[1].Store(false)
	restartedAt := time.Since(start)
	<-done
	deadline := time.Now().Add(3 * time.Minute)
	for time.Now().Before(deadline) {
		if n, _ := l.missing(); n == 0 {
			break
		}
		time.Sleep(2 * time.Second)
	}
	time.Sleep(6 * time.Second)
	msgs, dlx, where, _ := m.held(env.VHost, sink)
	res := l.result("repro")
	n, ids := l.missing()
	t.Logf("repro (node 2 killed at +%v, back at +%v): confirmed %d, unknown %d (%d arrived), delivered %d, duplicates %d (redelivered %d), missing %d %v; queues hold %d (dlx %d) %v",
		killedAt.Round(time.Millisecond), restartedAt.Round(time.Millisecond), res.Confirmed, res.Unknown, res.UnknownArrived, res.Delivered, res.Duplicates, res.DupRedelivered, n, ids, msgs, dlx, where)
	t.Logf("%d publishes not confirmed (unknown outcome); the first ones:", len(pubErrs))
	for _, e := range pubErrs[:min(len(pubErrs), 10)] {
		t.Logf("publish error: %s", e)
	}
	for _, id := range ids {
		at, _ := confirmedAt.Load(id)
		t.Logf("missing %s confirmed at +%v", id, at)
	}
	if n > msgs+dlx {
		t.Errorf("%d confirmed messages lost", n-msgs-dlx)
	}
}
