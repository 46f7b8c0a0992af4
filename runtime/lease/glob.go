package lease

import "strings"

// Patterns of List and Watch are Redis globs over the user's keys, but
// SCAN and PSUBSCRIBE match the runtime's names, in which '%', '{' and '}'
// of a user's key are three bytes each (see redisKeys). A glob cannot say
// "one byte, or three of these", so the server is given a wider pattern
// (scanGlob) and each name it returns is matched again, as the user's key,
// by globMatch.

// scanGlob turns a glob over user keys into one over their escaped form
// that matches at least every key the first matches: literal bytes are
// escaped as redisKeys escapes them (and stay literal), while '?' and a
// [...] class, which match one byte of the user's key (three in the
// escaped form when it is '%', '{' or '}'), become '*'.
//
// Redis gives up on a pattern whose '*'s nest deeper than maxGlobNesting
// (it matches nothing then): a wider form with more '*'s than
// maxScanStars is sent as "*" instead, and the keys are matched here
// alone (TestAdversary45_ListManyWildcardsMissesKey).
func scanGlob(pattern string) string {
	var b strings.Builder
	stars := 0
	star := func() {
		stars++
		b.WriteByte('*')
	}
	lit := func(c byte) {
		switch c {
		case '%':
			b.WriteString("%25")
		case '{':
			b.WriteString("%7B")
		case '}':
			b.WriteString("%7D")
		case '*', '?', '[', ']', '\\':
			b.WriteByte('\\')
			b.WriteByte(c)
		default:
			b.WriteByte(c)
		}
	}
	for i := 0; i < len(pattern); i++ {
		switch c := pattern[i]; c {
		case '*', '?':
			star()
		case '[':
			i = classEnd(pattern, i)
			star()
		case '\\':
			if i+1 < len(pattern) {
				i++
				c = pattern[i]
			}
			lit(c)
		default:
			lit(c)
		}
	}
	if stars > maxScanStars {
		return "*"
	}
	return b.String()
}

// maxScanStars is the most '*'s scanGlob sends; maxGlobNesting is how
// deep Redis lets '*'s nest before it gives up on a match (as it does:
// globMatch follows it).
const (
	maxScanStars   = 100
	maxGlobNesting = 1000
)

// classEnd returns the index of the last byte of the [...] class that
// starts at pattern[open], read as Redis reads it: '\' escapes the next
// byte, "a-z" is a range, and a class left open ends with the pattern.
func classEnd(pattern string, open int) int {
	j := open + 1
	if j < len(pattern) && pattern[j] == '^' {
		j++
	}
	for ; j < len(pattern); j++ {
		switch {
		case pattern[j] == '\\' && j+1 < len(pattern):
			j++
		case pattern[j] == ']':
			return j
		case j+2 < len(pattern) && pattern[j+1] == '-':
			j += 2
		}
	}
	return len(pattern) - 1
}

// globMatch reports whether s matches the Redis glob pattern (as SCAN
// MATCH and KEYS read it, byte by byte: '*' any run of bytes, '?' one
// byte, [...] one byte of a class, with '^' to negate and "a-z" ranges,
// '\' to take the next byte literally; no match once '*'s nest deeper
// than maxGlobNesting).
func globMatch(pattern, s string) bool {
	skip := false
	return globFrom(pattern, s, &skip, 0)
}

// globFrom matches s against pattern. *skip is set once a '*' has tried
// every rest of s without a match: a '*' further left would only try
// shorter rests of the same pattern, so it stops too (as Redis does, which
// keeps a pattern of many stars from taking exponential time).
func globFrom(pattern, s string, skip *bool, nesting int) bool {
	if nesting > maxGlobNesting {
		return false
	}
	for len(pattern) > 0 {
		switch pattern[0] {
		case '*':
			for len(pattern) > 1 && pattern[1] == '*' {
				pattern = pattern[1:]
			}
			if len(pattern) == 1 {
				return true
			}
			for ; len(s) > 0; s = s[1:] {
				if globFrom(pattern[1:], s, skip, nesting+1) {
					return true
				}
				if *skip {
					return false
				}
			}
			*skip = true
			return false
		case '?':
			if len(s) == 0 {
				return false
			}
		case '[':
			if len(s) == 0 {
				return false
			}
			end := classEnd(pattern, 0)
			if !inClass(pattern[1:end+1], s[0]) {
				return false
			}
			pattern = pattern[end:]
		case '\\':
			if len(pattern) >= 2 {
				pattern = pattern[1:]
			}
			fallthrough
		default:
			if len(s) == 0 || pattern[0] != s[0] {
				return false
			}
		}
		pattern, s = pattern[1:], s[1:]
	}
	return len(s) == 0
}

// inClass reports whether c is in the class body (what follows '[', up to
// and with its closing ']' if it has one).
func inClass(body string, c byte) bool {
	not := len(body) > 0 && body[0] == '^'
	if not {
		body = body[1:]
	}
	match := false
	for j := 0; j < len(body); j++ {
		switch {
		case body[j] == '\\' && j+1 < len(body):
			j++
			match = match || body[j] == c
		case body[j] == ']':
			j = len(body)
		case j+2 < len(body) && body[j+1] == '-':
			// Compared as Redis compares them, as C chars, which are
			// signed on x86-64 (and on arm64 are not: there, a range
			// between a byte below 0x80 and one above matches otherwise;
			// TestAdversary45_ListGlobRangeWithHighBytes).
			lo, hi, x := int8(body[j]), int8(body[j+2]), int8(c)
			if lo > hi {
				lo, hi = hi, lo
			}
			match = match || lo <= x && x <= hi
			j += 2
		default:
			match = match || body[j] == c
		}
	}
	return match != not
}
