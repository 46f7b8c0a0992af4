package lease_test

import (
	"context"
	"fmt"
	"math"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasegen/leasegen/runtime/lease"
	"github.com/leasegen/leasegen/runtime/leasetest"
)

// adv52Case is one state of the lock and queue keys and one acquire on it.
type adv52Case struct {
	name  string
	setup func(ctx context.Context, a *redis.Client, k []string)
	id    string
	ttl   any
	fence bool
	life  any
	oom   bool     // maxmemory 1 (noeviction) during the call
	acl   []string // run as a user with these rules (nil: the admin)
}

var adv52Digits = regexp.MustCompile(`[0-9]{12,}`)

func adv52Norm(s string) string { return adv52Digits.ReplaceAllString(s, "T") }

// adv52Reply normalizes an acquire's answer: tokens made of the time are
// T, a busy answer's time left is in whole seconds, an error is its text
// up to the script's name (line numbers differ between the sources).
func adv52Reply(v any, err error) string {
	if err != nil {
		s := err.Error()
		if i := strings.Index(s, " script: "); i >= 0 {
			s = s[:i]
		}
		s = regexp.MustCompile(`user_script:[0-9]+`).ReplaceAllString(s, "user_script:N")
		// Since the scripts of 2026-12-05 a refused ZADD is named: the
		// same refusal.
		s = strings.TrimSuffix(s, " (the acquire script calls ZADD)")
		return "error: " + s
	}
	switch n := v.(type) {
	case int64:
		switch {
		case n >= 0:
			return adv52Norm(fmt.Sprintf("grant %d", n))
		case n < -3:
			return fmt.Sprintf("busy %ds", (-3-n+500)/1000)
		default:
			return fmt.Sprintf("busy %d", n)
		}
	case string:
		return adv52Norm("grant string " + n)
	}
	return fmt.Sprintf("%T %v", v, v)
}

// adv52State is the four keys' types, expiries (whole seconds) and contents.
func adv52State(ctx context.Context, a *redis.Client, ks []string) string {
	var b strings.Builder
	for _, k := range ks {
		typ := a.Type(ctx, k).Val()
		if typ == "none" {
			fmt.Fprintf(&b, "[%s none] ", k[strings.LastIndex(k, "}"):])
			continue
		}
		d, _ := a.Do(ctx, "PTTL", k).Int64()
		ttl := fmt.Sprint(d)
		if d >= 0 {
			ttl = fmt.Sprintf("%.1fs", float64((d+50)/100)/10)
		}
		var content string
		switch typ {
		case "string":
			content = a.Get(ctx, k).Val()
		case "zset":
			content = strings.Join(a.ZRange(ctx, k, 0, -1).Val(), ",")
		case "hash":
			m := a.HGetAll(ctx, k).Val()
			var fs []string
			for f, v := range m {
				fs = append(fs, f+"="+v)
			}
			sort.Strings(fs)
			content = strings.Join(fs, ",")
		default:
			content = "?"
		}
		fmt.Fprintf(&b, "[%s %s ttl=%s %q] ", k[strings.LastIndex(k, "}"):], typ, ttl, adv52Norm(content))
	}
	return b.String()
}

var adv52TTL = regexp.MustCompile(`ttl=(\d+\.\d)s`)

// adv52Same compares two renderings of adv52State (and what surrounds
// them) as equal when they differ only in TTLs by up to 0.3s: the old and
// the new script run one after the other, and a TTL set steps earlier
// has run down further in the second run when the machine is loaded
// (9.9s against 10.0s was seen with other packages' tests running).
func adv52Same(a, b string) bool {
	ta, tb := adv52TTL.FindAllStringSubmatch(a, -1), adv52TTL.FindAllStringSubmatch(b, -1)
	if adv52TTL.ReplaceAllString(a, "ttl=?") != adv52TTL.ReplaceAllString(b, "ttl=?") {
		return false
	}
	for i := range ta {
		x, _ := strconv.ParseFloat(ta[i][1], 64)
		y, _ := strconv.ParseFloat(tb[i][1], 64)
		if math.Abs(x-y) > 0.3 {
			return false
		}
	}
	return true
}

func adv52Held(v string, persist bool) func(context.Context, *redis.Client, []string) {
	return func(ctx context.Context, a *redis.Client, k []string) {
		if persist {
			a.Set(ctx, k[0], v, 0)
		} else {
			a.Set(ctx, k[0], v, 0)
			a.PExpire(ctx, k[0], 20000*1e6)
		}
	}
}

