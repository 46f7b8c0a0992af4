// Package directive is the one parser of //lease: directives, shared by the
// leasegen generator and the leasecheck analyzer.
//
//	//lease:lock KEY [option ...]
//	//lease:leader KEY [option ...]
//	//lease:defaults [option ...]
//	//lease:ignore CHECK REASON...
//
// It reads raw comments (never CommentGroup.Text, which drops directives)
// and gives every argument its position.
package directive

import (
	"fmt"
	"go/ast"
	"go/token"
	"slices"
	"sort"
	"strings"
	"time"
)

// Directive names after "lease:".
const (
	Lock = "lock"
	// Leader campaigns for the lease on KEY and runs the function for
	// every term won (lease.Client.Lead).
	Leader   = "leader"
	Defaults = "defaults"
	// Ignore suppresses one leasecheck finding on its own line or the
	// next, with a reason: //lease:ignore escape the worker stops in Close.
	Ignore = "ignore"
)

// names are the directive names, in the order messages list them.
var names = []string{Lock, Leader, Defaults, Ignore}

// IgnorableChecks are the leasecheck checks //lease:ignore can suppress.
// (Directive problems and stale output are fixed, not suppressed.)
var IgnorableChecks = []string{"bypass", "escape", "fence", "order"}

// Options lists the valid options, in the order the documentation gives.
var Options = []string{"ttl", "deadline", "wait", "busy", "fence", "min-validity", "hold-min", "keep", "allow-empty", "identity", "name", "client"}

// leaderNot says, for each option a //lease:leader does not take, why.
var leaderNot = map[string]string{
	"deadline": "a leader runs until its context ends (cancel it to step down: the lease is handed over at once)",
	"wait":     "a candidate waits for the lease as long as it takes",
	"busy":     "a candidate never gives up: it waits its turn",
	"hold-min": "a term holds its lease until it ends",
	"keep":     "a term holds its lease until it ends",
	"fence":    "every term has a fencing token, its term number (lease.TokenFrom)",
}

// Duration is a duration option; Pos is zero when it was not given.
type Duration struct {
	V   time.Duration
	Pos token.Pos
}

// Set reports whether the option was given.
func (d Duration) Set() bool { return d.Pos.IsValid() }

// Word is a word-valued option (busy, identity, name, client) or a flag (fence,
// allow-empty; V empty); Pos is zero when it was not given.
type Word struct {
	V   string
	Pos token.Pos
}

// Set reports whether the option was given.
func (w Word) Set() bool { return w.Pos.IsValid() }

// Directive is one parsed //lease: comment.
type Directive struct {
	Name   string    // Lock, Leader, Defaults or Ignore
	Slash  token.Pos // position of the "//"
	Key    string    // Lock and Leader only
	KeyPos token.Pos

	// keyOffsets, for a quoted key, is where each byte of Key is in the
	// source, from KeyPos (the quote); nil for a key as written.
	keyOffsets []int

	// Ignore only: the check suppressed and why.
	Ignored, Reason string

	TTL, Deadline, Wait, MinValidity, HoldMin, Keep Duration
	Busy, Fence, WrapperName, Client                Word
	// Identity (leaders) names the receiver field, parameter or
	// package-level variable or constant of a string type that holds the
	// candidate's name (lease.LeadSpec.Owner).
	Identity Word
	// AllowEmpty lets a key part's value be empty; without it an empty
	// value is an error wrapping lease.ErrBadKey at run time (refunds:{id}
	// with id "" would otherwise be one lease shared by every empty id).
	AllowEmpty Word

	// Invalid is set when an option failed to parse; Check then adds no
	// errors of its own (they would only repeat the first).
	Invalid bool

	// defaults is the //lease:defaults directive Merge took options from
	// (nil: none), so that Check can tell them from the directive's own.
	defaults *Directive
}

// Error is a positioned problem with a directive.
type Error struct {
	Pos token.Pos
	Msg string
}

func (e Error) Error() string { return e.Msg }

func errorf(pos token.Pos, format string, args ...any) Error {
	return Error{Pos: pos, Msg: "lease: " + fmt.Sprintf(format, args...)}
}

// Find parses the lease directives in a comment group (nil-safe). Comments
// that are not lease directives are ignored, except near misses such as
// "// lease:lock" with a space or "//Lease:Lock", which are errors.
func Find(cg *ast.CommentGroup) ([]*Directive, []Error) {
	if cg == nil {
		return nil, nil
	}
	var ds []*Directive
	var errs []Error
	for _, c := range cg.List {
		d, es := Parse(c.Slash, c.Text)
		errs = append(errs, es...)
		if d != nil {
			ds = append(ds, d)
		}
	}
	return ds, errs
}

