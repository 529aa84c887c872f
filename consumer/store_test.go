package consumer

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// inCI reports whether CI=true (or a true-like value) is set: a missing Redis then fails.
func inCI() bool {
	v := strings.ToLower(os.Getenv("CI"))
	return v == "true" || v == "1" || v == "yes"
}

// redisClient returns a client of REDIS_URL (scripts/redis), closed with the test; outside CI
// the test is skipped when REDIS_URL is unset.
func redisClient(t *testing.T) *redis.Client {
	t.Helper()
	u := os.Getenv("REDIS_URL")
	if u == "" {
		if inCI() {
			t.Fatal("REDIS_URL is not set and CI=true: a missing Redis is a failure here; `make test` starts one (scripts/redis run --)")
		}
		t.Skip("REDIS_URL is not set: run `make test`, or `scripts/redis run -- go test ./consumer`")
	}
	opt, err := redis.ParseURL(u)
	if err != nil {
		t.Fatalf("REDIS_URL: %v", err)
	}
	c := redis.NewClient(opt)
	t.Cleanup(func() { _ = c.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatalf("Redis at REDIS_URL does not answer: %v", err)
	}
	return c
}

// stores returns the implementations to test, each with keys unique to the test.
func stores(t *testing.T) map[string]Store {
	out := map[string]Store{"memory": &MemoryStore{}}
	if os.Getenv("REDIS_URL") != "" || inCI() {
		out["redis"] = NewRedisStore(redisClient(t), fmt.Sprintf("rdtest:%s:%d:", t.Name(), time.Now().UnixNano()))
	}
	return out
}

func TestStoreProtocol(t *testing.T) {
	for name, s := range stores(t) {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			st, tok, err := s.Claim(ctx, "q", "id1", time.Minute)
			if err != nil || st != Claimed || tok == "" {
				t.Fatalf("first claim = %v %q %v, want claimed", st, tok, err)
			}
			if st, _, err := s.Claim(ctx, "q", "id1", time.Minute); err != nil || st != Busy {
				t.Fatalf("second claim = %v %v, want busy", st, err)
			}
			if st, _, err := s.Claim(ctx, "other-queue", "id1", time.Minute); err != nil || st != Claimed {
				t.Fatalf("claim in another queue = %v %v, want claimed (keys are per queue)", st, err)
			}
			if ok, err := s.Extend(ctx, "q", "id1", "not-the-token", time.Minute); err != nil || ok {
				t.Fatalf("extend with a wrong token = %v %v, want false", ok, err)
			}
			if ok, err := s.Extend(ctx, "q", "id1", tok, time.Minute); err != nil || !ok {
				t.Fatalf("extend = %v %v, want true", ok, err)
			}
			if err := s.Release(ctx, "q", "id1", "not-the-token"); err != nil {
				t.Fatal(err)
			}
			if st, _, _ := s.Claim(ctx, "q", "id1", time.Minute); st != Busy {
				t.Fatalf("a release with a wrong token dropped the lease (claim = %v)", st)
			}
			if err := s.Release(ctx, "q", "id1", tok); err != nil {
				t.Fatal(err)
			}
			st, tok, err = s.Claim(ctx, "q", "id1", time.Minute)
			if err != nil || st != Claimed {
				t.Fatalf("claim after release = %v %v, want claimed", st, err)
			}
			if err := s.Done(ctx, "q", "id1", tok, time.Hour); err != nil {
				t.Fatal(err)
			}
			if st, _, err := s.Claim(ctx, "q", "id1", time.Minute); err != nil || st != AlreadyHandled {
				t.Fatalf("claim after done = %v %v, want already-handled", st, err)
			}
			if err := s.Release(ctx, "q", "id1", tok); err != nil {
				t.Fatal(err)
			}
			if st, _, _ := s.Claim(ctx, "q", "id1", time.Minute); st != AlreadyHandled {
				t.Fatalf("release dropped a done mark (claim = %v)", st)
			}
			if ok, _ := s.Extend(ctx, "q", "id1", tok, time.Minute); ok {
				t.Fatal("extend of a done mark succeeded")
			}
		})
	}
}

// TestStoreLeaseExpires: a holder that dies stops renewing; its lease expires and another claims.
func TestStoreLeaseExpires(t *testing.T) {
	for name, s := range stores(t) {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			if st, _, _ := s.Claim(ctx, "q", "dead", 150*time.Millisecond); st != Claimed {
				t.Fatalf("claim = %v", st)
			}
			deadline := time.Now().Add(10 * time.Second)
			for {
				st, _, err := s.Claim(ctx, "q", "dead", time.Minute)
				if err != nil {
					t.Fatal(err)
				}
				if st == Claimed {
					return
				}
				if time.Now().After(deadline) {
					t.Fatalf("lease of 150ms still held after 10s (claim = %v)", st)
				}
				time.Sleep(50 * time.Millisecond)
			}
		})
	}
}

// TestStoreOneClaimant: of many concurrent claims of one id, exactly one wins.
func TestStoreOneClaimant(t *testing.T) {
	for name, s := range stores(t) {
		t.Run(name, func(t *testing.T) {
			var wins atomic.Int32
			var wg sync.WaitGroup
			for range 32 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					st, _, err := s.Claim(context.Background(), "q", "race", time.Minute)
					if err != nil {
						t.Error(err)
					}
					if st == Claimed {
						wins.Add(1)
					}
				}()
			}
			wg.Wait()
			if wins.Load() != 1 {
				t.Fatalf("%d claims won, want 1", wins.Load())
			}
		})
	}
}

