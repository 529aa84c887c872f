package consumer

import (
	"cmp"
	"container/list"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// ClaimState is a [Store]'s answer to a claim.
type ClaimState int

const (
	// Claimed: the caller holds the lease and may run the handler.
	Claimed ClaimState = iota
	// AlreadyHandled: the id was handled before (marked done and not yet forgotten): skip it.
	AlreadyHandled
	// Busy: another holder's lease on the id has not expired (a handler is running it now, or
	// one died less than a lease ago): try again later.
	Busy
)

// Store remembers which message ids have been handled, per queue and id, so that a Consumer
// runs its handler to success at most once per id while it is remembered.
//
// Claim takes an expiring lease before the handler runs (Redis: SET NX PX); Extend renews it
// while the handler runs; Done marks the key handled, for the longer keep time; Release drops
// the lease after a failure, so that a retry can claim it. Extend, Done and Release take
// Claim's token, so a holder whose lease expired never touches another's (Done overwrites it).
//
// Implementations must be safe for concurrent use; every method is bounded by its context.
type Store interface {
	// Claim tries to take a lease of length lease on (queue, id): Claimed and a token,
	// AlreadyHandled, or Busy.
	Claim(ctx context.Context, queue, id string, lease time.Duration) (ClaimState, string, error)
	// Extend renews the lease held with token. False when another holder claimed the key or it
	// was marked done; a lease that expired or was lost while nobody claimed the key is taken
	// again (true), so a store restart does not cut running handlers off.
	Extend(ctx context.Context, queue, id, token string, lease time.Duration) (bool, error)
	// Done marks (queue, id) handled for keep.
	Done(ctx context.Context, queue, id, token string, keep time.Duration) error
	// Release drops the lease held with token; another token's lease, or a done mark, stays.
	Release(ctx context.Context, queue, id, token string) error
}

// ping asks s whether it answers, when it can tell (a RedisStore, or a Ping(ctx) error method).
func ping(ctx context.Context, s Store) error {
	switch p := s.(type) {
	case *RedisStore:
		if err := p.c.Ping(ctx).Err(); err != nil {
			return fmt.Errorf("%w: redis PING: %w", ErrStore, err)
		}
	case interface{ Ping(context.Context) error }:
		return p.Ping(ctx)
	}
	return nil
}

func newToken() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// DefaultMemoryWindow is how many keys a [MemoryStore] remembers by default.
const DefaultMemoryWindow = 100_000

// MemoryStore is a [Store] in this process's memory, for the Consumers of one process. When
// its window of keys is full, it forgets the oldest done marks first (a later copy of such a
// message is handled again), then expired leases; a window full of live leases refuses claims
// with Busy. The zero value is ready to use. A MemoryStore must not be copied after first use.
type MemoryStore struct {
	// Window is how many keys the store remembers at most, done marks and live leases
	// together (<= 0: DefaultMemoryWindow). Changes after the first use are ignored.
	Window int

	mu    sync.Mutex
	max   int // Window, fixed at the first use
	now   func() time.Time
	keys  map[memKey]*list.Element
	order *list.List // of *memEntry, oldest first (by last write)
}

type memEntry struct {
	key     memKey
	done    bool
	token   string
	expires time.Time
}

type memKey struct{ queue, id string }

// lock checks ctx, then locks m (the caller unlocks it), prepares it at its first use and
// returns the time.
func (m *MemoryStore) lock(ctx context.Context) (time.Time, error) {
	if err := ctx.Err(); err != nil {
		return time.Time{}, err
	}
	m.mu.Lock()
	if m.keys == nil {
		m.max = cmp.Or(max(m.Window, 0), DefaultMemoryWindow)
		if m.now == nil {
			m.now = time.Now
		}
		m.keys, m.order = map[memKey]*list.Element{}, list.New()
	}
	return m.now(), nil
}

// get returns the live entry of key, dropping it when it has expired.
func (m *MemoryStore) get(key memKey, now time.Time) *memEntry {
	el, ok := m.keys[key]
	if !ok {
		return nil
	}
	e := el.Value.(*memEntry)
	if !now.Before(e.expires) {
		m.remove(el)
		return nil
	}
	return e
}

func (m *MemoryStore) remove(el *list.Element) {
	delete(m.keys, el.Value.(*memEntry).key)
	m.order.Remove(el)
}

// put writes e as the newest entry of its key.
func (m *MemoryStore) put(e *memEntry) {
	if el, ok := m.keys[e.key]; ok {
		m.remove(el)
	}
	m.keys[e.key] = m.order.PushBack(e)
}

// room makes room for one more key, forgetting expired entries and the oldest done marks;
// false when only live leases are left.
func (m *MemoryStore) room(now time.Time) bool {
	if len(m.keys) < m.max {
		return true
	}
	for el := m.order.Front(); el != nil && len(m.keys) >= m.max; {
		next := el.Next()
		if e := el.Value.(*memEntry); e.done || !now.Before(e.expires) {
			m.remove(el)
		}
		el = next
	}
	return len(m.keys) < m.max
}

// Claim implements [Store].
func (m *MemoryStore) Claim(ctx context.Context, queue, id string, lease time.Duration) (ClaimState, string, error) {
	now, err := m.lock(ctx)
	if err != nil {
		return Busy, "", err
	}
	defer m.mu.Unlock()
	key := memKey{queue, id}
	if e := m.get(key, now); e != nil && e.done {
		return AlreadyHandled, "", nil
	} else if e != nil || !m.room(now) {
		return Busy, "", nil
	}
	tok := newToken()
	m.put(&memEntry{key: key, token: tok, expires: now.Add(lease)})
	return Claimed, tok, nil
}

// Extend implements [Store].
func (m *MemoryStore) Extend(ctx context.Context, queue, id, token string, lease time.Duration) (bool, error) {
	now, err := m.lock(ctx)
	if err != nil {
		return false, err
	}
	defer m.mu.Unlock()
	key := memKey{queue, id}
	e := m.get(key, now)
	if e == nil && m.room(now) {
		m.put(&memEntry{key: key, token: token, expires: now.Add(lease)}) // expired, unclaimed: take it again
		return true, nil
	}
	if e == nil || e.done || e.token != token {
		return false, nil
	}
	e.expires = now.Add(lease)
	return true, nil
}

// Done implements [Store].
func (m *MemoryStore) Done(ctx context.Context, queue, id, token string, keep time.Duration) error {
	now, err := m.lock(ctx)
	if err != nil {
		return err
	}
	defer m.mu.Unlock()
	key := memKey{queue, id}
	if m.get(key, now) == nil && !m.room(now) {
		return nil // only live leases left: the mark is forgotten at once
	}
	m.put(&memEntry{key: key, done: true, expires: now.Add(keep)})
	return nil
}

// Release implements [Store].
func (m *MemoryStore) Release(ctx context.Context, queue, id, token string) error {
	if _, err := m.lock(ctx); err != nil {
		return err
	}
	defer m.mu.Unlock()
	if el, ok := m.keys[memKey{queue, id}]; ok {
		if e := el.Value.(*memEntry); !e.done && e.token == token {
			m.remove(el)
		}
	}
	return nil
}

// DefaultRedisPrefix is the prefix of the keys a [RedisStore] writes unless told otherwise.
const DefaultRedisPrefix = "rabbitdelay:handled:"

// RedisStore is a [Store] in Redis, shared by every Consumer that uses the same server and
// prefix. The key of a queue and id is <prefix><len(queue)>:<queue>:<id> (the length keeps
// colons from making two pairs one key); it holds "lease:<token>" while a handler runs (SET NX
// PX) and "done" once it succeeded (SET PX keep). Extend and Release compare the token and act
// in one Lua script. It is safe for concurrent use, and never closes the caller's client.
type RedisStore struct {
	c      redis.UniversalClient
	prefix string
}

// NewRedisStore returns a RedisStore on client with keys under prefix ("": DefaultRedisPrefix)
// (a client from a URL: [redis.ParseURL] and [redis.NewClient]). Keys expire by themselves
// after [Options.Lease] or [Options.Keep].
func NewRedisStore(client redis.UniversalClient, prefix string) *RedisStore {
	return &RedisStore{c: client, prefix: cmp.Or(prefix, DefaultRedisPrefix)}
}

const doneValue = "done"

func (r *RedisStore) key(queue, id string) string {
	return r.prefix + strconv.Itoa(len(queue)) + ":" + queue + ":" + id
}

// Claim implements [Store] with SET NX PX, then GET to tell a done mark from another lease.
// Errors wrap ErrStore.
func (r *RedisStore) Claim(ctx context.Context, queue, id string, lease time.Duration) (ClaimState, string, error) {
	key := r.key(queue, id)
	tok := newToken()
	ok, err := r.c.SetNX(ctx, key, "lease:"+tok, lease).Result()
	if err != nil {
		return Busy, "", fmt.Errorf("%w: redis SET NX %q: %w", ErrStore, key, err)
	}
	if ok {
		return Claimed, tok, nil
	}
	v, err := r.c.Get(ctx, key).Result()
	switch {
	case errors.Is(err, redis.Nil):
		return Busy, "", nil // expired between the two commands: the next try claims it
	case err != nil:
		return Busy, "", fmt.Errorf("%w: redis GET %q: %w", ErrStore, key, err)
	case v == doneValue:
		return AlreadyHandled, "", nil
	}
	return Busy, "", nil
}

// extendScript renews the caller's lease, or takes it again when the key is gone (expired, or
// lost by Redis: a restart without persistence, an eviction, a failover).
var extendScript = redis.NewScript(`local v = redis.call('GET', KEYS[1])
if v == ARGV[1] then
	return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
if v == false then
	redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
	return 1
end
return 0`)

var releaseScript = redis.NewScript(`if redis.call('GET', KEYS[1]) == ARGV[1] then
	return redis.call('DEL', KEYS[1])
end
return 0`)

// Extend implements [Store] with a script. Errors wrap ErrStore.
func (r *RedisStore) Extend(ctx context.Context, queue, id, token string, lease time.Duration) (bool, error) {
	key := r.key(queue, id)
	n, err := extendScript.Run(ctx, r.c, []string{key}, "lease:"+token, lease.Milliseconds()).Int()
	if err != nil {
		return false, fmt.Errorf("%w: redis extend lease %q: %w", ErrStore, key, err)
	}
	return n == 1, nil
}

// Done implements [Store] with SET PX. Errors wrap ErrStore.
func (r *RedisStore) Done(ctx context.Context, queue, id, token string, keep time.Duration) error {
	key := r.key(queue, id)
	if err := r.c.Set(ctx, key, doneValue, keep).Err(); err != nil {
		return fmt.Errorf("%w: redis SET %q done: %w", ErrStore, key, err)
	}
	return nil
}

// Release implements [Store] with a script. Errors wrap ErrStore.
func (r *RedisStore) Release(ctx context.Context, queue, id, token string) error {
	key := r.key(queue, id)
	if err := releaseScript.Run(ctx, r.c, []string{key}, "lease:"+token).Err(); err != nil {
		return fmt.Errorf("%w: redis release lease %q: %w", ErrStore, key, err)
	}
	return nil
}