// Parse parses one comment ("//..." or "/*...*/" with the delimiters). It
// returns nil and no errors for comments that are not lease directives.
//
// A comment whose text, case-folded and with or without spaces after the
// delimiter, starts with a directive name ("// lease:lock", "//Lease:Lock",
// "/* lease:defaults */") is a directive the user meant but the tools would
// not read: an error saying how to write it, never silently prose. Other
// text after "lease:" is prose ("// lease: held while the job runs").
func Parse(pos token.Pos, text string) (*Directive, []Error) {
	if msg := nearMiss(text); msg != "" {
		return nil, []Error{errorf(pos, "%s", msg)}
	}
	if len(text) < 3 || !strings.HasPrefix(text, "//") {
		return nil, nil
	}
	dir, ok := ast.ParseDirective(pos, text)
	if !ok || dir.Tool != "lease" {
		return nil, nil
	}
	if !slices.Contains(names, dir.Name) {
		return nil, []Error{errorf(pos, "unknown directive //lease:%s%s (valid: //lease:lock, //lease:leader, //lease:defaults, //lease:ignore)", dir.Name, suggest(dir.Name, names))}
	}
	if dir.Name == Ignore {
		return parseIgnore(pos, dir)
	}
	args, err := dir.ParseArgs()
	if err != nil {
		return nil, []Error{errorf(dir.ArgsPos, "malformed //lease:%s arguments: %v", dir.Name, err)}
	}
	d := &Directive{Name: dir.Name, Slash: pos}
	var errs []Error
	if dir.Name == Lock || dir.Name == Leader {
		// A quoted first argument is the key whatever it reads as
		// ("region=eu", "fence").
		quoted := false
		if len(args) > 0 {
			if off := int(args[0].Pos - pos); off >= 0 && off < len(text) {
				quoted = text[off] == '"' || text[off] == '`'
			}
		}
		if len(args) == 0 || !quoted && looksLikeOption(args[0].Arg) {
			at := dir.End()
			hint := ""
			if len(args) > 0 {
				at = args[0].Pos
				hint = fmt.Sprintf(" (if %s is the key, quote it: %q)", args[0].Arg, args[0].Arg)
			}
			if dir.Name == Leader {
				return nil, []Error{errorf(at, "//lease:leader needs a key first, as in //lease:leader jobs:settle ttl=10s%s", hint)}
			}
			return nil, []Error{errorf(at, "//lease:lock needs a key first, as in //lease:lock orders:{orderID} deadline=1m%s", hint)}
		}
		d.Key, d.KeyPos = args[0].Arg, args[0].Pos
		if strings.Count(d.Key, "{") > strings.Count(d.Key, "}") && slices.ContainsFunc(args[1:], func(a ast.DirectiveArg) bool { return strings.Contains(a.Arg, "}") }) {
			// "k:{ id }": the key ends at the first space, and the rest
			// would read as the unknown options "id" and "}".
			return nil, []Error{errorf(args[0].Pos, "key %q: '{' without '}': the key ends at the first space, so a key part has no spaces in its braces (write {id}, not { id })", d.Key)}
		}
		if off := int(args[0].Pos - pos); off >= 0 && off < len(text) {
			d.keyOffsets = quotedOffsets(text[off:])
		}
		args = args[1:]
	}
	seen := map[string]bool{}
	for _, a := range args {
		if strings.HasPrefix(a.Arg, "//") {
			errs = append(errs, errorf(a.Pos, "a directive takes no trailing comment: put the note on a line of its own"))
			d.Invalid = true
			break
		}
		name, val, hasVal := strings.Cut(a.Arg, "=")
		if seen[name] {
			errs = append(errs, errorf(a.Pos, "duplicate option %s", name))
			continue
		}
		seen[name] = true
		if why, ok := leaderNot[name]; ok && d.Name == Leader {
			opt := name + "="
			if name == "fence" {
				opt = name
			}
			errs = append(errs, errorf(a.Pos, "option %s does not apply to //lease:leader: %s", opt, why))
			d.Invalid = true
			continue
		}
		if name == "identity" && d.Name == Lock {
			errs = append(errs, errorf(a.Pos, "option identity= applies to //lease:leader only: a lock stores no candidate identity"))
			d.Invalid = true
			continue
		}
		valPos := a.Pos + token.Pos(len(name)+1)
		if e, ok := d.set(name, val, hasVal, a.Pos, valPos); !ok {
			errs = append(errs, e)
			d.Invalid = true
		}
	}
	return d, errs
}

