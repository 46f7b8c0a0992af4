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

// ownerSep separates a leader candidate's random identity from its owner
// in the lock's value (see redisKeys). KeyPart escapes it in the owner.
const ownerSep = '/'

// splitIdentity splits a lock value's identity into the random part and
// the owner (unescaped; "" when none is stored).
func splitIdentity(id string) (random, owner string) {
	random, esc, ok := strings.Cut(id, string(ownerSep))
	if !ok {
		return id, ""
	}
	return random, unescapePart(esc)
}

// unescapePart reverses KeyPart ('%XX' back to the byte; anything else,
// a malformed escape included, is kept as written).
func unescapePart(s string) string {
	if strings.IndexByte(s, '%') < 0 {
		return s
	}
	var b strings.Builder
	b.Grow(len(s))
	for i := 0; i < len(s); i++ {
		if s[i] == '%' && i+2 < len(s) {
			hi, lo := unhex(s[i+1]), unhex(s[i+2])
			if hi >= 0 && lo >= 0 {
				b.WriteByte(byte(hi<<4 | lo))
				i += 2
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func unhex(c byte) int {
	switch {
	case '0' <= c && c <= '9':
		return int(c - '0')
	case 'A' <= c && c <= 'F':
		return int(c-'A') + 10
	case 'a' <= c && c <= 'f':
		return int(c-'a') + 10
	}
	return -1
}

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
//
// The lock key's value is the holder's identity, ":" and its fencing token
// ("0" without fencing), with a "~" in front while a hold-min runs out
// after the release. An identity is 32 hex digits (128 random bits, new
// for every attempt); a leader candidate's (Client.Lead) is followed by "/"
// and its owner, the candidate's name (LeadSpec.Owner, such as a host or
// pod name) escaped with KeyPart, so it holds no ':' '/' or '|':
//
//	lease:{jobs:settle}:l = 3f2a…9c/web-7%3A8080:1796051746211812
//
// The owner is thus stored atomically with the grant, lives exactly as
// long as it, travels with a handover to a waiter (the queue entry holds
// the identity) and needs no key or script of its own: every script
// compares whole identities. Leader and Inspect split it off (see
// splitIdentity).
func redisKeys(prefix, key string) keys {
	// One allocation for all six keys: they are substrings of one string.
	var b strings.Builder
	b.Grow(keysLen(prefix, key))
	return writeKeys(&b, prefix, key)
}

// keyBase is the length of prefix + "{" + esc(key) + "}", the part all six
// keys share.
func keyBase(prefix, key string) int {
	n := len(prefix) + len(key) + 2
	for i := 0; i < len(key); i++ {
		switch key[i] {
		case '%', '{', '}':
			n += 2
		}
	}
	return n
}

// keysLen is the length of all six keys of key together.
func keysLen(prefix, key string) int { return 6*keyBase(prefix, key) + len(":l:f:c:r::q:x") }

// writeKeys writes the six keys into b and returns them as substrings of
// what b holds (still valid after more is written to b).
func writeKeys(b *strings.Builder, prefix, key string) keys {
	from := b.Len()
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
		start := from
		if i > 0 {
			start = ends[i-1]
		}
		return all[start:ends[i]]
	}
	return keys{lock: part(0), fence: part(1), channel: part(2), tomb: part(3), queue: part(4), qexp: part(5)}
}
