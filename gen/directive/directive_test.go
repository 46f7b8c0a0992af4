package directive

import (
	"go/token"
	"strings"
	"testing"
	"time"
)

func TestParse(t *testing.T) {
	d, errs := Parse(100, "//lease:lock orders:{orderID} ttl=10s deadline=1m wait=2s fence busy=skip min-validity=3s hold-min=1s name=Charge client=leases allow-empty")
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	if d.Name != Lock || d.Key != "orders:{orderID}" || d.KeyPos != 100+13 {
		t.Fatalf("key %q at %d", d.Key, d.KeyPos)
	}
	if d.TTL.V != 10*time.Second || d.Deadline.V != time.Minute || d.Wait.V != 2*time.Second || !d.Fence.Set() ||
		d.Busy.V != "skip" || d.MinValidity.V != 3*time.Second || d.HoldMin.V != time.Second || d.WrapperName.V != "Charge" || d.Client.V != "leases" || !d.AllowEmpty.Set() {
		t.Fatalf("parsed %+v", d)
	}
	if d.TTL.Pos != 100+30 {
		t.Fatalf("ttl at %d, want %d", d.TTL.Pos, 100+30)
	}
}

func TestParseIgnoresProse(t *testing.T) {
	for _, c := range []string{"// lease: held while the job runs", "//go:generate x", "// leases are fun", "//", "/* lease: see below */", "//lease", "// lease:lockout ends at noon", "// Lease: lock held", "/**/"} {
		if d, errs := Parse(1, c); d != nil || len(errs) > 0 {
			t.Errorf("%q: got %v %v, want nothing", c, d, errs)
		}
	}
}

func TestParseErrors(t *testing.T) {
	cases := map[string]string{
		"// lease:lock k deadline=1s":    "no space allowed",
		"//\tlease:defaults ttl=1s":      "no space allowed between // and lease:defaults (write //lease:defaults)",
		"//Lease:Lock k deadline=1s":     `malformed directive "//Lease:Lock": directives are lower case (write //lease:lock)`,
		"//lease:Defaults ttl=1s":        `malformed directive "//lease:Defaults": directives are lower case (write //lease:defaults)`,
		"// LEASE:LOCK k":                `"// LEASE:LOCK": no space allowed after //; directives are lower case (write //lease:lock)`,
		"/* lease:lock k deadline=1s */": `"/* lease:lock": directives are // line comments (write //lease:lock)`,
		"/*lease:lock k*/":               `"/*lease:lock": directives are // line comments (write //lease:lock)`,
		"//lease:ignore":                 "needs a check and a reason",
		"//lease:ignore escape":          "//lease:ignore escape needs a reason",
		"//lease:ignore escpae because":  `unknown check "escpae" (did you mean escape?)`,
		"//lease:ignor escape x":         "did you mean ignore?",
		"//lease:lok k":                  "did you mean lock?",
		"//lease:lock":                   "needs a key first",
		"//lease:lock deadline=1s":       "needs a key first",
		"//lease:lock k ttl":             "needs a duration",
		"//lease:lock k ttl=abc":         "bad ttl",
		"//lease:lock k ttl=-1s":         "must not be negative",
		"//lease:lock k busy=maybe":      "want error or skip",
		"//lease:lock k fence=yes":       "takes no value",
		"//lease:lock k allow-empty=1":   "takes no value",
		"//lease:lock k allow-emtpy":     "did you mean allow-empty?",
		"//lease:lock k name=1x":         "a Go identifier",
		"//lease:lock k ttl=1s ttl=2s":   "duplicate option ttl",
		"//lease:defaults name=X":        "not allowed in //lease:defaults",
		`//lease:lock k "unterminated`:   "malformed",
		"//lease:lock k deadlin=1s":      "did you mean deadline?",
		"//lease:lock k minvalidity=1s":  "did you mean min-validity?",
	}
	for c, want := range cases {
		_, errs := Parse(1, c)
		if len(errs) == 0 || !strings.Contains(errs[0].Msg, want) {
			t.Errorf("%q: errors %v, want one containing %q", c, errs, want)
		}
	}
}

