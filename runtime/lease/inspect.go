package lease

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

var (
	//go:embed inspect.lua
	inspectSrc string
	//go:embed endhold.lua
	endholdSrc string

	inspectScript = redis.NewScript(inspectSrc)
	endholdScript = newScript(endholdSrc)
)

// Info is what Inspect knows about one lease, read in one atomic step on
// the server that owns the key. Durations are measured by that server's
// clock at the moment of the read.
type Info struct {
	// Key is the user's key, as given to Do.
	Key string
	// Holder is the identity of the grant that holds the lease (32 hex
	// digits, new for every acquire attempt; for a leader's term followed
	// by "/" and its escaped Owner), or "" when the key is free.
	// ForceRelease takes it. A value the runtime did not write is shown
	// whole here.
	Holder string
	// Owner names the process behind the holder (a host or pod name) where
	// one is stored with the lease: a leader's term (Client.Lead) stores its
	// candidate's owner; plain leases store none.
	Owner string
	// Token is the holder's fencing token, 0 for a lease without fencing.
	Token Token
	// TTL is how long the lease lasts unless renewed (the lock key's PTTL,
	// in whole milliseconds): 0 when free, and also for a holder in its
	// last millisecond (never rounded up); negative if the key was given no
	// expiry (written from outside the runtime).
	TTL time.Duration
	// Hold reports that the holder has returned and released the lease
	// with a hold-min (Spec.HoldMin): it is no longer renewed and ends when
	// TTL runs out, unless ForceRelease ends it sooner.
	Hold bool
	// LastToken is the last fencing token minted for the key (its counter,
	// which outlives the grants by WithCounterTTL), 0 when none is stored.
	LastToken Token
	// Queued is the length of the key's waiter queue, dead entries
	// included; Waiters are its live entries in arrival order (at most
	// the first maxWaiters are read).
	Queued  int
	Waiters []Waiter
}

// Waiter is a live entry in a key's waiter queue: a Do call, in this
// process or another, waiting for the lease. A release hands the lease to
// the first live waiter.
type Waiter struct {
	Identity string        // the identity its grant will carry
	Waited   time.Duration // since it first asked
	Expires  time.Duration // when its entry lapses unless it asks again (each retry extends it)
	TTL      time.Duration // the lease length it asks for
	Fence    bool          // it asks for a fencing token
}

// Free reports whether nobody holds the lease.
func (i Info) Free() bool { return i.Holder == "" }

// inspectPatience is how long Inspect and List read again a lease whose
// slot is being migrated (TRYAGAIN) when their context has no deadline.
const inspectPatience = 2 * time.Second

// maxWaiters bounds how many queue entries Inspect reads.
const maxWaiters = 100

// Inspect reads the state of the lease on key: who holds it (the grant's
// identity), its fencing token, how long it has left, whether a hold-min
// is running out, and who waits for it. It writes nothing. A free key
// gives an Info with an empty Holder and a nil error. On a Cluster, a
// slot migration's TRYAGAIN (the lease's keys split between two masters)
// is read again while ctx lasts (2s when it has no deadline).
func (c *Client) Inspect(ctx context.Context, key string) (Info, error) {
	if key == "" {
		return Info{}, fmt.Errorf("%w: empty key", ErrBadKey)
	}
	if c.closed.Load() {
		return Info{}, fmt.Errorf("%w: inspect key %q", ErrClosed, key)
	}
	if err := c.waitCommandTable(ctx, "inspect", key, time.Time{}); err != nil {
		return Info{}, err
	}
	k := redisKeys(c.prefix, key)
	var reply []any
	read := func() (err error) {
		reply, err = inspectScript.Run(ctx, c.rdb, []string{k.lock, k.fence, k.queue, k.qexp}, maxWaiters).Slice()
		return err
	}
	// A slot migration answers TRYAGAIN while only some of the keys are on
	// either master (an unfenced lease has no counter: always): not run,
	// read again while ctx lasts
	// (TestAdversary33_InspectDuringSlotMigrationIsRetried).
	if err := c.retryRedirected(ctx, inspectPatience, read(), read); err != nil {
		return Info{}, fmt.Errorf("lease: inspect key %q: %w", key, err)
	}
	return parseInfo(key, reply)
}

