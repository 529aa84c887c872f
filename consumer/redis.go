package consumer

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// DefaultRedisPrefix is the prefix of the keys a [RedisStore] writes unless told otherwise.
const DefaultRedisPrefix = "rabbitdelay:handled:"

// RedisStore is a [Store] in Redis, shared by every Consumer (in any process) that uses the
// same server and prefix: the way go-queue deduplicates, with SET NX. One key per queue and
// message id, <prefix><length of queue in bytes>:<queue>:<id> (the length keeps a queue or id
// with a colon from sharing another pair's key: queue "a:b" with id "c" is 3:a:b:c, queue "a"
// with id "b:c" is 1:a:b:c), holds "lease:<token>" while a handler runs (SET NX PX: a
// lease that expires on its own when its holder dies) and "done" once it succeeded (SET PX,
// the longer keep time). Extend and Release compare the token and act in one Lua script, so a
// holder whose lease expired never extends or drops another holder's lease.
//
// It is safe for concurrent use. The client is the caller's: RedisStore never closes it.
type RedisStore struct {
	c      redis.UniversalClient
	prefix string
}

// NewRedisStore returns a RedisStore on client with keys under prefix ("" means
// DefaultRedisPrefix). Use [redis.ParseURL] and [redis.NewClient] for a client from a URL such
// as the REDIS_URL of scripts/redis. How long a lease lasts and a handled id is remembered
// (DefaultLease, DefaultKeep: 24 h) is the Consumer's to say ([Options.Lease], [Options.Keep]): each key expires
// by itself (PX) after that.
func NewRedisStore(client redis.UniversalClient, prefix string) *RedisStore {
	if prefix == "" {
		prefix = DefaultRedisPrefix
	}
	return &RedisStore{c: client, prefix: prefix}
}

const doneValue = "done"

func (r *RedisStore) key(queue, id string) string {
	return r.prefix + strconv.Itoa(len(queue)) + ":" + queue + ":" + id
}

// Claim implements [Store] with SET key lease:<token> NX PX lease, then, when the key exists,
// GET to tell a done mark from another holder's lease. Errors wrap ErrStore.
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

// extendScript renews the caller's lease, or takes it again when the key is gone (the lease
// expired with nobody claiming it, or Redis lost it: a restart without persistence, an
// eviction, a failover), so that a store's loss does not cut running handlers off.
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

// Extend implements [Store] (GET, then PEXPIRE, or SET when the key is gone, in one script).
// Errors wrap ErrStore.
func (r *RedisStore) Extend(ctx context.Context, queue, id, token string, lease time.Duration) (bool, error) {
	key := r.key(queue, id)
	n, err := extendScript.Run(ctx, r.c, []string{key}, "lease:"+token, lease.Milliseconds()).Int()
	if err != nil {
		return false, fmt.Errorf("%w: redis extend lease %q: %w", ErrStore, key, err)
	}
	return n == 1, nil
}

// Done implements [Store] with SET key done PX keep. Errors wrap ErrStore.
func (r *RedisStore) Done(ctx context.Context, queue, id, token string, keep time.Duration) error {
	key := r.key(queue, id)
	if err := r.c.Set(ctx, key, doneValue, keep).Err(); err != nil {
		return fmt.Errorf("%w: redis SET %q done: %w", ErrStore, key, err)
	}
	return nil
}

// ping sends Redis a PING, bounded by ctx, and returns nil when it answers; otherwise an error
// wrapping ErrStore. [Consumer.Run] calls it at start.
func (r *RedisStore) ping(ctx context.Context) error {
	if err := r.c.Ping(ctx).Err(); err != nil {
		return fmt.Errorf("%w: redis PING: %w", ErrStore, err)
	}
	return nil
}

// Release implements [Store] (GET and DEL in one script). Errors wrap ErrStore.
func (r *RedisStore) Release(ctx context.Context, queue, id, token string) error {
	key := r.key(queue, id)
	if err := releaseScript.Run(ctx, r.c, []string{key}, "lease:"+token).Err(); err != nil {
		return fmt.Errorf("%w: redis release lease %q: %w", ErrStore, key, err)
	}
	return nil
}
