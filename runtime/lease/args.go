package lease

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"unsafe"

	"github.com/redis/go-redis/v9"
)

// The hot path builds its commands' arguments itself instead of through
// go-redis's typed helpers, which box every string and number into a new
// interface value (a release through Script.Run cost 12 allocations, most
// of a call's surplus over a plain lock). A pointer fits in an interface
// without an allocation, so arguments are passed as pointers to the call's
// own strings and numbers, typed so that go-redis writes them with
// encoding.BinaryMarshaler and prints and routes them (traces, Cluster
// slots) with fmt.Stringer.

// strArg is a string argument passed by pointer: (*strArg)(&s).
type strArg string

// MarshalBinary returns the string's bytes without copying them; go-redis
// only reads them while writing the command.
func (s *strArg) MarshalBinary() ([]byte, error) {
	return unsafe.Slice(unsafe.StringData(string(*s)), len(*s)), nil
}

func (s *strArg) String() string { return string(*s) }

// sarg boxes *p without an allocation.
func sarg(p *string) any { return (*strArg)(p) }

// intArg is an integer argument passed by pointer, with room to format it.
type intArg struct {
	n      int64
	buf    [20]byte
	writes atomic.Int32 // how often go-redis wrote it (each attempt writes it)
}

// MarshalBinary formats n into the argument's own buffer. A command's
// arguments are written by one goroutine at a time (a retry writes them
// again, after the first write).
func (i *intArg) MarshalBinary() ([]byte, error) {
	i.writes.Add(1)
	return strconv.AppendInt(i.buf[:0], i.n, 10), nil
}

func (i *intArg) String() string { return strconv.FormatInt(i.n, 10) }

// evalArgs runs a script by EVALSHA with argv, whose first two slots it
// fills (argv[2] is the number of keys, the keys and arguments follow), and
// on NOSCRIPT by EVAL with a copy of the arguments, as Script.Run does (no
// SCRIPT LOAD, which a least-privilege ACL need not allow). A command once
// sent is never changed: a hook may keep it and format it later.
func (c *Client) evalArgs(ctx context.Context, s *script, argv []any) (int64, error) {
	// Both scripts answer one integer. A Cmd, not an IntCmd: its value
	// stays nil unless a reply was parsed, whereas an IntCmd's zero value
	// (0, a grant) is what it holds when a hook swallowed the error of a
	// request that got no reply (go-redis then clears the command's error).
	cmd := c.evalCmd(ctx, s, argv)
	return parsedInt(cmd.Val(), cmd.Err())
}

// evalCmd is evalArgs's request, its reply left to the caller.
func (c *Client) evalCmd(ctx context.Context, s *script, argv []any) *redis.Cmd {
	argv[0], argv[1] = "evalsha", s.sha
	cmd := redis.NewCmd(ctx, argv...)
	_ = c.rdb.Process(ctx, cmd)
	if err := cmd.Err(); err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
		forgetNoScript(argv)
		argv = slices.Clone(argv)
		argv[0], argv[1] = "eval", s.src
		cmd = redis.NewCmd(ctx, argv...)
		_ = c.rdb.Process(ctx, cmd)
	}
	return cmd
}

// afterWrite is err, a write request's, as its outcome, given how often
// go-redis wrote the request (writes: a counted argument's, see intArg):
//
//   - an error that says nothing is on the wire (a dial error, a pool
//     timeout) for a request written before is unknown, not refused:
//     go-redis's re-send after a lost reply found no connection, and the
//     first send may have been carried out;
//   - so is, off Cluster, an error reply to a re-send (written more than
//     once) that go-redis does not send again after: it re-sends after a
//     lost reply or after the few answers it retries (READONLY, LOADING,
//     ...), so a final NOPERM or OOM after a re-send may follow a first
//     send that was carried out. A retried answer itself (READONLY after
//     every try) stays refused: nothing tells it from one that followed a
//     lost reply, and every try of it was refused. A Cluster client also
//     writes a request again to follow MOVED and ASK, which were not
//     carried out, so there the count cannot tell, and an error reply
//     stays refused (TestAdversary69c_ClusterMovedThenOOMAcquire,
//     TestAdversary69c_AcquireDuringLongMigration).
//
// (TestAdversary69_ForceEndHoldReplyCutThenDialRefused,
// TestAdversary69_RenewReplyCutThenDialRefused,
// TestAdversary69b_ForceEndHoldCutThenErrorReply.)
func (c *Client) afterWrite(err error, writes int32) error {
	if err == nil || writes == 0 {
		return err
	}
	if notSent(err) {
		return executedError{err}
	}
	var rerr redis.Error
	if writes > 1 && !c.cluster && errors.As(err, &rerr) && !resentAfter(err) {
		return executedError{err}
	}
	return err
}

// resentAfter reports error answers after which go-redis sends a request
// again (its shouldRetry; MOVED and ASK a Cluster client follows).
func resentAfter(err error) bool {
	for _, p := range []string{"READONLY", "LOADING", "MASTERDOWN", "CLUSTERDOWN", "TRYAGAIN", "NOREPLICAS", "MOVED", "ASK"} {
		if redis.HasErrorPrefix(err, p) {
			return true
		}
	}
	return strings.HasPrefix(err.Error(), "ERR max number of clients reached")
}

// errNoReply: go-redis reported success, but no reply was parsed (a hook
// returned nil for a request that failed or was never sent). The outcome
// is unknown.
var errNoReply = errors.New("lease: go-redis returned no error but no reply was parsed (a hook swallowed the request's error?)")

// parsedInt is a script's integer answer, or errNoReply when no reply was
// parsed although there is no error.
func parsedInt(v any, err error) (int64, error) {
	if err != nil {
		return 0, err
	}
	switch v := v.(type) {
	case int64:
		return v, nil
	case string: // a token past 2^53, answered as a string to stay exact
		return strconv.ParseInt(v, 10, 64)
	}
	return 0, errNoReply
}

// acqArgs are one acquire's arguments: its command line (SET or the
// acquire script), its TTL and queue lifetime.
type acqArgs struct {
	argv           [3 + 4 + 9]any
	ttl, life, seq intArg
}

// newAcqArgs gives an acquire its arguments: the call's own the first
// time, new ones after.
func (a *call) newAcqArgs() *acqArgs {
	if !a.acqUsed {
		a.acqUsed = true
		a.curAcq = &a.grant().acqArgs
	} else {
		a.curAcq = new(acqArgs)
	}
	return a.curAcq
}

// newRelArgs is newAcqArgs for a release of the call's identity.
func (a *call) newRelArgs() *relArgs {
	if !a.relUsed {
		a.relUsed = true
		return &a.rel
	}
	return new(relArgs)
}

// script is a Lua script with its SHA1 and source boxed once.
type script struct {
	*redis.Script
	sha, src any
}

func newScript(src string) *script {
	s := redis.NewScript(src)
	return &script{Script: s, sha: s.Hash(), src: src}
}

// forgetNoScript is told that a script call was answered NOSCRIPT (not
// carried out) before it is sent again by EVAL: a write count of 1 (that
// send only) starts again, so that only the EVAL's sends count (see
// call.written). A count above 1 stays: go-redis re-sent the EVALSHA after
// a lost reply, and the first send may have run before the script cache
// was lost (a restart, a failover to a replica without it).
func forgetNoScript(argv []any) {
	for _, v := range argv {
		if i, ok := v.(*intArg); ok {
			i.writes.CompareAndSwap(1, 0)
		}
	}
}