// parseInfo reads the reply of inspect.lua.
func parseInfo(key string, reply []any) (Info, error) {
	bad := func(what string) (Info, error) {
		return Info{}, fmt.Errorf("lease: inspect key %q: unexpected reply (%s): %v", key, what, reply)
	}
	if len(reply) < 6 || (len(reply)-6)%3 != 0 {
		return bad("length")
	}
	str := func(i int) string { s, _ := reply[i].(string); return s }
	num := func(i int) int64 {
		switch v := reply[i].(type) {
		case int64:
			return v
		case string:
			n, _ := strconv.ParseInt(v, 10, 64)
			return n
		}
		return 0
	}
	info := Info{Key: key, Queued: int(num(5))}
	if v := str(0); v != "" {
		info.Hold = strings.HasPrefix(v, "~")
		id, tok, ok := strings.Cut(strings.TrimPrefix(v, "~"), ":")
		n, err := strconv.ParseUint(tok, 10, 64)
		if !ok || err != nil || id == "" {
			info.Holder, info.Hold = v, false // not the runtime's: show it whole
		} else {
			info.Holder, info.Token = id, Token(n)
			_, info.Owner = splitIdentity(id)
		}
		switch pttl := num(1); {
		case pttl >= 0:
			info.TTL = time.Duration(pttl) * time.Millisecond
		case pttl == -1:
			info.TTL = -1
		}
	}
	if n, err := strconv.ParseUint(str(2), 10, 64); err == nil {
		info.LastToken = Token(n)
	}
	nowUS := num(3)*1_000_000 + num(4)
	nowMS := nowUS / 1000
	for i := 6; i < len(reply); i += 3 {
		member := str(i)
		arrival, err1 := strconv.ParseFloat(str(i+1), 64)
		// entry: expiry ms ":" acquire number (see acquire.lua)
		exp, _, _ := strings.Cut(str(i+2), ":")
		expiry, _ := strconv.ParseInt(exp, 10, 64)
		if err1 != nil {
			return bad("queue score")
		}
		if expiry <= nowMS {
			continue // dead: the release skips it
		}
		w := Waiter{
			Waited:  time.Duration(nowUS-int64(arrival)) * time.Microsecond,
			Expires: time.Duration(expiry-nowMS) * time.Millisecond,
		}
		// member: identity|ttl ms|fence|claim ms|inbox[|counter ttl ms] (see release.lua)
		parts := strings.Split(member, "|")
		w.Identity = parts[0]
		if len(parts) >= 4 {
			ttl, _ := strconv.ParseInt(parts[1], 10, 64)
			w.TTL, w.Fence = time.Duration(ttl)*time.Millisecond, parts[2] == "1"
		}
		info.Waiters = append(info.Waiters, w)
	}
	return info, nil
}

// ListPage is about how many leases one List call returns: SCAN's COUNT
// is a hint, so a page may hold somewhat more.
const ListPage = 100

