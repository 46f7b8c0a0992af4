package fence

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"

	"github.com/leasegen/leasegen/runtime/lease"
)

//go:embed hset.lua
var hsetSrc string

var hsetScript = redis.NewScript(hsetSrc)

// Field names holding the stamp inside a fenced hash.
const (
	TokenField = "_fence_token"
	OwnerField = "_fence_owner"
	valueField = "value"
)

// Redis writes fenced records kept in Redis. Each record is one hash (the
// data fields plus TokenField and OwnerField), so a write touches one key
// and is Cluster-safe. Tokens are compared as decimal digits, exactly over
// the whole range of lease.Token (the lease package mints exact tokens past
// 2^53, where Lua numbers, doubles, would skip integers).
type Redis struct{ rdb redis.UniversalClient }

// NewRedis returns a Redis writer on rdb.
func NewRedis(rdb redis.UniversalClient) *Redis { return &Redis{rdb: rdb} }

// HSet sets field/value pairs on the hash at key if s admits its stamp.
// TokenField and OwnerField are reserved: a pair naming one is refused, so
// no write can forge the stamp that later writes are checked against.
func (r *Redis) HSet(ctx context.Context, s Stamp, key string, fieldValues ...string) error {
	if err := s.check(); err != nil {
		return err
	}
	if len(fieldValues)%2 != 0 {
		return errors.New("fence: HSet needs field/value pairs")
	}
	for i := 0; i < len(fieldValues); i += 2 {
		if f := fieldValues[i]; f == TokenField || f == OwnerField {
			return fmt.Errorf("fence: HSet on %q: field %q is reserved for the fencing stamp", key, f)
		}
	}
	args := make([]any, 0, 2+len(fieldValues))
	args = append(args, strconv.FormatUint(uint64(s.Token), 10), s.Owner)
	for _, fv := range fieldValues {
		args = append(args, fv)
	}
	res, err := hsetScript.Run(ctx, r.rdb, []string{key}, args...).Slice()
	if err != nil {
		return err
	}
	if ok, _ := res[0].(int64); ok == 1 {
		return nil
	}
	cur, _ := strconv.ParseUint(fmt.Sprint(res[1]), 10, 64)
	owner, _ := res[2].(string)
	return s.stale(key, Stamp{Token: lease.Token(cur), Owner: owner})
}

// Set stores value as the record at key if s admits its stamp.
func (r *Redis) Set(ctx context.Context, s Stamp, key, value string) error {
	return r.HSet(ctx, s, key, valueField, value)
}

// Get returns the value Set stored at key, and redis.Nil when there is none.
func (r *Redis) Get(ctx context.Context, key string) (string, error) {
	return r.rdb.HGet(ctx, key, valueField).Result()
}