// looksLikeOption reports whether the first argument of //lease:lock or
// //lease:leader, which must be the key, reads as an option instead (the
// key forgotten): "fence", or a word before '=' ("deadline=1m", the typo
// "tll=5s") with no key part. A key template may hold '=' (a separator
// KeyPart escapes): "tenant={t}:jobs" and "kv:{k}={v}" are keys.
func looksLikeOption(arg string) bool {
	if arg == "fence" {
		return true
	}
	name, _, ok := strings.Cut(arg, "=")
	if !ok || strings.ContainsAny(arg, "{}") || name == "" {
		return false
	}
	for i, r := range name {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || i > 0 && (r == '-' || r == '_' || r >= '0' && r <= '9')) {
			return false
		}
	}
	return true
}

// nearMiss returns the error for a comment that spells a directive name
// the way the tools do not read it, or "".
func nearMiss(text string) string {
	var body string
	block := false
	switch {
	case strings.HasPrefix(text, "//"):
		body = text[2:]
	case strings.HasPrefix(text, "/*"):
		body, block = strings.TrimSuffix(text[2:], "*/"), true
	default:
		return ""
	}
	trimmed := strings.TrimLeft(body, " \t")
	const tool = "lease:"
	if len(trimmed) < len(tool) || !strings.EqualFold(trimmed[:len(tool)], tool) {
		return ""
	}
	name := trimmed[len(tool):]
	if i := strings.IndexAny(name, " \t"); i >= 0 {
		name = name[:i]
	}
	lower := strings.ToLower(name)
	if !slices.Contains(names, lower) {
		return "" // prose, or //lease:unknown (an unknown-directive error)
	}
	// As written: the delimiter, any spaces, lease: and the name.
	written := text[:2+len(body)-len(trimmed)+len(tool)+len(name)]
	var why []string
	if block {
		why = append(why, "directives are // line comments")
	}
	if trimmed != body && !block {
		why = append(why, "no space allowed after //")
	}
	if trimmed[:len(tool)] != tool || name != lower {
		why = append(why, "directives are lower case")
	}
	if len(why) == 0 {
		return "" // a well-formed directive
	}
	if len(why) == 1 && why[0] == "no space allowed after //" {
		// The message DESIGN §8 and earlier releases give.
		return fmt.Sprintf("malformed directive: no space allowed between // and lease:%s (write //lease:%s)", lower, lower)
	}
	return fmt.Sprintf("malformed directive %q: %s (write //lease:%s)", written, strings.Join(why, "; "), lower)
}

// parseIgnore parses //lease:ignore CHECK REASON...: the reason is required
// (a suppression nobody can judge later is a finding hidden, not answered).
func parseIgnore(pos token.Pos, dir ast.Directive) (*Directive, []Error) {
	check, reason, _ := strings.Cut(dir.Args, " ")
	reason = strings.TrimSpace(reason)
	valid := strings.Join(IgnorableChecks, ", ")
	switch {
	case check == "":
		return nil, []Error{errorf(pos, "//lease:ignore needs a check and a reason, as in //lease:ignore escape the worker is stopped by Close before the lease ends (checks: %s)", valid)}
	case !slices.Contains(IgnorableChecks, check):
		return nil, []Error{errorf(dir.ArgsPos, "//lease:ignore: unknown check %q%s (valid: %s)", check, suggest(check, IgnorableChecks), valid)}
	case reason == "":
		return nil, []Error{errorf(pos, "//lease:ignore %s needs a reason: say why the finding does not apply, as in //lease:ignore %s the worker is stopped before the lease ends", check, check)}
	}
	return &Directive{Name: Ignore, Slash: pos, Ignored: check, Reason: reason}, nil
}

