package directive

import (
	"go/token"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/leasegen/leasegen/runtime/lease"
)

// Part is one piece of a key template: literal text, or a {path} naming a
// parameter and optional fields or zero-argument methods.
type Part struct {
	Lit  string    // literal text (Path is nil)
	Path []Segment // {orderID}, {req.Order.ID}, {req.Key()}
	Pos  token.Pos // position of the literal or of the '{'
	Src  string    // the part as written, braces included
}

// Segment is one step of a path.
type Segment struct {
	Name string
	Call bool // written Name()
}

// ParseKeyOf is ParseKey for d's key, with positions in the source even
// when the key is quoted (escapes included).
func ParseKeyOf(d *Directive) ([]Part, []Error) {
	parts, errs := ParseKey(d.Key, d.KeyPos)
	if d.keyOffsets == nil {
		return parts, errs
	}
	at := func(p token.Pos) token.Pos {
		if i := int(p - d.KeyPos); i >= 0 && i < len(d.keyOffsets) {
			return d.KeyPos + token.Pos(d.keyOffsets[i])
		}
		return p
	}
	for i := range parts {
		parts[i].Pos = at(parts[i].Pos)
	}
	for i := range errs {
		errs[i].Pos = at(errs[i].Pos)
	}
	return parts, errs
}

// quotedOffsets returns, for raw starting with a quoted Go string, the
// offset in raw of each byte the string stands for; nil when raw does not
// start with a quote or the string does not parse.
func quotedOffsets(raw string) []int {
	if raw == "" {
		return nil
	}
	var offs []int
	switch raw[0] {
	case '`':
		for i := 1; i < len(raw) && raw[i] != '`'; i++ {
			offs = append(offs, i)
		}
		return offs
	case '"':
	default:
		return nil
	}
	s, at := raw[1:], 1
	for s != "" && s[0] != '"' {
		v, multibyte, tail, err := strconv.UnquoteChar(s, '"')
		if err != nil {
			return nil
		}
		n := 1
		if multibyte {
			n = utf8.RuneLen(v)
		}
		for range n {
			offs = append(offs, at)
		}
		at += len(s) - len(tail)
		s = tail
	}
	return offs
}

// ParseKey splits a key template. pos is the template's position. Adjacent
// {parts} need a separator between them (one of lease.KeySeparators) so that
// distinct values always give distinct keys.
func ParseKey(key string, pos token.Pos) ([]Part, []Error) {
	var parts []Part
	var errs []Error
	i := 0
	for i < len(key) {
		open := strings.IndexAny(key[i:], "{}")
		if open < 0 {
			parts = append(parts, Part{Lit: key[i:], Pos: pos + token.Pos(i), Src: key[i:]})
			break
		}
		if open > 0 {
			parts = append(parts, Part{Lit: key[i : i+open], Pos: pos + token.Pos(i), Src: key[i : i+open]})
		}
		start := i + open
		if key[start] == '}' {
			errs = append(errs, errorf(pos+token.Pos(start), "key %q: '}' without '{'", key))
			return nil, errs
		}
		end := strings.IndexAny(key[start+1:], "{}")
		if end < 0 || key[start+1+end] == '{' {
			errs = append(errs, errorf(pos+token.Pos(start), "key %q: '{' without '}'", key))
			return nil, errs
		}
		end += start + 1
		src := key[start : end+1]
		path, ok := parsePath(key[start+1 : end])
		if !ok {
			errs = append(errs, errorf(pos+token.Pos(start), "key part %s: want {param}, {param.Field} or {param.Method()}", src))
		} else {
			parts = append(parts, Part{Path: path, Pos: pos + token.Pos(start), Src: src})
		}
		i = end + 1
	}
	// Between two paths there must be literal text holding a separator
	// (literals never follow literals, so parts alternate).
	for j := 1; j < len(parts); j++ {
		cur, prev := parts[j], parts[j-1]
		switch {
		case cur.Path == nil:
		case prev.Path != nil:
			errs = append(errs, errorf(cur.Pos, "key parts %s and %s need a separator between them (one of %q) so that distinct values give distinct keys", prev.Src, cur.Src, lease.KeySeparators))
		case j >= 2 && !strings.ContainsAny(prev.Lit, lease.KeySeparators):
			errs = append(errs, errorf(cur.Pos, "key parts %s and %s need a separator between them (one of %q), not just %q, so that distinct values give distinct keys", parts[j-2].Src, cur.Src, lease.KeySeparators, prev.Lit))
		}
	}
	if len(errs) == 0 && !hasPath(parts) && len(key) == 0 {
		errs = append(errs, errorf(pos, "empty key"))
	}
	return parts, errs
}

func hasPath(ps []Part) bool {
	for _, p := range ps {
		if p.Path != nil {
			return true
		}
	}
	return false
}

func parsePath(s string) ([]Segment, bool) {
	if s == "" {
		return nil, false
	}
	var path []Segment
	for _, seg := range strings.Split(s, ".") {
		call := false
		if name, ok := strings.CutSuffix(seg, "()"); ok {
			seg, call = name, true
		}
		if !token.IsIdentifier(seg) {
			return nil, false
		}
		path = append(path, Segment{Name: seg, Call: call})
	}
	if path[0].Call {
		return nil, false // {f()} would call a parameter
	}
	return path, true
}
