package main

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/leasegen/leasegen/runtime/lease"
)

var listCmd = &command{
	name: "list", args: "[pattern]",
	summary: "list held leases whose keys match a pattern: key, holder, token, TTL left",
	detail: `List prints one line per held lease whose key matches pattern, a Redis
glob over the keys the services lock ('orders:*'; default '*'): the key, the
holder's identity (for release -id), its fencing token, the TTL left, HOLD
when its holder has returned and a hold-min keeps it, and the live waiters.
It uses SCAN, never KEYS, and scans every master of a Cluster.`,
	flags: func(c *cli, fs *flag.FlagSet) {
		fs.BoolVar(&c.json, "json", false, "one JSON object per lease, one per line")
	},
	run: func(c *cli, fs *flag.FlagSet) error {
		if fs.NArg() > 1 {
			return usagef("list takes at most one pattern, got %d arguments", fs.NArg())
		}
		pattern := fs.Arg(0)
		lc, closeFn, err := c.connect()
		if err != nil {
			return err
		}
		defer closeFn()
		tw := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
		n := 0
		for cursor := ""; ; {
			ctx, cancel := c.call()
			page, next, err := lc.List(ctx, pattern, cursor)
			cancel()
			if err != nil {
				tw.Flush()
				return err
			}
			for _, info := range page {
				if c.json {
					if err := writeJSON(c.stdout, infoJSON(info)); err != nil {
						return err
					}
					continue
				}
				if n == 0 {
					fmt.Fprintln(tw, "KEY\tHOLDER\tTOKEN\tTTL\tHOLD\tWAITERS")
				}
				hold := "-"
				if info.Hold {
					hold = "HOLD"
				}
				left := ttl(info.TTL)
				if info.TTL < 0 {
					left = "none"
				}
				fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%d\n", shown(info.Key), shown(info.Holder), info.Token, left, hold, len(info.Waiters))
				n++
			}
			if cursor = next; cursor == "" {
				break
			}
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		if n == 0 && !c.json {
			shown := pattern
			if shown == "" {
				shown = "*"
			}
			fmt.Fprintf(c.stderr, "no held lease matches %q (prefix %q)\n", shown, c.prefix)
		}
		return nil
	},
}

var showCmd = &command{
	name: "show", args: "KEY",
	summary: "show everything known about the lease on KEY",
	detail: `Show prints the lease on KEY (the exact key, as the service locks it):
its holder's identity, owner (none stored for plain leases), fencing token,
TTL left, whether a hold-min keeps it, the last token minted for the key,
and the live waiters in the order they will get it. A free key is shown as
free (exit status 0).`,
	flags: func(c *cli, fs *flag.FlagSet) { fs.BoolVar(&c.json, "json", false, "print a JSON object") },
	run: func(c *cli, fs *flag.FlagSet) error {
		if fs.NArg() != 1 {
			return usagef("show takes one KEY, got %d arguments", fs.NArg())
		}
		lc, closeFn, err := c.connect()
		if err != nil {
			return err
		}
		defer closeFn()
		ctx, cancel := c.call()
		info, err := lc.Inspect(ctx, fs.Arg(0))
		cancel()
		if err != nil {
			return err
		}
		if c.json {
			return writeJSON(c.stdout, infoJSON(info))
		}
		printInfo(c.stdout, info)
		return nil
	},
}

var releaseCmd = &command{
	name: "release", args: "KEY",
	summary: "force-release the lease on KEY (compare-and-delete of the holder shown)",
	detail: `Release shows the lease on KEY (the exact key, no pattern), asks for
confirmation (type yes; -yes skips the question), then releases it only if
the holder it showed still holds it: a compare-and-delete, so a lease
released and taken again in between is left alone, and leasectl says so and
exits 1. With -id, only that holder (as shown by list or show) is released.

The release is the holder's own release run on its behalf: the first live
waiter gets the lease at once and the waiters are notified. The holder's
process learns it as an ordinary loss at its next renewal (within a third
of its TTL): its work's context is cancelled with lease.ErrLost, "released
from outside". A lease whose holder has returned and is kept by a hold-min
has its hold ended; the waiters race for it.`,
	flags: func(c *cli, fs *flag.FlagSet) {
		fs.BoolVar(&c.yes, "yes", false, "do not ask for confirmation")
		fs.StringVar(&c.id, "id", "", "release only if this identity holds the lease")
	},
	run: func(c *cli, fs *flag.FlagSet) error {
		if fs.NArg() != 1 {
			return usagef("release takes one KEY, got %d arguments", fs.NArg())
		}
		key := fs.Arg(0)
		want := c.id
		lc, closeFn, err := c.connect()
		if err != nil {
			return err
		}
		defer closeFn()
		ctx, cancel := c.call()
		info, err := lc.Inspect(ctx, key)
		cancel()
		if err != nil {
			return err
		}
		switch {
		case info.Free():
			return fmt.Errorf("%q is not held: nothing to release", key)
		case !identityLike(info.Holder):
			return fmt.Errorf("the lock key of %q holds %q, which the runtime did not write: nothing released", key, info.Holder)
		case want != "" && info.Holder != want:
			return fmt.Errorf("%q is held by %s (token %d), not by %s: nothing released", key, shown(info.Holder), info.Token, shown(want))
		}
		printInfo(c.stdout, info)
		if !c.yes {
			fmt.Fprintf(c.stderr, "\nForce-release %q from holder %s? Its work will be told it lost the lease.\nType yes to confirm: ", key, shown(info.Holder))
			// Read aside: an interrupt (leasectl catches SIGINT, ending
			// c.ctx) must abort the question, not wait for an answer.
			type reply struct {
				text string
				err  error
			}
			replies := make(chan reply, 1)
			go func() {
				text, err := bufio.NewReader(c.stdin).ReadString('\n')
				replies <- reply{text, err}
			}()
			var answer string
			select {
			case <-c.ctx.Done():
				fmt.Fprintln(c.stderr)
				return errors.New("interrupted: nothing released")
			case r := <-replies:
				answer, err = r.text, r.err
			}
			if strings.TrimSpace(answer) != "yes" {
				if err != nil && !errors.Is(err, io.EOF) {
					return err
				}
				return errors.New("not confirmed: nothing released")
			}
		}
		ctx, cancel = c.call()
		res, err := lc.ForceRelease(ctx, key, info.Holder)
		cancel()
		if err != nil {
			if errors.Is(err, lease.ErrUnknown) {
				return fmt.Errorf("%w\nthe release may or may not have happened: %s", err, showHint(key))
			}
			return err
		}
		ctx, cancel = c.call()
		now, nowErr := lc.Inspect(ctx, key)
		cancel()
		after := ""
		switch {
		case nowErr != nil:
			after = fmt.Sprintf(" (could not read it again: %v)", nowErr)
		case now.Free():
			after = "; the key is free"
		default:
			after = fmt.Sprintf("; now held by %s (token %d)", shown(now.Holder), now.Token)
		}
		switch res {
		case lease.ForceReleased:
			fmt.Fprintf(c.stdout, "\nreleased %q from holder %s (token %d)%s\n", key, shown(info.Holder), info.Token, after)
			fmt.Fprintf(c.stdout, "the holder learns it at its next renewal and stops with ErrLost (released from outside)\n")
			return nil
		case lease.ForceHoldEnded:
			fmt.Fprintf(c.stdout, "\nended the hold-min of holder %s on %q%s\n", shown(info.Holder), key, after)
			return nil
		case lease.ForceNotHeld:
			return fmt.Errorf("%q was released or expired since it was shown: nothing released%s", key, after)
		default:
			return fmt.Errorf("%q changed holder since it was shown: nothing released%s", key, after)
		}
	},
}

var watchCmd = &command{
	name: "watch", args: "[pattern]",
	summary: "print grants and releases of leases matching a pattern as they happen",
	detail: `Watch prints the leases held now, then a line for each grant, each
hold-min release and each end of a lease whose key matches pattern (default
'*'), until interrupted or -for has passed.

It listens on the keys' release channels (one PSUBSCRIBE: handovers to a
waiter, hold-min releases and forced releases are seen at once) and lists
the leases every -interval (grants, and releases that nobody was waiting
for: those publish nothing). A lease granted and released within one
interval may go unseen. Keyspace notifications are not used: they are off
by default, cost every write, and are per node on a Cluster.`,
	flags: func(c *cli, fs *flag.FlagSet) {
		fs.BoolVar(&c.json, "json", false, "one JSON object per change, one per line")
		fs.DurationVar(&c.interval, "interval", time.Second, "how often to list the leases")
		fs.DurationVar(&c.limit, "for", 0, "stop after this long (default: until interrupted)")
	},
	run: func(c *cli, fs *flag.FlagSet) error {
		if fs.NArg() > 1 {
			return usagef("watch takes at most one pattern, got %d arguments", fs.NArg())
		}
		every, limit := c.interval, c.limit
		if every <= 0 {
			return usagef("-interval %v: need a positive duration", every)
		}
		if limit < 0 {
			return usagef("-for %v: need a positive duration (or none: until interrupted)", limit)
		}
		lc, closeFn, err := c.connect()
		if err != nil {
			return err
		}
		defer closeFn()
		ctx := c.ctx
		if limit > 0 {
			var cancel func()
			ctx, cancel = context.WithTimeout(ctx, limit)
			defer cancel()
		}
		pattern := fs.Arg(0)
		if pattern == "" {
			pattern = "*"
		}
		fmt.Fprintf(c.stderr, "watching leases matching %q (prefix %q): release channels, and a listing every %v\n", pattern, c.prefix, every)
		var werr error
		err = lc.Watch(ctx, pattern, every, func(ch lease.Change) {
			if werr != nil {
				return
			}
			if c.json {
				werr = writeJSON(c.stdout, changeJSON{At: ch.At.Format(time.RFC3339Nano), Change: ch.Kind.String(), How: ch.How, Lease: infoJSON(ch.Info)})
				return
			}
			_, werr = fmt.Fprintln(c.stdout, changeLine(ch))
		})
		if err == nil {
			err = werr
		}
		return err
	},
}

// changeLine is one line of watch's output.
func changeLine(ch lease.Change) string {
	i := ch.Info
	s := fmt.Sprintf("%s  %-8s %s  holder=%s token=%d", ch.At.Format("15:04:05.000"), ch.Kind, shown(i.Key), shown(i.Holder), i.Token)
	switch ch.Kind {
	case lease.ChangeHeld, lease.ChangeGranted:
		s += " ttl=" + ttl(i.TTL)
		if i.Hold {
			s += " hold"
		}
	case lease.ChangeHoldStarted:
		s += " ends in " + ttl(i.TTL)
	case lease.ChangeEnded:
		how := ch.How
		if how == "" {
			how = "released or expired, unseen"
		}
		s += " (" + how + ")"
	}
	return s
}

// printInfo prints a lease for show and release.
func printInfo(w io.Writer, info lease.Info) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	defer tw.Flush()
	fmt.Fprintf(tw, "key\t%s\n", shown(info.Key))
	if info.Free() {
		fmt.Fprintf(tw, "holder\t- (free)\n")
	} else {
		fmt.Fprintf(tw, "holder\t%s\n", shown(info.Holder))
		owner := "- (none stored)"
		if info.Owner != "" {
			owner = shown(info.Owner)
		}
		fmt.Fprintf(tw, "owner\t%s\n", owner)
		tok := fmt.Sprint(info.Token)
		if info.Token == 0 {
			tok = "0 (no fencing)"
		}
		fmt.Fprintf(tw, "token\t%s\n", tok)
		fmt.Fprintf(tw, "ttl left\t%s\n", ttl(info.TTL))
		hold := "no (renewed by its holder while it works)"
		if info.Hold {
			hold = "yes: its holder has returned; the lease ends when the TTL runs out"
		}
		fmt.Fprintf(tw, "hold-min\t%s\n", hold)
	}
	if info.LastToken != 0 {
		fmt.Fprintf(tw, "last token\t%d\n", info.LastToken)
	}
	fmt.Fprintf(tw, "waiters\t%d", len(info.Waiters))
	if info.Queued != len(info.Waiters) {
		fmt.Fprintf(tw, " live (%d in the queue)", info.Queued)
	}
	fmt.Fprintln(tw)
	for n, wt := range info.Waiters {
		fence := ""
		if wt.Fence {
			fence = ", fenced"
		}
		fmt.Fprintf(tw, "  %d.\t%s  waiting %s, entry lapses in %s, asks ttl %s%s\n", n+1, shown(wt.Identity), ttl(wt.Waited), ttl(wt.Expires), wt.TTL, fence)
	}
}