// List returns a page of the leases whose keys match pattern, a Redis glob
// (as in SCAN MATCH: '*', '?', '[...]', '\' escapes) applied to the user's
// keys; "" or "*" lists all. Start with cursor ""; each call returns the
// cursor of the next page, "" after the last. It uses SCAN, never KEYS, so
// the server is never blocked, and on a Cluster it scans every master in
// turn. SCAN's guarantees apply: a lease held for the whole listing is
// listed, one taken or released meanwhile may or may not be, a key may be
// listed twice (SCAN repeats keys when the server resizes its table, as
// after many keys were deleted), a failover during the listing can repeat
// keys (a master's replica that took over is scanned from the start), and
// a slot migration can repeat or miss keys. (Watch reports each key once.)
// Pages may be empty before the last one. On an error, page holds the
// leases read before it and next the cursor to go on from. Needs Redis 6.0
// or later (SCAN ... TYPE).
func (c *Client) List(ctx context.Context, pattern, cursor string) (page []Info, next string, err error) {
	if c.closed.Load() {
		return nil, "", fmt.Errorf("%w: list", ErrClosed)
	}
	nodes, err := c.scanNodes(ctx)
	if err != nil {
		return nil, "", fmt.Errorf("lease: list: %w", err)
	}
	done, todo, pos, err := resumeAt(nodes, cursor)
	if err != nil {
		return nil, "", err
	}
	match := c.lockPattern(pattern)
	deadline := time.Now().Add(time.Second) // return a page at least this often
	for len(todo) > 0 {
		count := int64(max(ListPage-len(page), 10))
		keys, npos, err := todo[0].rdb.ScanType(ctx, pos, match, count, "string").Result()
		if err != nil {
			c.mayReload(err)
			where := ""
			if todo[0].addr != "" {
				where = " on " + todo[0].addr
			}
			return page, listCursor(done, todo, pos), fmt.Errorf("lease: list: SCAN%s: %w", where, err)
		}
		var user []string
		for _, rk := range keys {
			if k, ok := c.userKey(rk, ":l"); ok && userMatch(pattern, k) {
				user = append(user, k)
			}
		}
		var infos []Info
		inspect := func() (err error) {
			infos, err = c.inspectMany(ctx, user)
			return err
		}
		// As Inspect: again after a slot migration's TRYAGAIN.
		if err := c.retryRedirected(ctx, inspectPatience, inspect(), inspect); err != nil {
			return page, listCursor(done, todo, pos), err
		}
		for _, info := range infos {
			if !info.Free() { // released between SCAN and inspection
				page = append(page, info)
			}
		}
		pos = npos
		if pos == 0 {
			if todo[0].addr != "" {
				done = append(done, todo[0].addr)
			}
			todo = todo[1:]
		}
		if len(page) >= ListPage || time.Now().After(deadline) {
			break
		}
	}
	return page, listCursor(done, todo, pos), nil
}

// scanNode is one server a listing scans: the standalone server, or one
// Cluster master.
type scanNode struct {
	addr string
	rdb  redis.Cmdable
}

// scanNodes returns the servers that hold lease keys, in a stable order.
func (c *Client) scanNodes(ctx context.Context) ([]scanNode, error) {
	cc, ok := c.rdb.(*redis.ClusterClient)
	if !ok {
		return []scanNode{{rdb: c.rdb}}, nil
	}
	var (
		mu    sync.Mutex
		nodes []scanNode
	)
	err := cc.ForEachMaster(ctx, func(_ context.Context, m *redis.Client) error {
		mu.Lock()
		nodes = append(nodes, scanNode{addr: m.Options().Addr, rdb: m})
		mu.Unlock()
		return nil
	})
	slices.SortFunc(nodes, func(a, b scanNode) int { return strings.Compare(a.addr, b.addr) })
	return nodes, err
}

// listCursor encodes where the next page starts ("" at the end): the SCAN
// cursor; on a Cluster after the address of the master it is for and "@",
// and before them the addresses of the masters scanned to the end, each
// followed by ",", then "|". The masters still to scan are those not
// listed as done, whatever their addresses: a master's replica that took
// over (a new address) is scanned from the start, so a failover during a
// listing repeats keys rather than miss its shard
// (TestAdversary68_ListResumedAcrossHungMasterFailover).
func listCursor(done []string, todo []scanNode, pos uint64) string {
	if len(todo) == 0 {
		return ""
	}
	if todo[0].addr == "" {
		return strconv.FormatUint(pos, 10)
	}
	var b strings.Builder
	for _, a := range done {
		b.WriteString(a)
		b.WriteByte(',')
	}
	b.WriteByte('|')
	b.WriteString(todo[0].addr)
	b.WriteByte('@')
	b.WriteString(strconv.FormatUint(pos, 10))
	return b.String()
}

