package lease

import "strings"

// KeySeparators are the bytes KeyPart escapes (besides '%', control bytes
// and DEL). A key template stays injective as long as the literal text
// between two parts contains at least one of them; leasegen checks that at
// generate time.
const KeySeparators = ":/|,;=@# {}"

// KeyPart escapes one value for use between the literal parts of a key
// template: '%', the KeySeparators, control bytes and DEL become %XX. With
// separators between parts, distinct values give distinct keys:
// "a:"+KeyPart("1:2")+":"+KeyPart("3") differs from
// "a:"+KeyPart("1")+":"+KeyPart("2:3").
func KeyPart(s string) string {
	n := 0
	for i := 0; i < len(s); i++ {
		if escapePart(s[i]) {
			n++
		}
	}
	if n == 0 {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 2*n)
	for i := 0; i < len(s); i++ {
		c := s[i]
		if escapePart(c) {
			b.WriteByte('%')
			b.WriteByte(hexDigits[c>>4])
			b.WriteByte(hexDigits[c&15])
			continue
		}
		b.WriteByte(c)
	}
	return b.String()
}

const hexDigits = "0123456789ABCDEF"

func escapePart(c byte) bool {
	return c == '%' || c < 0x20 || c == 0x7f || strings.IndexByte(KeySeparators, c) >= 0
}

// keys are the Redis keys of one lease. All share one hash tag (the escaped
// user key) so that the scripts touch a single Cluster slot.
type keys struct {
	lock, fence, channel, tomb, queue, qexp string
}

// redisKeys maps a user key into the runtime's namespace:
// prefix + "{" + esc(key) + "}" + ":l" / ":f" / ":c" / ":q" / ":x" / ":r:"
// (lock, fence counter, release channel, waiter queue, waiter expiries,
// and the prefix of per-identity release tombstones), where esc escapes '%',
// '{' and '}'. The mapping is injective and no user key can produce another
// lease's fence counter or channel.
func redisKeys(prefix, key string) keys {
	// One allocation for all six keys: they are substrings of one string.
	n := len(prefix) + len(key) + 2
	for i := 0; i < len(key); i++ {
		switch key[i] {
		case '%', '{', '}':
			n += 2
		}
	}
	var b strings.Builder
	b.Grow(6*n + len(":l:f:c:r::q:x"))
	var ends [6]int
	for i, suffix := range [...]string{":l", ":f", ":c", ":r:", ":q", ":x"} {
		b.WriteString(prefix)
		b.WriteByte('{')
		for j := 0; j < len(key); j++ {
			switch c := key[j]; c {
			case '%', '{', '}':
				b.WriteByte('%')
				b.WriteByte(hexDigits[c>>4])
				b.WriteByte(hexDigits[c&15])
			default:
				b.WriteByte(c)
			}
		}
		b.WriteByte('}')
		b.WriteString(suffix)
		ends[i] = b.Len()
	}
	all := b.String()
	part := func(i int) string {
		from := 0
		if i > 0 {
			from = ends[i-1]
		}
		return all[from:ends[i]]
	}
	return keys{lock: part(0), fence: part(1), channel: part(2), tomb: part(3), queue: part(4), qexp: part(5)}
}