func (d *Directive) set(name, val string, hasVal bool, pos, valPos token.Pos) (Error, bool) {
	dur := func(dst *Duration) (Error, bool) {
		if !hasVal || val == "" {
			return errorf(pos, "option %s needs a duration, as in %s=10s", name, name), false
		}
		v, err := time.ParseDuration(val)
		if err != nil {
			return errorf(valPos, "bad %s %q: want a Go duration such as 500ms, 10s or 1m", name, val), false
		}
		if v < 0 {
			return errorf(valPos, "bad %s %q: must not be negative", name, val), false
		}
		*dst = Duration{V: v, Pos: pos}
		return Error{}, true
	}
	word := func(dst *Word, valid func(string) bool, want string) (Error, bool) {
		if !hasVal || val == "" {
			return errorf(pos, "option %s needs a value: %s", name, want), false
		}
		if !valid(val) {
			return errorf(valPos, "bad %s %q: want %s", name, val, want), false
		}
		*dst = Word{V: val, Pos: pos}
		return Error{}, true
	}
	flag := func(dst *Word) (Error, bool) {
		if hasVal {
			return errorf(pos, "option %s takes no value (write %s, or leave it out)", name, name), false
		}
		*dst = Word{Pos: pos}
		return Error{}, true
	}
	switch name {
	case "ttl":
		return dur(&d.TTL)
	case "deadline":
		return dur(&d.Deadline)
	case "wait":
		return dur(&d.Wait)
	case "min-validity":
		if e, ok := dur(&d.MinValidity); !ok {
			return e, false
		}
		if d.MinValidity.V == 0 {
			// lease.Spec and lease.LeadSpec read a zero MinValidity as
			// their default, ttl/2: 0 would promise what the call does not do.
			d.MinValidity = Duration{}
			return errorf(valPos, "min-validity must be positive: the runtime reads 0 as its default, ttl/2 (for the least margin, write a small duration such as min-validity=1ms)"), false
		}
		return Error{}, true
	case "hold-min":
		return dur(&d.HoldMin)
	case "keep":
		return dur(&d.Keep)
	case "busy":
		return word(&d.Busy, func(s string) bool { return s == "error" || s == "skip" }, "error or skip")
	case "name":
		if d.Name == Defaults {
			return errorf(pos, "option name= is not allowed in //lease:defaults (each wrapper needs its own name)"), false
		}
		// Not "_": a blank wrapper could not be called (TestAdversary46_BlankWrapperName).
		return word(&d.WrapperName, func(s string) bool { return token.IsIdentifier(s) && s != "_" }, "a Go identifier other than _")
	case "client":
		return word(&d.Client, token.IsIdentifier, "a receiver field or package-level variable name")
	case "identity":
		return word(&d.Identity, token.IsIdentifier, "a receiver field, parameter or package-level variable or constant of a string type")
	case "fence":
		return flag(&d.Fence)
	case "allow-empty":
		return flag(&d.AllowEmpty)
	}
	valid := d.options()
	return errorf(pos, "unknown option %q%s (valid: %s)", name, suggest(name, valid), strings.Join(valid, ", ")), false
}

// options lists the options d's kind of directive takes, in Options'
// order: a lock takes all but identity, a leader none of leaderNot's, the
// defaults all but name.
func (d *Directive) options() []string {
	var out []string
	for _, o := range Options {
		_, notLeader := leaderNot[o]
		switch {
		case d.Name == Lock && o == "identity", d.Name == Leader && notLeader, d.Name == Defaults && o == "name":
			continue
		}
		out = append(out, o)
	}
	return out
}

// Merge returns d with every option it does not set taken from def (a
// //lease:defaults directive; nil for none): for a //lease:lock every
// option but identity, for a //lease:leader the options it takes (ttl,
// min-validity, identity, allow-empty, client).
func (d *Directive) Merge(def *Directive) *Directive {
	out := *d
	if def == nil {
		return &out
	}
	pick := func(dst *Duration, src Duration) {
		if !dst.Set() {
			*dst = src
		}
	}
	pickW := func(dst *Word, src Word) {
		if !dst.Set() {
			*dst = src
		}
	}
	pick(&out.TTL, def.TTL)
	pick(&out.MinValidity, def.MinValidity)
	pickW(&out.AllowEmpty, def.AllowEmpty)
	pickW(&out.Client, def.Client)
	if d.Name == Leader {
		pickW(&out.Identity, def.Identity)
	} else {
		pick(&out.Deadline, def.Deadline)
		pick(&out.Wait, def.Wait)
		pick(&out.HoldMin, def.HoldMin)
		pick(&out.Keep, def.Keep)
		pickW(&out.Busy, def.Busy)
		pickW(&out.Fence, def.Fence)
	}
	out.Invalid = d.Invalid || def.Invalid
	out.defaults = def
	return &out
}

