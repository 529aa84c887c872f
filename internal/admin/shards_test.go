package admin

import (
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/delaykit/rabbitdelay/internal/delayspec"
	"github.com/delaykit/rabbitdelay/internal/route"
	"github.com/delaykit/rabbitdelay/ttlbuckets"
)

// shardSpec is a small quorum spec (radix 4, 3 levels: 9 ladder queues) with three copies of
// the ladder.
func shardSpec() delayspec.Spec {
	return delayspec.Spec{Prefix: "sh", Targets: delayspec.Targets{{Name: "orders", Type: "topic"}}, Shards: 3,
		Ladder: ttlbuckets.Ladder{Radix: 4, Max: 63 * time.Millisecond}, Plugin: delayspec.PluginOff}
}

// TestPlanShardsCopies: every copy is a whole chain of its own (exchanges, queues with the same
// TTLs, bindings), each copy's queues dead-letter into the same copy's next level and the last
// level into D; shard 0 keeps the names of a topology with one ladder; the shards marker is a
// marker.
func TestPlanShardsCopies(t *testing.T) {
	s := shardSpec()
	p := mustPlan(t, s)
	one := s
	one.Shards = 0
	p1 := mustPlan(t, one)
	n := p.Names
	if got, want := len(p.DelayQueues()), 3*len(p1.DelayQueues()); got != want {
		t.Fatalf("%d delay queues, want %d", got, want)
	}
	// Copy 0 is exactly the one-ladder topology's ladder.
	for _, q := range p1.DelayQueues() {
		got, ok := p.Queue(q.Name)
		if !ok || got.Shard != 0 || got.DeadLetterExchange != q.DeadLetterExchange || FormatArgs(got.Args) != FormatArgs(q.Args) {
			t.Errorf("shard 0 of %s: %+v, want %+v", q.Name, got, q)
		}
	}
	levels := p.Ladder.Levels()
	for k := 1; k < 3; k++ {
		for l := range levels {
			if _, ok := p.Exchange(n.LadderExchangeShard(l, k)); !ok {
				t.Errorf("no exchange %s", n.LadderExchangeShard(l, k))
			}
			for d := 1; d <= 3; d++ {
				q, ok := p.Queue(n.LadderQueueShard(l, d, k))
				if !ok {
					t.Fatalf("no queue %s", n.LadderQueueShard(l, d, k))
				}
				base, _ := p.Queue(n.LadderQueue(l, d))
				want := n.Dispatch()
				if next, ok := route.Next(p.Ladder, l); ok {
					want = n.LadderExchangeShard(next, k)
				}
				if q.TTL != base.TTL || q.DeadLetterExchange != want || q.Args["x-dead-letter-exchange"] != want || q.Shard != k {
					t.Errorf("queue %s: ttl %d dlx %s shard %d; want ttl %d dlx %s shard %d", q.Name, q.TTL, q.DeadLetterExchange, q.Shard, base.TTL, want, k)
				}
			}
		}
	}
	if !strings.HasSuffix(n.LadderExchangeShard(2, 1), ".ladder.02.s1") || n.LadderQueueShard(2, 3, 2) != "sh.ladder.02.03.s2" ||
		n.LadderQueueShard(2, 3, 0) != n.LadderQueue(2, 3) || n.LadderExchangeShard(1, 0) != n.LadderExchange(1) {
		t.Errorf("copy names: %s %s", n.LadderExchangeShard(2, 1), n.LadderQueueShard(2, 3, 2))
	}
	// Every binding out of a copy's exchange stays in that copy (or goes to D).
	for _, b := range p.Bindings {
		if b.Role != RoleLadder {
			continue
		}
		src, _ := p.Exchange(b.Source)
		if src.Shard == 0 {
			if strings.Contains(b.Destination, ".s") {
				t.Errorf("binding %s leaves shard 0", b)
			}
			continue
		}
		dest := strings.TrimSuffix(strings.TrimSuffix(b.Destination, ".last"), ".first")
		if suffix := ".s" + string(rune('0'+src.Shard)); !strings.HasSuffix(dest, suffix) && b.Destination != n.Dispatch() {
			t.Errorf("binding %s leaves copy %d", b, src.Shard)
		}
	}
	// Every copy has its last-hop queues.
	lastHop := 0
	for _, q := range p.Queues {
		if q.LastHop {
			lastHop++
			if want := n.LadderLastHopQueueShard(q.Level, q.Digit, q.Shard); q.Name != want || q.DeadLetterExchange != n.Dispatch() {
				t.Errorf("last-hop queue %s (dead-letters to %s), want %s dead-lettering to %s", q.Name, q.DeadLetterExchange, want, n.Dispatch())
			}
		}
	}
	if want := 3 * (levels - 1) * 3; lastHop != want {
		t.Errorf("%d last-hop queues, want %d (3 digits of levels - 1 levels per copy)", lastHop, want)
	}
	if !n.Reserved(n.LadderQueueShard(0, 1, 1)) {
		t.Errorf("copy names are not reserved")
	}
}

