package fence

import (
	"context"
	_ "embed"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync/atomic"

	"github.com/redis/go-redis/v9"

	"github.com/leasegen/leasegen/runtime/lease"
)

//go:embed hset.lua
var hsetSrc string

var hsetScript = redis.NewScript(hsetSrc)

// Field names the store keeps inside a fenced hash: the stamp, and the
// identities of the last writes under it (see Redis.HSet).
const (
	TokenField  = "_fence_token"
	OwnerField  = "_fence_owner"
	WritesField = "_fence_writes"
	valueField  = "value"
)

// Redis writes fenced records kept in Redis. Each record is one hash (the
// data fields plus TokenField, OwnerField and WritesField), so a write
// touches one key and is Cluster-safe. Tokens are compared as decimal
// digits, exactly over the whole range of lease.Token (the lease package
// mints exact tokens past 2^53, where Lua numbers, doubles, would skip
// integers).
type Redis struct{ rdb redis.UniversalClient }

// NewRedis returns a Redis writer on rdb: a *redis.Client or a
// *redis.ClusterClient. A *redis.Ring is refused (its writes and reads
// return errRing): it remaps keys when a shard misses heartbeats, and a
// record's stamp stays on the old shard, so a stale write would be
// accepted on the new one.
func NewRedis(rdb redis.UniversalClient) *Redis { return &Redis{rdb: rdb} }

var errRing = errors.New("fence: redis.Ring is not supported: it remaps keys when a shard misses heartbeats, leaving a record's stamp behind; use a *redis.Client or *redis.ClusterClient")

// usable refuses a Ring.
func (r *Redis) usable() error {
	if _, ok := r.rdb.(*redis.Ring); ok {
		return errRing
	}
	return nil
}