// resumeAt decodes a cursor (see listCursor) against the masters there are
// now: the masters scanned to the end, those still to scan (the cursor's
// own first, if it is still a master; else its shard's new master is
// among the rest, scanned from the start), and the SCAN cursor of the
// first. A cursor of the form before the done list ("addr@pos") counts as
// done the masters whose addresses sort before addr.
func resumeAt(nodes []scanNode, cursor string) (done []string, todo []scanNode, pos uint64, err error) {
	if cursor == "" {
		return nil, nodes, 0, nil
	}
	addr, num := "", cursor
	if i := strings.LastIndex(cursor, "@"); i >= 0 {
		addr, num = cursor[:i], cursor[i+1:]
	}
	pos, err = strconv.ParseUint(num, 10, 64)
	if err != nil {
		return nil, nil, 0, fmt.Errorf("lease: list: bad cursor %q", cursor)
	}
	isDone := func(a string) bool { return a < addr }
	if list, cur, ok := strings.Cut(addr, "|"); ok {
		addr = cur
		for _, a := range strings.Split(list, ",") {
			if a != "" {
				done = append(done, a)
			}
		}
		isDone = func(a string) bool { return slices.Contains(done, a) }
	} else {
		for _, n := range nodes {
			if n.addr != "" && isDone(n.addr) {
				done = append(done, n.addr)
			}
		}
	}
	found := false
	for _, n := range nodes {
		switch {
		case n.addr == addr && !found:
			found = true
			todo = append([]scanNode{n}, todo...)
		case !isDone(n.addr):
			todo = append(todo, n)
		}
	}
	if !found {
		pos = 0 // its master is gone: its shard's new one starts over
	}
	return done, todo, pos, nil
}