func adv52Cases() []adv52Case {
	held := adv52Held("other:7", false)
	heldQ := func(qttl int64, persist bool) func(context.Context, *redis.Client, []string) {
		return func(ctx context.Context, a *redis.Client, k []string) {
			held(ctx, a, k)
			a.ZAdd(ctx, k[2], redis.Z{Score: 1, Member: "early|1|0|1|x"})
			a.HSet(ctx, k[3], "early|1|0|1|x", "99999999999999:1")
			if !persist {
				a.Do(ctx, "PEXPIRE", k[2], qttl)
				a.Do(ctx, "PEXPIRE", k[3], qttl)
			}
		}
	}
	typed := func(kind string, idx int) func(context.Context, *redis.Client, []string) {
		return func(ctx context.Context, a *redis.Client, k []string) {
			if idx != 0 {
				held(ctx, a, k)
			}
			switch kind {
			case "hash":
				a.HSet(ctx, k[idx], "f", "v")
			case "list":
				a.RPush(ctx, k[idx], "x")
			case "zset":
				a.ZAdd(ctx, k[idx], redis.Z{Score: 1, Member: "x"})
			case "string":
				a.Set(ctx, k[idx], "x", 0)
			}
			a.Do(ctx, "PEXPIRE", k[idx], 30000)
		}
	}
	free := func(context.Context, *redis.Client, []string) {}
	var cs []adv52Case
	add := func(c adv52Case) {
		if c.id == "" {
			c.id = "me"
		}
		if c.ttl == nil {
			c.ttl = 10000
		}
		if c.life == nil {
			c.life = 0
		}
		cs = append(cs, c)
	}
	for _, life := range []int{0, 5000} {
		for _, fence := range []bool{false, true} {
			p := fmt.Sprintf("life%d/fence%v/", life, fence)
			add(adv52Case{name: p + "free", setup: free, life: life, fence: fence})
			add(adv52Case{name: p + "held", setup: held, life: life, fence: fence})
			add(adv52Case{name: p + "held empty", setup: adv52Held("", false), life: life, fence: fence})
			add(adv52Case{name: p + "held no colon", setup: adv52Held("other", false), life: life, fence: fence})
			add(adv52Case{name: p + "held id without colon", setup: adv52Held("me", false), life: life, fence: fence})
			add(adv52Case{name: p + "held own empty token", setup: adv52Held("me:", false), life: life, fence: fence})
			add(adv52Case{name: p + "held own text token", setup: adv52Held("me:abc", false), life: life, fence: fence})
			add(adv52Case{name: p + "held own", setup: adv52Held("me:42", false), life: life, fence: fence})
			add(adv52Case{name: p + "held own persistent", setup: adv52Held("me:42", true), life: life, fence: fence})
			add(adv52Case{name: p + "held id prefix", setup: adv52Held("mex:1", false), life: life, fence: fence})
			add(adv52Case{name: p + "held id with colon", setup: adv52Held("me:x:1", false), id: "me:x", life: life, fence: fence})
			add(adv52Case{name: p + "held persistent", setup: adv52Held("other:1", true), life: life, fence: fence})
			for _, kind := range []string{"hash", "list", "zset"} {
				add(adv52Case{name: p + "lock is " + kind, setup: typed(kind, 0), life: life, fence: fence})
			}
			add(adv52Case{name: p + "counter is hash", setup: typed("hash", 1), life: life, fence: fence})
			add(adv52Case{name: p + "queue is string", setup: typed("string", 2), life: life, fence: fence})
			add(adv52Case{name: p + "queue expiries is string", setup: typed("string", 3), life: life, fence: fence})
			add(adv52Case{name: p + "queue is hash", setup: typed("hash", 2), life: life, fence: fence})
			add(adv52Case{name: p + "queue no expiry", setup: heldQ(0, true), life: life, fence: fence})
			add(adv52Case{name: p + "queue longer", setup: heldQ(60000, false), life: life, fence: fence})
			add(adv52Case{name: p + "queue shorter", setup: heldQ(1000, false), life: life, fence: fence})
			add(adv52Case{name: p + "queue equal", setup: heldQ(5000, false), life: life, fence: fence})
			for _, st := range []struct {
				n string
				f func(context.Context, *redis.Client, []string)
			}{{"free", free}, {"held", held}, {"own", adv52Held("me:42", false)}, {"held queue", heldQ(60000, false)}} {
				add(adv52Case{name: p + "oom " + st.n, setup: st.f, life: life, fence: fence, oom: true})
				for _, rule := range []string{"-get", "-pttl", "-pexpire", "-set", "-zadd", "-hset", "-publish", "-time", "-zrem", "-del"} {
					add(adv52Case{name: p + "acl " + rule + " " + st.n, setup: st.f, life: life, fence: fence,
						acl: []string{"~*", "&*", "+@all", rule}})
				}
				add(adv52Case{name: p + "acl write-only lock " + st.n, setup: st.f, life: life, fence: fence,
					acl: []string{"%W~{*}", "~{*}:*", "&*", "+@all"}})
				add(adv52Case{name: p + "acl read-only lock " + st.n, setup: st.f, life: life, fence: fence,
					acl: []string{"%R~{*}", "~{*}:*", "&*", "+@all"}})
			}
			add(adv52Case{name: p + "ttl 0 free", setup: free, ttl: 0, life: life, fence: fence})
			add(adv52Case{name: p + "ttl 0 held", setup: held, ttl: 0, life: life, fence: fence})
			add(adv52Case{name: p + "ttl 0 own", setup: adv52Held("me:42", false), ttl: 0, life: life, fence: fence})
			add(adv52Case{name: p + "ttl not a number held", setup: held, ttl: "abc", life: life, fence: fence})
		}
	}
	for _, life := range []any{-5, "1.5", int64(9e18), "abc"} {
		p := fmt.Sprintf("life%v/", life)
		add(adv52Case{name: p + "held", setup: held, life: life})
		add(adv52Case{name: p + "held queue longer", setup: heldQ(60000, false), life: life})
		add(adv52Case{name: p + "held queue persistent", setup: heldQ(0, true), life: life})
		add(adv52Case{name: p + "free", setup: free, life: life})
	}
	return cs
}