// shown is a key (or a holder or owner read from Redis) as the text
// output shows it: quoted when it holds a character that is not printable
// (a newline or a tab would break the one line per lease, and could
// forge another lease's line), is not UTF-8, begins or ends with a space
// ("orders:42 " would read as orders:42) or holds two in a row (the
// columns of list are two spaces apart: such a key could forge a holder
// and a token), or begins with a quote (so that no key looks like
// another's quoted form).
func shown(s string) string {
	if strings.HasPrefix(s, `"`) || strings.TrimSpace(s) != s || strings.Contains(s, "  ") || !utf8.ValidString(s) || strings.IndexFunc(s, func(r rune) bool { return !unicode.IsPrint(r) }) >= 0 {
		return strconv.Quote(s)
	}
	return s
}

// ttl formats a duration to the millisecond; negative: no expiry.
func ttl(d time.Duration) string {
	if d < 0 {
		return "none (no expiry: written from outside the runtime)"
	}
	return d.Round(time.Millisecond).String()
}

// leaseJSON is a lease in -json output. Durations are in milliseconds.
type leaseJSON struct {
	Key string `json:"key"`
	// KeyBase64 is the key's bytes (standard base64) when the key is not
	// UTF-8: a JSON string cannot carry them, and "key" then shows each
	// invalid byte as U+FFFD, so that two such keys may read alike there.
	// HolderBase64, OwnerBase64 and a waiter's IdentityBase64 are the same
	// for those strings (a leader's owner is the caller's).
	KeyBase64    string       `json:"key_base64,omitempty"`
	Holder       string       `json:"holder,omitempty"`
	HolderBase64 string       `json:"holder_base64,omitempty"`
	Owner        string       `json:"owner,omitempty"` // none stored by plain leases yet
	OwnerBase64  string       `json:"owner_base64,omitempty"`
	Token        uint64       `json:"token"`
	TTLms        int64        `json:"ttl_ms"`
	Hold         bool         `json:"hold"`
	LastToken    uint64       `json:"last_token,omitempty"`
	Queued       int          `json:"queued"`
	Waiters      []waiterJSON `json:"waiters"`
}

