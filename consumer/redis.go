package consumer

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

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

func (r *RedisStore) ping(ctx context.Context) error {
	if err := r.c.Ping(ctx).Err(); err != nil {
		return fmt.Errorf("%w: redis PING: %w", ErrStore, err)
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