// inherited reports whether x, one of the durations of a directive Merge
// made, is the //lease:defaults' (same position), not the directive's own.
func (d *Directive) inherited(x Duration) bool {
	def := d.defaults
	if def == nil || !x.Set() {
		return false
	}
	for _, y := range []Duration{def.TTL, def.Deadline, def.Wait, def.MinValidity, def.HoldMin, def.Keep} {
		if y.Pos == x.Pos {
			return true
		}
	}
	return false
}

// conflict is the error for two durations that do not fit together, as
// "<x's text> <rel> <y's text>": at the directive's own option of
// the two, x's first (an option inherited from //lease:defaults is named
// so in the text); when both are inherited, at x in the defaults, where
// the same text for every directive that inherits both is one error
// (the generator drops repeats). A duration with no position (ttl's
// default) is never where the error goes while the other has one.
func (d *Directive) conflict(xName string, x Duration, rel, yName string, y Duration) Error {
	text := func(name string, v Duration) string {
		s := fmt.Sprintf("%s %v", name, v.V)
		if d.inherited(v) {
			s += " (from //lease:defaults)"
		}
		return s
	}
	pos := x.Pos
	switch {
	case x.Set() && !d.inherited(x):
	case y.Set() && !d.inherited(y):
		pos = y.Pos
	case !x.Set():
		pos = y.Pos
	}
	if d.inherited(x) && d.inherited(y) {
		// The defaults conflict with themselves: said once, at them.
		return errorf(pos, "%s %v %s %s %v in //lease:defaults", xName, x.V, rel, yName, y.V)
	}
	return errorf(pos, "%s %s %s", text(xName, x), rel, text(yName, y))
}

// DefaultTTL is the lease length when neither the directive nor the
// package defaults set ttl.
const DefaultTTL = 30 * time.Second

// Check validates a merged //lease:lock or //lease:leader directive's
// durations against each other and fills the derived defaults (ttl 30s,
// min-validity ttl/2). Errors point at the offending option, or at the
// directive for a missing deadline (locks only: a leader has none).
func (d *Directive) Check() []Error {
	if d.Invalid {
		return nil
	}
	var errs []Error
	if !d.TTL.Set() {
		d.TTL.V = DefaultTTL
	}
	if d.TTL.V <= 0 {
		errs = append(errs, errorf(d.TTL.Pos, "ttl must be positive"))
	}
	if d.Name == Leader {
		if !d.MinValidity.Set() {
			d.MinValidity.V = d.TTL.V / 2
		} else if d.MinValidity.V >= d.TTL.V {
			errs = append(errs, d.conflict("min-validity", d.MinValidity, "must be less than", "ttl", d.TTL))
		}
		return errs
	}
	if !d.Deadline.Set() {
		errs = append(errs, errorf(d.Slash, "missing deadline: every protected call states its total budget (add deadline=DUR here, or to //lease:defaults in the package doc)"))
	} else if d.Deadline.V <= 0 {
		errs = append(errs, errorf(d.Deadline.Pos, "deadline must be positive"))
	} else if d.Wait.V > 0 && d.Wait.V >= d.Deadline.V {
		errs = append(errs, d.conflict("wait", d.Wait, "must be less than", "deadline", d.Deadline))
	}
	if !d.MinValidity.Set() {
		d.MinValidity.V = d.TTL.V / 2
	} else if d.MinValidity.V >= d.TTL.V {
		errs = append(errs, d.conflict("min-validity", d.MinValidity, "must be less than", "ttl", d.TTL))
	}
	if d.HoldMin.Set() && d.Deadline.Set() && d.HoldMin.V > d.Deadline.V {
		errs = append(errs, d.conflict("hold-min", d.HoldMin, "must not exceed", "deadline", d.Deadline))
	}
	return errs
}

// suggest returns ` (did you mean "x"?)` for the closest candidate within
// edit distance 2 (case-insensitive), or "".
func suggest(s string, candidates []string) string {
	best, bestD := "", 3
	for _, c := range candidates {
		if d := distance(strings.ToLower(s), strings.ToLower(c)); d < bestD {
			best, bestD = c, d
		}
	}
	if best == "" {
		return ""
	}
	return fmt.Sprintf(" (did you mean %s?)", best)
}

// Suggest is suggest for callers outside the package: the closest of
// candidates to s, or "".
func Suggest(s string, candidates []string) string {
	c := append([]string(nil), candidates...)
	sort.Strings(c)
	return suggest(s, c)
}

func distance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