type waiterJSON struct {
	Identity       string `json:"identity"`
	IdentityBase64 string `json:"identity_base64,omitempty"`
	WaitedMs       int64  `json:"waited_ms"`
	ExpiresMs      int64  `json:"expires_ms"`
	TTLms          int64  `json:"ttl_ms"`
	Fence          bool   `json:"fence"`
}

type changeJSON struct {
	At     string    `json:"at"`
	Change string    `json:"change"`
	How    string    `json:"how,omitempty"`
	Lease  leaseJSON `json:"lease"`
}

func infoJSON(i lease.Info) leaseJSON {
	j := leaseJSON{Key: i.Key, Holder: i.Holder, Owner: i.Owner, Token: uint64(i.Token), TTLms: i.TTL.Milliseconds(),
		Hold: i.Hold, LastToken: uint64(i.LastToken), Queued: i.Queued, Waiters: []waiterJSON{}}
	j.KeyBase64, j.HolderBase64, j.OwnerBase64 = bytesIfNotUTF8(i.Key), bytesIfNotUTF8(i.Holder), bytesIfNotUTF8(i.Owner)
	if i.TTL < 0 {
		j.TTLms = -1
	}
	for _, w := range i.Waiters {
		j.Waiters = append(j.Waiters, waiterJSON{Identity: w.Identity, IdentityBase64: bytesIfNotUTF8(w.Identity), WaitedMs: w.Waited.Milliseconds(),
			ExpiresMs: w.Expires.Milliseconds(), TTLms: w.TTL.Milliseconds(), Fence: w.Fence})
	}
	return j
}