// TestPlanShardsPlacement: with copies, the copies of one ladder queue have consecutive slots
// (different nodes for up to as many nodes as copies), and the delay-queue policy leaves the
// leader locator out (Apply places the queues); with one ladder, no slots and balanced.
func TestPlanShardsPlacement(t *testing.T) {
	p := mustPlan(t, shardSpec())
	slots := map[[3]int][]int{} // level, digit, last-hop queue (1), first-hop queue (2) or neither (0)
	for _, q := range p.Queues {
		if q.Role != RoleLadder {
			if q.Slot != -1 {
				t.Errorf("%s: slot %d, want -1", q.Name, q.Slot)
			}
			continue
		}
		k := [3]int{q.Level, q.Digit, 0}
		if q.LastHop {
			k[2] = 1
		}
		if q.FirstHop {
			k[2] = 2
		}
		slots[k] = append(slots[k], q.Slot)
	}
	perNode := map[int]int{}
	for ld, s := range slots {
		seen := map[int]bool{}
		for _, x := range s {
			if seen[x%3] {
				t.Errorf("level %d digit %d: slots %v share a node of 3", ld[0], ld[1], s)
			}
			seen[x%3] = true
			perNode[x%3]++
		}
	}
	if perNode[0] != perNode[1] || perNode[1] != perNode[2] {
		t.Errorf("ladder queues per node of 3: %v, want even", perNode)
	}
	if _, ok := p.Policies[0].Definition["queue-leader-locator"]; ok {
		t.Errorf("policy with copies: %v, want no queue-leader-locator", p.Policies[0].Definition)
	}
	one := shardSpec()
	one.Shards = 1
	p1 := mustPlan(t, one)
	for _, q := range p1.Queues {
		if q.Slot != -1 {
			t.Errorf("one ladder: %s slot %d", q.Name, q.Slot)
		}
	}
	if p1.Policies[0].Definition["queue-leader-locator"] != LeaderLocatorBalanced {
		t.Errorf("policy with one ladder: %v", p1.Policies[0].Definition)
	}
	// The policy and the rebalance command cover the copies.
	pol := regexp.MustCompile(p.Policies[0].Pattern)
	cmd := p.RebalanceCommand("")
	re := regexp.MustCompile(cmd[strings.Index(cmd, "--queue-pattern '")+len("--queue-pattern '") : len(cmd)-1])
	for _, q := range p.DelayQueues() {
		if !pol.MatchString(q.Name) || !re.MatchString(q.Name) {
			t.Errorf("%s: policy pattern %v, rebalance pattern %v", q.Name, pol.MatchString(q.Name), re.MatchString(q.Name))
		}
	}
}

// TestSpecShardsValidate: 0 means 1; 1..MaxShards are valid; others are refused.
func TestSpecShardsValidate(t *testing.T) {
	s := shardSpec()
	for _, n := range []int{0, 1, 2, delayspec.MaxShards} {
		s.Shards = n
		if err := s.Validate(); err != nil {
			t.Errorf("Shards %d: %v", n, err)
		}
	}
	for _, n := range []int{-1, delayspec.MaxShards + 1} {
		s.Shards = n
		if err := s.Validate(); err == nil || !strings.Contains(err.Error(), "shards") {
			t.Errorf("Shards %d: %v, want an error about shards", n, err)
		}
	}
	if got := (delayspec.Spec{}).WithDefaults().Shards; got != 1 {
		t.Errorf("default Shards %d, want 1", got)
	}
}