func TestParseIgnore(t *testing.T) {
	d, errs := Parse(1, "//lease:ignore escape the worker is stopped by Close before the lease ends")
	if len(errs) > 0 || d == nil || d.Name != Ignore || d.Ignored != "escape" || d.Reason != "the worker is stopped by Close before the lease ends" {
		t.Fatalf("got %+v %v", d, errs)
	}
}

func TestCheck(t *testing.T) {
	parse := func(s string) *Directive {
		d, errs := Parse(1, s)
		if len(errs) > 0 {
			t.Fatal(errs)
		}
		return d
	}
	d := parse("//lease:lock k deadline=1m")
	if errs := d.Check(); len(errs) > 0 || d.TTL.V != DefaultTTL || d.MinValidity.V != DefaultTTL/2 {
		t.Fatalf("defaults: %v %v %v", errs, d.TTL.V, d.MinValidity.V)
	}
	def := parse("//lease:defaults deadline=2m ttl=4s fence allow-empty")
	m := parse("//lease:lock k ttl=8s").Merge(def)
	if errs := m.Check(); len(errs) > 0 || m.Deadline.V != 2*time.Minute || m.TTL.V != 8*time.Second || !m.Fence.Set() || m.MinValidity.V != 4*time.Second || !m.AllowEmpty.Set() {
		t.Fatalf("merged %+v %v", m, errs)
	}
	for s, want := range map[string]string{
		"//lease:lock k":                                    "missing deadline",
		"//lease:lock k deadline=1s wait=1s":                "wait 1s must be less than deadline",
		"//lease:lock k deadline=1s ttl=1s min-validity=1s": "min-validity",
		"//lease:lock k deadline=1s hold-min=2s":            "hold-min",
		"//lease:lock k deadline=1s ttl=0s":                 "ttl must be positive",
	} {
		errs := parse(s).Check()
		if len(errs) == 0 || !strings.Contains(errs[0].Msg, want) {
			t.Errorf("%q: %v, want %q", s, errs, want)
		}
	}
}

// keep= (kept leases) on a lock and in the defaults.
func TestKeep(t *testing.T) {
	d, errs := Parse(1, "//lease:lock k deadline=1s keep=10s")
	if len(errs) > 0 || d.Keep.V != 10*time.Second || !d.Keep.Set() {
		t.Fatalf("got %+v %v", d, errs)
	}
	def, _ := Parse(1, "//lease:defaults keep=2s deadline=1s")
	if m, _ := Parse(1, "//lease:lock k"); m.Merge(def).Keep.V != 2*time.Second {
		t.Fatal("keep not taken from the defaults")
	}
	for s, want := range map[string]string{
		"//lease:lock k deadline=1s keep":     "needs a duration",
		"//lease:lock k deadline=1s keep=-1s": "must not be negative",
		"//lease:lock k deadline=1s kep=1s":   "did you mean keep?",
	} {
		if _, errs := Parse(1, s); len(errs) == 0 || !strings.Contains(errs[0].Msg, want) {
			t.Errorf("%q: %v, want %q", s, errs, want)
		}
	}
}