// bytesIfNotUTF8 is s in standard base64 when s is not UTF-8 ("" when it
// is): a JSON string cannot carry its bytes.
func bytesIfNotUTF8(s string) string {
	if utf8.ValidString(s) {
		return ""
	}
	return base64.StdEncoding.EncodeToString([]byte(s))
}

// showHint says how to look at key again: a command to paste into a
// shell, its key in single quotes unless it needs none; a key a shell
// line cannot show (not printable, not UTF-8) as Go quotes it.
func showHint(key string) string {
	if shown(key) != key {
		return fmt.Sprintf("run leasectl show with the key %q", key)
	}
	if strings.IndexFunc(key, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("_-.:/,=@%+", r))
	}) < 0 && !strings.HasPrefix(key, "-") {
		return "run leasectl show " + key
	}
	return "run leasectl show -- '" + strings.ReplaceAll(key, "'", `'\''`) + "'"
}

func writeJSON(w io.Writer, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "%s\n", b)
	return err
}

// identityLike reports whether s looks like a grant's identity, as
// ForceRelease requires: 32 hex digits, and for a leader's term "/" and
// its owner (no ":" or "/" in it), as Info.Holder shows it.
func identityLike(s string) bool {
	if hex, owner, ok := strings.Cut(s, "/"); ok {
		if owner == "" || strings.ContainsAny(owner, ":/") {
			return false
		}
		s = hex
	}
	if len(s) != 32 {
		return false
	}
	return strings.Trim(s, "0123456789abcdef") == ""
}