// HSet sets field/value pairs on the hash at key if s admits its stamp.
//
// It returns nil when written and ErrStale when refused (nothing written).
// An error wrapping lease.ErrUnknown means the write may or may not have
// been carried out: it was sent and no reply was read (a timeout, a
// dropped connection, the context ending), or go-redis sent it more than
// once (its retry after a lost reply, a Cluster redirect) and the last
// send was refused or answered with an error, which does not say whether
// an earlier send was carried out. Other errors mean it was not: never
// sent, or refused by the server (WRONGTYPE, NOPERM, ...).
// TokenField, OwnerField and WritesField are reserved: a pair naming one is
// refused, so no write can forge the stamp that later writes are checked
// against.
//
// Each write carries an identity of its own, the same in every send of
// it, and the record keeps those of the last 16 writes under its stamp.
// go-redis re-sends a write whose reply it lost, and the first send may
// still reach the server after the re-send was answered, even after
// later writes (a connection that go-redis gave up on delivers what it
// had sent before it closes): that copy is recognised and writes nothing,
// so it cannot undo a later write of the same holder
// (TestAdversary72a_RedisDelayedFirstSendRevertsLaterWrite). A copy that
// arrives after more than 16 later writes to the record under the same
// stamp is no longer recognised. A write reported as ErrUnknown is one
// whose sends may all still be on their way: it may be carried out after
// writes made since.
func (r *Redis) HSet(ctx context.Context, s Stamp, key string, fieldValues ...string) error {
	if err := s.check(); err != nil {
		return err
	}
	if err := r.usable(); err != nil {
		return err
	}
	if len(fieldValues)%2 != 0 {
		return errors.New("fence: HSet needs field/value pairs")
	}
	for i := 0; i < len(fieldValues); i += 2 {
		if f := fieldValues[i]; f == TokenField || f == OwnerField || f == WritesField {
			return fmt.Errorf("fence: HSet on %q: field %q is reserved for the fencing stamp", key, f)
		}
	}
	tok := &sentArg{s: strconv.FormatUint(uint64(s.Token), 10)}
	args := make([]any, 0, 3+len(fieldValues))
	args = append(args, tok, s.Owner, writeID())
	for _, fv := range fieldValues {
		args = append(args, fv)
	}
	keys := []string{key}
	// Script.Run's EVALSHA, then EVAL on NOSCRIPT, with the sends counted:
	// earlier is how many sends besides the answered one may have run.
	cmd := r.rdb.EvalSha(ctx, hsetScript.Hash(), keys, args...)
	earlier := max(tok.sent.Load()-1, 0)
	if err := cmd.Err(); err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
		// The send answered NOSCRIPT ran nothing; any before it may have.
		tok = &sentArg{s: tok.s}
		args[0] = tok
		cmd = r.rdb.Eval(ctx, hsetSrc, keys, args...)
		earlier += max(tok.sent.Load()-1, 0)
	}
	res, err := cmd.Slice()
	if err != nil {
		var reply redis.Error
		switch {
		case tok.sent.Load() == 0 && earlier > 0:
			return fmt.Errorf("%w: fenced write to %q: an earlier send may have been carried out, the last was not sent: %w", lease.ErrUnknown, key, err)
		case tok.sent.Load() == 0:
			return err // never sent: not carried out
		case !errors.As(err, &reply):
			return fmt.Errorf("%w: fenced write to %q sent, no reply read: %w", lease.ErrUnknown, key, err)
		case earlier > 0:
			return fmt.Errorf("%w: fenced write to %q sent %d times, the last answered %w", lease.ErrUnknown, key, earlier+1, err)
		}
		return err
	}
	if len(res) == 3 {
		if ok, _ := res[0].(int64); ok == 0 {
			raw := fmt.Sprint(res[1])
			cur, perr := strconv.ParseUint(raw, 10, 64)
			owner, _ := res[2].(string)
			if earlier > 0 {
				// go-redis re-sent the write (a lost reply, a Cluster
				// redirect): an earlier send may have been carried out
				// before the stamp that refused this one was written.
				return fmt.Errorf("%w: fenced write to %q sent %d times: the last was refused by token %d, an earlier one may have been carried out", lease.ErrUnknown, key, earlier+1, cur)
			}
			if perr != nil {
				// Past lease.Token's range (written by another program):
				// newer than any token, named as stored.
				return s.report(fmt.Errorf("%s: token %d is older than the accepted %s: %w", key, s.Token, raw, ErrStale))
			}
			return s.stale(key, Stamp{Token: lease.Token(cur), Owner: owner})
		}
	}
	if len(res) == 1 {
		if ok, _ := res[0].(int64); ok == 1 {
			return nil
		}
	}
	return fmt.Errorf("%w: fenced write to %q: unexpected reply %v", lease.ErrUnknown, key, res)
}

// writeID is a new write's identity: 16 hex digits, random (writes of
// one stamp may come from several processes, to which its holder passed
// it).
func writeID() string {
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], rand.Uint64())
	return hex.EncodeToString(b[:])
}

// sentArg is the token argument of a fenced write: it counts how often
// go-redis wrote the command to a connection (it retries after a lost
// reply, and follows Cluster redirects), to tell a refusal of the only
// send from one that a carried-out earlier send may have preceded.
type sentArg struct {
	s    string
	sent atomic.Int32
}

func (a *sentArg) MarshalBinary() ([]byte, error) {
	a.sent.Add(1)
	return []byte(a.s), nil
}

func (a *sentArg) String() string { return a.s }

// Set stores value as the record at key if s admits its stamp.
func (r *Redis) Set(ctx context.Context, s Stamp, key, value string) error {
	return r.HSet(ctx, s, key, valueField, value)
}

// Get returns the value Set stored at key, and redis.Nil when there is none.
func (r *Redis) Get(ctx context.Context, key string) (string, error) {
	if err := r.usable(); err != nil {
		return "", err
	}
	return r.rdb.HGet(ctx, key, valueField).Result()
}