// adv52Run runs src on the case's state (the server flushed first) and
// returns the normalized answer and the keys' state after it.
func adv52Run(t *testing.T, srv *leasetest.Server, admin *redis.Client, users map[string]*redis.Client, c adv52Case, src string) (string, string) {
	t.Helper()
	ctx := context.Background()
	if err := admin.ConfigSet(ctx, "maxmemory", "0").Err(); err != nil {
		t.Fatal(err)
	}
	if err := admin.FlushAll(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	ks := acquireKeys("adv52")
	c.setup(ctx, admin, ks)
	rdb := admin
	if c.acl != nil {
		name := strings.Join(c.acl, " ")
		if users[name] == nil {
			users[name] = srv.ACLUser(t, fmt.Sprintf("u%d", len(users)), "pw", c.acl...)
		}
		rdb = users[name]
	}
	if c.oom {
		if err := admin.ConfigSet(ctx, "maxmemory", "1").Err(); err != nil {
			t.Fatal(err)
		}
	}
	fence := "0"
	if c.fence {
		fence = "1"
	}
	member := fmt.Sprintf("%s|%v|%s|100|inbox", c.id, c.ttl, fence)
	v, err := rdb.Eval(ctx, src, ks, c.id, c.ttl, fence, 60000, c.life, member, "{adv52}:ch", 1).Result()
	if err := admin.ConfigSet(ctx, "maxmemory", "0").Err(); err != nil {
		t.Fatal(err)
	}
	return adv52Reply(v, err), adv52State(ctx, admin, ks)
}

// TestAdversary52_SameAsOld runs the acquire script before bd50cd3 and
// after it on the same states (odd values at the key, keys of the wrong
// type, queues with no, longer, shorter expiries, maxmemory, ACL users
// lacking one command each or read or write access to the lock key, odd
// ttl and life arguments): the claim is that every outcome, answer and
// keys after it, is the old script's.
func TestAdversary52_SameAsOld(t *testing.T) {
	t.Parallel()
	srv := leasetest.StartRedis(t, "--maxmemory-policy", "noeviction")
	admin := srv.Client(t)
	users := map[string]*redis.Client{}
	oldSrc := adv52OldSrc()
	diffs, noGet := 0, 0
	for _, c := range adv52Cases() {
		or, os := adv52Run(t, srv, admin, users, c, oldSrc)
		nr, ns := adv52Run(t, srv, admin, users, c, lease.AcquireSrc)
		if slices.Contains(c.acl, "-get") && or != nr {
			// The one difference, accepted and documented (README,
			// Deployments): a user without GET was refused at a held
			// key's GET; SET NX GET now reads it without +get. Such a
			// user's release (a GET) is refused either way, as its
			// grant of a free key always was.
			noGet++
			if !strings.HasPrefix(or, "error: ") || !strings.Contains(or, "can't run this command") || strings.HasPrefix(nr, "error: ") {
				t.Errorf("%s: a user without GET: old %s, new %s; want the old refused (NOPERM) and the new answered", c.name, or, nr)
			}
			continue
		}
		if or != nr || !adv52Same(os, ns) {
			diffs++
			t.Errorf("%s:\n  old: %s\n       %s\n  new: %s\n       %s", c.name, or, os, nr, ns)
		}
	}
	t.Logf("%d cases, %d differ, %d of a user without GET (accepted)", len(adv52Cases()), diffs, noGet)
	if noGet == 0 {
		t.Error("no case of a user without GET differed: the cases no longer cover it")
	}
}

// TestAdversary52_QueueNeverWithoutExpiry: after any acquire, by either
// script, a queue key that exists has an expiry (the claim: the queue is
// never left without one), whatever the answer. Cases whose setup made a
// persistent queue and whose call was refused are left out (the call did
// not touch the queue).
func TestAdversary52_QueueNeverWithoutExpiry(t *testing.T) {
	t.Parallel()
	srv := leasetest.StartRedis(t, "--maxmemory-policy", "noeviction")
	admin := srv.Client(t)
	users := map[string]*redis.Client{}
	for _, src := range []struct{ name, src string }{{"old", adv52OldSrc()}, {"new", lease.AcquireSrc}} {
		for _, c := range adv52Cases() {
			if strings.Contains(c.name, "persistent") && strings.Contains(c.name, "queue") ||
				strings.HasPrefix(c.name, "life0/") && strings.Contains(c.name, "queue no expiry") ||
				strings.HasPrefix(c.name, "life1.5/") || strings.HasPrefix(c.name, "life9") {
				continue // the call did not touch a persistent queue, or a life no Client sends
			}
			r, s := adv52Run(t, srv, admin, users, c, src.src)
			noExpiry := strings.Contains(s, ":q zset ttl=-1") || strings.Contains(s, ":qx hash ttl=-1")
			if noExpiry && (slices.ContainsFunc(c.acl, func(r string) bool { return r == "-pexpire" || r == "-hset" }) || strings.Contains(c.name, "queue expiries is string")) {
				// A known limit of both scripts (README, Deployments): a
				// waiter's ZADD comes before a command the ACL refuses or
				// a hash of another type fails, and scripts do not roll
				// back. The call must then fail, never be granted.
				if !strings.HasPrefix(r, "error: ") {
					t.Errorf("%s script, %s: answered %s with a refused queue write, want an error", src.name, c.name, r)
				}
				continue
			}
			if strings.Contains(s, ":q zset ttl=-1") || strings.Contains(s, ":qx hash ttl=-1") {
				t.Errorf("%s script, %s: queue left without expiry: %s\n  answer %s", src.name, c.name, s, r)
			}
		}
	}
}

// TestAdversary52_QueueSequenceSameAsOld: one sequence of acquires on a
// held key (waiters with lives of 8, 2, 15, 1 s, one joining again with a
// shorter life, the queue's hash or zset lost or made persistent between
// calls, the holder's replay, a call that does not wait), run with the
// old script and the new one: each answer and the keys after each step
// must be the same, and the queue's expiry never shorter than the longest
// life given so far (while its keys live).
func TestAdversary52_QueueSequenceSameAsOld(t *testing.T) {
	srv := leasetest.StartRedis(t)
	admin := srv.Client(t)
	ctx := context.Background()
	ks := acquireKeys("adv52seq")
	type step struct {
		id    string
		life  int
		fence bool
		do    func()
	}
	steps := []step{
		{id: "holder"}, {id: "w1", life: 8000}, {id: "w2", life: 2000}, {id: "w3", life: 15000, fence: true},
		{id: "w1", life: 1000}, {do: func() { admin.Del(ctx, ks[3]) }}, {id: "w4", life: 3000},
		{do: func() { admin.Persist(ctx, ks[2]) }}, {id: "w5", life: 500},
		{do: func() { admin.Del(ctx, ks[2]) }}, {id: "w6", life: 700, fence: true},
		{do: func() {
			admin.PExpire(ctx, ks[2], 100*time.Millisecond)
			admin.PExpire(ctx, ks[3], 100*time.Millisecond)
		}},
		{id: "w7", life: 400}, {id: "holder"}, {id: "w8"}, {id: "holder", life: 9000},
	}
	run := func(src string) []string {
		admin.FlushAll(ctx)
		var out []string
		for i, s := range steps {
			if s.do != nil {
				s.do()
				continue
			}
			fence := "0"
			if s.fence {
				fence = "1"
			}
			member := fmt.Sprintf("%s|10000|%s|100|inbox", s.id, fence)
			v, err := admin.Eval(ctx, src, ks, s.id, 10000, fence, 60000, s.life, member, "{adv52seq}:ch", i).Result()
			out = append(out, fmt.Sprintf("%d %s life %d: %s %s", i, s.id, s.life, adv52Reply(v, err), adv52State(ctx, admin, ks)))
		}
		return out
	}
	old, cur := run(adv52OldSrc()), run(lease.AcquireSrc)
	for i := range old {
		if !adv52Same(old[i], cur[i]) {
			t.Errorf("step differs:\n  old: %s\n  new: %s", old[i], cur[i])
		}
	}
	for _, s := range cur {
		t.Log(s)
	}
}