// globMeta are the bytes that SCAN MATCH treats specially.
var globEscaper = strings.NewReplacer(`\`, `\\`, `*`, `\*`, `?`, `\?`, `[`, `\[`, `]`, `\]`)

// lockPattern turns a glob over user keys into one over lock keys that
// matches at least their names: the prefix matches literally, the rest as
// scanGlob makes it. Each name it finds is matched again as a user key
// (userMatch).
func (c *Client) lockPattern(pattern string) string {
	if pattern == "" {
		pattern = "*"
	}
	return globEscaper.Replace(c.prefix) + "{" + scanGlob(pattern) + "}:l"
}

// userMatch reports whether the user's key matches the glob pattern of
// List or Watch ("" lists all).
func userMatch(pattern, key string) bool {
	return pattern == "" || pattern == "*" || globMatch(pattern, key)
}

// userKey maps the name of one of a lease's keys (the lock, suffix ":l";
// the channel, ":c") back to the user's key; ok is false for a name the
// runtime would not have made.
func (c *Client) userKey(name, suffix string) (string, bool) {
	s, ok := strings.CutPrefix(name, c.prefix+"{")
	if !ok {
		return "", false
	}
	if s, ok = strings.CutSuffix(s, "}"+suffix); !ok || strings.ContainsAny(s, "{}") {
		return "", false
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '%' {
			b.WriteByte(s[i])
			continue
		}
		if i+2 >= len(s) {
			return "", false
		}
		switch s[i+1 : i+3] {
		case "25":
			b.WriteByte('%')
		case "7B":
			b.WriteByte('{')
		case "7D":
			b.WriteByte('}')
		default:
			return "", false
		}
		i += 2
	}
	return b.String(), true
}

// inspectMany inspects keys in one pipeline (on a Cluster, one per node).
func (c *Client) inspectMany(ctx context.Context, keys []string) ([]Info, error) {
	if len(keys) == 0 {
		return nil, nil
	}
	// A ReadOnly Cluster client loads its command table for a pipeline
	// (may its commands go to replicas?): wait for the load within ctx, as
	// the calls on one key do, rather than let go-redis start it.
	if cc, ok := c.rdb.(*redis.ClusterClient); ok && cc.Options().ReadOnly {
		if err := c.waitCommandTable(ctx, "inspect", keys[0], time.Time{}); err != nil {
			return nil, err
		}
	}
	args := func(key string) []string {
		k := redisKeys(c.prefix, key)
		return []string{k.lock, k.fence, k.queue, k.qexp}
	}
	cmds := make([]*redis.Cmd, len(keys))
	run := func(eval func(p redis.Pipeliner, keys []string) *redis.Cmd) bool {
		_, _ = c.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for i, key := range keys {
				cmds[i] = eval(p, args(key))
			}
			return nil
		}) // each command's error is looked at below
		return slices.ContainsFunc(cmds, func(cmd *redis.Cmd) bool { return redis.HasErrorPrefix(cmd.Err(), "NOSCRIPT") })
	}
	if run(func(p redis.Pipeliner, keys []string) *redis.Cmd {
		return inspectScript.EvalSha(ctx, p, keys, maxWaiters)
	}) {
		// Not loaded on some server (a restart, SCRIPT FLUSH): send it whole.
		run(func(p redis.Pipeliner, keys []string) *redis.Cmd { return inspectScript.Eval(ctx, p, keys, maxWaiters) })
	}
	var infos []Info
	for i, cmd := range cmds {
		reply, err := cmd.Slice()
		switch {
		case err == nil:
		case redis.HasErrorPrefix(err, "WRONGTYPE"):
			continue // not a lease
		default:
			return infos, fmt.Errorf("lease: inspect key %q: %w", keys[i], err)
		}
		info, err := parseInfo(keys[i], reply)
		if err != nil {
			return infos, err
		}
		infos = append(infos, info)
	}
	return infos, nil
}

// ForceResult says what ForceRelease found and did.
type ForceResult int

const (
	// ForceReleased: the identity held the lease; it was deleted, or
	// handed to the first live waiter, and its holder will find it lost.
	ForceReleased ForceResult = iota + 1
	// ForceHoldEnded: the identity's call had returned and a hold-min kept
	// the lease; the hold was ended and the waiters woken.
	ForceHoldEnded
	// ForceNotHeld: the key was free, or the identity's lease had already
	// ended. Nothing was changed.
	ForceNotHeld
	// ForceHeldByOther: another identity holds the key (the lease was
	// released and taken again since it was inspected). Nothing was
	// changed.
	ForceHeldByOther
)

func (r ForceResult) String() string {
	switch r {
	case ForceReleased:
		return "released"
	case ForceHoldEnded:
		return "hold ended"
	case ForceNotHeld:
		return "not held"
	case ForceHeldByOther:
		return "held by another"
	}
	return "ForceResult(" + strconv.Itoa(int(r)) + ")"
}

// ForceRelease ends the lease on key if, and only if, identity (an
// Info.Holder from Inspect or List) still holds it: a compare-and-delete,
// so a lease released and taken again since it was inspected is never
// touched (ForceHeldByOther). The release is the holder's own release
// script run on its behalf: the first live waiter gets the lease at once,
// and the waiters are notified. The holder is told as an ordinary loss:
// its next renewal (within a third of its TTL) or its release finds the
// lease gone, its function's context is cancelled with a cause wrapping
// ErrLost that says it was released from outside, and its Do returns an
// error wrapping ErrLost.
//
// A lease in its hold-min (Info.Hold: the holder's call has returned) has
// its hold ended: the key is deleted and the waiters race for it as when
// a hold runs out (ForceHoldEnded).
//
// The result is nil only for a parsed reply; otherwise, as for Do, the
// error wraps ErrUnknown (sent, no reply: the release may have happened)
// or ErrRefused. The calls are safe to repeat.
func (c *Client) ForceRelease(ctx context.Context, key, identity string) (ForceResult, error) {
	if key == "" {
		return 0, fmt.Errorf("%w: empty key", ErrBadKey)
	}
	if !isIdentity(identity) {
		return 0, fmt.Errorf("lease: ForceRelease(%q, %q): not a holder's identity (32 hex digits, and /owner for a leader; see Info.Holder)", key, identity)
	}
	if c.closed.Load() {
		return 0, fmt.Errorf("%w: force release of key %q", ErrClosed, key)
	}
	if err := c.waitCommandTable(ctx, "force release", key, time.Time{}); err != nil {
		return 0, err
	}
	k := redisKeys(c.prefix, key)
	fail := func(err error) (ForceResult, error) {
		class := ErrUnknown
		if classify(err) != outUnknown {
			class = ErrRefused
		}
		return 0, fmt.Errorf("%w: force release of key %q: %w", class, key, err)
	}
	get := c.rdb.Get(ctx, k.lock)
	if err := get.Err(); err != nil && !errors.Is(err, redis.Nil) {
		c.mayReload(err)
		// Nothing was released: no release is sent after a failed read.
		return 0, fmt.Errorf("%w: force release of key %q: reading the key (nothing released): %w", ErrRefused, key, err)
	}
	v := get.Val()
	switch {
	case v == "":
		return ForceNotHeld, nil
	case strings.HasPrefix(v, "~"+identity+":"):
		return c.endHold(ctx, k, key, identity, fail)
	case !strings.HasPrefix(v, identity+":"):
		return ForceHeldByOther, nil
	}
	// The holder learns of the release at its next renewal or its own
	// release, at most its remaining TTL from then: the release script
	// keeps the tombstone that names the cause that long, read and set in
	// one step, so that neither a renewal since the read above nor a later
	// command that fails can cut it short
	// (TestAdversary61_ForceReleaseCauseWithoutTheOperatorsConnection,
	// TestAdversary62_ForceReleaseRenewedAfterTheRead).
	res, err := c.releaseAs(ctx, k, identity, "", 0, "x")
	if err != nil {
		return fail(err)
	}
	switch res {
	case 1:
		// Best effort, for watchers (leasectl watch): a handover already
		// named its waiter, a plain delete published nothing. A one-letter
		// message wakes every waiter of the key to look again.
		_ = c.rdb.Publish(ctx, k.channel, "x").Err()
		return ForceReleased, nil
	case 2:
		// The holder released with a hold-min in between.
		return c.endHold(ctx, k, key, identity, fail)
	case 0:
		return ForceNotHeld, nil
	default:
		return ForceHeldByOther, nil
	}
}

// endHold ends identity's hold-min on key early (endhold.lua).
func (c *Client) endHold(ctx context.Context, k keys, key, identity string, fail func(error) (ForceResult, error)) (ForceResult, error) {
	var res int64
	tomb := k.tomb + identity
	end := func() (err error) {
		// Arguments of its own for each send, one of them counted: a
		// re-send by go-redis that found no connection leaves the end of
		// the hold unknown, not refused (see afterWrite).
		ttl := &intArg{n: ms(c.tombTTL())}
		argv := []any{nil, nil, "4", sarg(&k.lock), sarg(&k.channel), sarg(&tomb), sarg(&k.queue), sarg(&identity), "PUBLISH", ttl}
		res, err = c.evalArgs(ctx, endholdScript, argv)
		return c.afterWrite(err, ttl.writes.Load())
	}
	// A slot migration answers TRYAGAIN (the channel and tombstone never
	// exist): not run, sent again while ctx lasts, as a release is.
	if err := c.retryRedirected(ctx, c.releaseTimeout, end(), end); err != nil {
		return fail(err)
	}
	if res == 11 { // ended, but its message was refused
		res = 1
		c.publishRefused(&k)
	}
	switch res {
	case 1:
		return ForceHoldEnded, nil
	case 0:
		return ForceNotHeld, nil
	}
	return ForceHeldByOther, nil
}

// isIdentity reports whether s has the form of a grant's identity (newID).
func isIdentity(s string) bool {
	if hex, owner, ok := strings.Cut(s, string(ownerSep)); ok {
		if owner == "" || strings.ContainsAny(owner, ":"+string(ownerSep)) {
			return false
		}
		s = hex
	}
	if len(s) != 32 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}