var checkCmd = &command{
	name: "check", args: "",
	summary: "try every path a service's calls take, with the URL's user, and report what Redis refuses",
	detail: `Check runs lease.Client.Check: on keys of its own under -prefix, a grant
and its release, a fenced grant, a call that waits and the release that
hands it the key, a renewal, a hold-min, a kept lease given up to a caller
that asks, and the commands the runtime sends only now and then (EVAL,
EXISTS, PUBLISH, PUBSUB NUMSUB, UNSUBSCRIBE; ASKING on a Cluster). Give it
the URL with the services' own ACL user: a permission missing from its
rules shows here at once, where a service would meet it only under
contention (a release refused with a waiter queued). Each step prints
"ok" or what failed, naming the command Redis refused. It takes a few
seconds and leaves no key behind but its releases' tombstones, which
expire within seconds as any release's do (a user without +del leaves the
check keys' fencing counters for their TTL). Exit status 1 when a step
failed.`,
	run: func(c *cli, fs *flag.FlagSet) error {
		if fs.NArg() != 0 {
			return usagef("check takes no arguments, got %d", fs.NArg())
		}
		c.servicesUser = true
		lc, closeFn, err := c.connect()
		if err != nil {
			return err
		}
		defer closeFn()
		steps, err := lc.Check(c.ctx)
		failed := false
		for _, s := range steps {
			if s.Err == nil {
				fmt.Fprintf(c.stdout, "ok      %-7s %s\n", ttl(s.Took), s.Name)
				continue
			}
			failed = true
			fmt.Fprintf(c.stdout, "FAILED  %-7s %s\n", ttl(s.Took), s.Name)
			for _, line := range strings.Split(s.Err.Error(), "\n") {
				fmt.Fprintf(c.stdout, "        %s\n", line)
			}
		}
		switch {
		case err != nil && failed:
			return errors.New("check: a step failed (above)")
		case err != nil:
			return err // no step ran (Ctrl-C, the Client closed)
		}
		return nil
	},
}