// //lease:leader takes a key, ttl, min-validity, identity, allow-empty,
// name and client; a lock's budget and waiting options are errors saying
// why, and the package defaults give it only what applies.
func TestLeader(t *testing.T) {
	d, errs := Parse(100, "//lease:leader jobs:{shard} ttl=10s min-validity=4s identity=node name=Run client=leases allow-empty")
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	if d.Name != Leader || d.Key != "jobs:{shard}" || d.KeyPos != 100+15 || d.TTL.V != 10*time.Second || d.MinValidity.V != 4*time.Second ||
		d.Identity.V != "node" || d.WrapperName.V != "Run" || d.Client.V != "leases" || !d.AllowEmpty.Set() {
		t.Fatalf("parsed %+v", d)
	}
	if errs := d.Check(); len(errs) > 0 {
		t.Fatal(errs)
	}
	def, _ := Parse(1, "//lease:defaults deadline=5s wait=1s fence keep=1s hold-min=1s busy=skip ttl=6s identity=host")
	m, _ := Parse(1, "//lease:leader k")
	m = m.Merge(def)
	if errs := m.Check(); len(errs) > 0 || m.TTL.V != 6*time.Second || m.MinValidity.V != 3*time.Second || m.Identity.V != "host" ||
		m.Deadline.Set() || m.Wait.Set() || m.Fence.Set() || m.Keep.Set() || m.HoldMin.Set() || m.Busy.Set() {
		t.Fatalf("merged %+v %v", m, errs)
	}
	for s, want := range map[string]string{
		"//lease:leader":                        "//lease:leader needs a key first",
		"//lease:leader ttl=1s":                 "//lease:leader needs a key first",
		"//lease:leader k deadline=1m":          "option deadline= does not apply to //lease:leader: a leader runs until its context ends",
		"//lease:leader k wait=1s":              "option wait= does not apply to //lease:leader: a candidate waits",
		"//lease:leader k busy=skip":            "option busy= does not apply",
		"//lease:leader k hold-min=1s":          "option hold-min= does not apply",
		"//lease:leader k keep=1s":              "option keep= does not apply",
		"//lease:leader k fence":                "option fence does not apply to //lease:leader: every term has a fencing token",
		"//lease:leader k identity=1x":          "want a receiver field, parameter or package-level variable or constant",
		"//lease:lock k deadline=1s identity=x": "identity= applies to //lease:leader only",
		"//lease:leadr k":                       "did you mean leader?",
		"// lease:leader k":                     "no space allowed between // and lease:leader",
	} {
		if _, errs := Parse(1, s); len(errs) == 0 || !strings.Contains(errs[0].Msg, want) {
			t.Errorf("%q: %v, want %q", s, errs, want)
		}
	}
	if errs := func() []Error { d, _ := Parse(1, "//lease:leader k ttl=1s min-validity=1s"); return d.Check() }(); len(errs) == 0 || !strings.Contains(errs[0].Msg, "min-validity 1s must be less than ttl 1s") {
		t.Errorf("min-validity = ttl: %v", errs)
	}
}

func TestParseKey(t *testing.T) {
	parts, errs := ParseKey("orders:{req.Order.ID}/{req.Key()}", 10)
	if len(errs) > 0 || len(parts) != 4 {
		t.Fatalf("%v %v", parts, errs)
	}
	if p := parts[1]; p.Pos != 17 || len(p.Path) != 3 || p.Path[2].Name != "ID" || p.Path[2].Call {
		t.Fatalf("part 1 = %+v", p)
	}
	if p := parts[3]; !p.Path[1].Call || p.Path[1].Name != "Key" {
		t.Fatalf("part 3 = %+v", p)
	}
	for key, want := range map[string]string{
		"a:{x":     "without '}'",
		"a:}x":     "without '{'",
		"a:{}":     "want {param}",
		"a:{f()}":  "want {param}",
		"a:{x.1}":  "want {param}",
		"{a}{b}":   "need a separator",
		"{a}-{b}":  "need a separator",
		"a:{x{y}}": "without '}'",
		"":         "empty key",
	} {
		_, errs := ParseKey(key, 1)
		if len(errs) == 0 || !strings.Contains(errs[0].Msg, want) {
			t.Errorf("%q: %v, want %q", key, errs, want)
		}
	}
}