// TestSharedLeaders: copies of one queue led by one node are reported, others not.
func TestSharedLeaders(t *testing.T) {
	p := mustPlan(t, shardSpec())
	all := []string{nodeA, nodeB, nodeC}
	qs := map[string]ManagedQueue{}
	for _, q := range p.Queues {
		qs[q.Name] = ManagedQueue{Name: q.Name, Type: "quorum", Leader: all[max(q.Slot, 0)%3], Members: all, Online: all}
	}
	if c := clusterOf(p, qs, nil, nil); len(c.SharedLeaders) != 0 {
		t.Fatalf("placed by slot: shared %+v", c.SharedLeaders)
	}
	n := p.Names
	q := qs[n.LadderQueueShard(1, 2, 2)]
	q.Leader = qs[n.LadderQueue(1, 2)].Leader
	qs[q.Name] = q
	c := clusterOf(p, qs, nil, nil)
	if len(c.SharedLeaders) != 1 || c.SharedLeaders[0].Level != 1 || c.SharedLeaders[0].Digit != 2 ||
		strings.Join(c.SharedLeaders[0].Queues, ",") != n.LadderQueue(1, 2)+","+n.LadderQueueShard(1, 2, 2) {
		t.Errorf("shared: %+v", c.SharedLeaders)
	}
}

// TestPlanShardsTopFirst: with the top-first and top-split orders every copy has its own
// first-hop queues (every digit of every level above 0), each dead-lettering into level 0's
// exchange of the same copy, with a slot no other delay queue of its copy has.
func TestPlanShardsTopFirst(t *testing.T) {
	for _, order := range []ttlbuckets.Order{ttlbuckets.TopFirst, ttlbuckets.TopSplit} {
		t.Run(order.String(), func(t *testing.T) { testPlanShardsFirstHop(t, order) })
	}
}

func testPlanShardsFirstHop(t *testing.T, order ttlbuckets.Order) {
	s := shardSpec()
	s.Ladder.Order = order
	p := mustPlan(t, s)
	n := p.Names
	levels := p.Ladder.Levels()
	first := 0
	slots := map[[2]int]string{} // copy, slot
	for _, q := range p.DelayQueues() {
		if other, dup := slots[[2]int{q.Shard, q.Slot}]; dup {
			t.Errorf("queues %s and %s of copy %d share slot %d", other, q.Name, q.Shard, q.Slot)
		}
		slots[[2]int{q.Shard, q.Slot}] = q.Name
		if !q.FirstHop {
			continue
		}
		first++
		want := n.LadderExchangeShard(0, q.Shard)
		if q.Name != n.LadderFirstHopQueueShard(q.Level, q.Digit, q.Shard) || q.Level == 0 || q.DeadLetterExchange != want || q.Args["x-dead-letter-exchange"] != want {
			t.Errorf("first-hop queue %s (level %d, copy %d) dead-letters into %s, want %s", q.Name, q.Level, q.Shard, q.DeadLetterExchange, want)
		}
	}
	if want := 3 * (levels - 1) * 3; first != want {
		t.Errorf("%d first-hop queues, want %d (3 digits of levels - 1 levels per copy)", first, want)
	}
	// The delay-queue policy and the rebalance command cover them.
	pol := regexp.MustCompile(p.Policies[0].Pattern)
	cmd := p.RebalanceCommand("")
	re := regexp.MustCompile(cmd[strings.Index(cmd, "--queue-pattern '")+len("--queue-pattern '") : len(cmd)-1])
	for _, q := range p.Queues {
		if q.FirstHop && (!pol.MatchString(q.Name) || !re.MatchString(q.Name)) {
			t.Errorf("%s: policy pattern %v, rebalance pattern %v", q.Name, pol.MatchString(q.Name), re.MatchString(q.Name))
		}
	}
}