func TestMemoryStoreWindow(t *testing.T) {
	m := &MemoryStore{Window: 3}
	ctx := context.Background()
	for _, id := range []string{"a", "b", "c"} {
		_, tok, _ := m.Claim(ctx, "q", id, time.Minute)
		_ = m.Done(ctx, "q", id, tok, time.Hour)
	}
	// Full of done marks: a new claim forgets the oldest.
	if st, _, _ := m.Claim(ctx, "q", "d", time.Minute); st != Claimed {
		t.Fatalf("claim d = %v", st)
	}
	if n := m.len(); n != 3 {
		t.Fatalf("len %d, want 3", n)
	}
	if st, _, _ := m.Claim(ctx, "q", "a", time.Minute); st != Claimed {
		t.Fatalf("a should have been forgotten (claim = %v)", st)
	}
	if st, _, _ := m.Claim(ctx, "q", "c", time.Minute); st != AlreadyHandled {
		t.Fatalf("c should be remembered (claim = %v)", st)
	}
	// Now a, d are leases and c is done; claiming e pushes out c, then only leases are left.
	if st, _, _ := m.Claim(ctx, "q", "e", time.Minute); st != Claimed {
		t.Fatalf("claim e = %v", st)
	}
	if st, _, _ := m.Claim(ctx, "q", "f", time.Minute); st != Busy {
		t.Fatalf("a window full of live leases must refuse with busy, got %v", st)
	}
	// Expired entries make room.
	now := time.Now().Add(2 * time.Minute)
	m.now = func() time.Time { return now }
	if st, _, _ := m.Claim(ctx, "q", "f", time.Minute); st != Claimed {
		t.Fatalf("expired leases should make room, got %v", st)
	}
}

func TestMemoryStoreContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, _, err := (&MemoryStore{}).Claim(ctx, "q", "x", time.Minute); err == nil {
		t.Fatal("claim with an ended context succeeded")
	}
}

// TestStoreKeysKeepPairsApart: (queue, id) pairs whose joined text is the same never share a
// key: a colon (Redis's separator) or a NUL in a queue name or an id, at either side, an empty
// id. Each pair is marked done; the other pairs still claim.
func TestStoreKeysKeepPairsApart(t *testing.T) {
	pairs := [][2]string{
		{"orders", "audit:7"}, {"orders:audit", "7"}, {"orders:", "audit:7"}, {"orders:audit:", "7"},
		{"orders", "audit\x007"}, {"orders\x00audit", "7"}, {"1:orders", "x"}, {"orders", ""}, {"orders:", ""},
	}
	for name, s := range stores(t) {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			for i, p := range pairs {
				st, tok, err := s.Claim(ctx, p[0], p[1], time.Minute)
				if err != nil || st != Claimed {
					t.Fatalf("queue %q id %q after the %d pairs before it were handled: %v %v, want claimed", p[0], p[1], i, st, err)
				}
				if err := s.Done(ctx, p[0], p[1], tok, time.Hour); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}

// TestStoreExtendRetakesLostLease: a lease that vanished while its handler ran (Redis restarted
// without persistence, or evicted the key; in memory, it expired with nobody claiming it) made
// Extend answer "not yours", and the Consumer cancelled the handler and charged it an attempt.
// Extend takes it again, and another claim then finds it busy; a lease another holder took is
// still not the caller's.
func TestStoreExtendRetakesLostLease(t *testing.T) {
	ctx := context.Background()
	check := func(t *testing.T, s Store, lose func(queue, id string)) {
		_, tok, err := s.Claim(ctx, "q", "lost", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		lose("q", "lost")
		if ok, err := s.Extend(ctx, "q", "lost", tok, time.Minute); err != nil || !ok {
			t.Fatalf("extend of a lost lease = %v %v, want true (taken again)", ok, err)
		}
		if st, _, err := s.Claim(ctx, "q", "lost", time.Minute); err != nil || st != Busy {
			t.Fatalf("claim after the lease was taken again = %v %v, want busy", st, err)
		}
		_, _, _ = s.Claim(ctx, "q", "other", time.Minute)
		lose("q", "other")
		if st, _, _ := s.Claim(ctx, "q", "other", time.Minute); st != Claimed {
			t.Fatalf("claim of a lost key by another holder = %v, want claimed", st)
		}
		if ok, _ := s.Extend(ctx, "q", "other", "the first holder's token", time.Minute); ok {
			t.Fatal("extend of a lease another holder took succeeded")
		}
	}
	t.Run("memory", func(t *testing.T) {
		m := &MemoryStore{}
		check(t, m, func(queue, id string) {
			m.mu.Lock()
			if el, ok := m.keys[memKey{queue, id}]; ok {
				m.remove(el)
			}
			m.mu.Unlock()
		})
	})
	if os.Getenv("REDIS_URL") != "" || inCI() {
		t.Run("redis", func(t *testing.T) {
			c := redisClient(t)
			r := NewRedisStore(c, fmt.Sprintf("rdtest:%s:%d:", t.Name(), time.Now().UnixNano()))
			check(t, r, func(queue, id string) {
				if err := c.Del(ctx, r.key(queue, id)).Err(); err != nil {
					t.Fatal(err)
				}
			})
		})
	}
}

// len returns how many keys m holds now (done marks and leases, expired ones included until
// they are next looked at or pushed out).
func (m *MemoryStore) len() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.keys)
}