func FuzzParse(f *testing.F) {
	for _, s := range []string{
		"//lease:lock orders:{orderID} ttl=10s deadline=1m wait=2s fence",
		"//lease:defaults deadline=5s",
		"// lease:lock k",
		`//lease:lock "a b" name=X`,
		`//lease:lock "b\x3a{id}\u00e9:{n}" deadline=5s`,
		"//lease:lock {a}:{b.c()}",
		"//lease:leader jobs:{shard} ttl=2s identity=node",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		d, errs := Parse(token.Pos(1), s)
		for _, e := range errs {
			if !e.Pos.IsValid() || !strings.HasPrefix(e.Msg, "lease: ") {
				t.Fatalf("%q: error %+v lacks a position or prefix", s, e)
			}
		}
		if d != nil {
			d.Check()
			if d.Name == Lock || d.Name == Leader {
				parts, kerrs := ParseKeyOf(d)
				for _, p := range parts {
					if p.Pos < 1 || int(p.Pos) > len(s) {
						t.Fatalf("%q: key part %q at %d, outside the comment", s, p.Src, p.Pos)
					}
				}
				for _, e := range kerrs {
					if e.Pos < 1 || int(e.Pos) > len(s) {
						t.Fatalf("%q: key error %q at %d, outside the comment", s, e.Msg, e.Pos)
					}
				}
			}
		}
	})
}

// An unknown option's message lists the options of that kind of directive.
func TestUnknownOptionListsTheDirectivesOptions(t *testing.T) {
	for s, want := range map[string]string{
		"//lease:lock k tll=1s":      "(valid: ttl, deadline, wait, busy, fence, min-validity, hold-min, keep, allow-empty, name, client)",
		"//lease:leader k tll=1s":    "(valid: ttl, min-validity, allow-empty, identity, name, client)",
		"//lease:defaults tll=1s":    "(valid: ttl, deadline, wait, busy, fence, min-validity, hold-min, keep, allow-empty, identity, client)",
		"//lease:leader k identiy=x": `unknown option "identiy" (did you mean identity?)`,
	} {
		if _, errs := Parse(1, s); len(errs) == 0 || !strings.Contains(errs[0].Msg, want) {
			t.Errorf("%q: %v, want %q", s, errs, want)
		}
	}
}

// A quoted key's parts are positioned where they are in the source,
// escapes included (the quote's position plus the offset in the unquoted
// key put them one or more columns early).
func TestQuotedKeyPositions(t *testing.T) {
	for _, tc := range []struct{ text, part string }{
		{`//lease:lock "a:{idd}" deadline=5s`, "{idd}"},
		{`//lease:lock "b\x3a{idd}" deadline=5s`, "{idd}"},
		{`//lease:lock "\u00e9:{idd}" deadline=5s`, "{idd}"},
		{"//lease:lock `c:{idd}` deadline=5s", "{idd}"},
		{`//lease:lock d:{idd} deadline=5s`, "{idd}"},
	} {
		d, errs := Parse(100, tc.text)
		if len(errs) > 0 || d == nil {
			t.Fatalf("%s: %v", tc.text, errs)
		}
		parts, errs := ParseKeyOf(d)
		if len(errs) > 0 {
			t.Fatalf("%s: %v", tc.text, errs)
		}
		want := token.Pos(100 + strings.Index(tc.text, tc.part))
		var got token.Pos
		for _, p := range parts {
			if p.Src == tc.part {
				got = p.Pos
			}
		}
		if got != want {
			t.Errorf("%s: %s at offset %d, want %d", tc.text, tc.part, got-100, want-100)
		}
	}
}

// Adversary round 22: a note after the options ("// why") is one error
// saying directives take no trailing comment; each of its words was an
// unknown option ("note": did you mean name?).
func TestTrailingCommentIsOneError(t *testing.T) {
	for _, text := range []string{"//lease:lock k deadline=1s // the note", "//lease:defaults ttl=1s //note", "//lease:leader k // why"} {
		_, errs := Parse(100, text)
		if len(errs) != 1 || !strings.Contains(errs[0].Msg, "a directive takes no trailing comment") || int(errs[0].Pos-100) != strings.Index(text[2:], "//")+2 {
			t.Errorf("%q: %v; want one error at the second //", text, errs)
		}
	}
}
