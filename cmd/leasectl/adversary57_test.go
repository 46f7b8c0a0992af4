package main

// Adversary round 57 (leasectl): a finding, failing before its fix.

import (
	"encoding/base64"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/leasegen/leasegen/runtime/lease"
	"github.com/leasegen/leasegen/runtime/leasetest"
)

// Keys that are not UTF-8 (KeyPart leaves bytes >= 0x80 as they are, so a
// template over binary IDs makes them; Do accepts them) were listed by
// list -json with every invalid byte replaced by U+FFFD (a JSON string
// cannot carry them): two distinct held keys came out as the same "key",
// one that show, release and list do not know. The text output quotes
// such keys exactly; the JSON output now gives their bytes in key_base64,
// which a script passes on to show.
func TestAdversary57_ListJSONNonUTF8KeysStayDistinct(t *testing.T) {
	t.Parallel()
	srv := leasetest.StartRedis(t)
	c, err := lease.New(srv.Client(t))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	keys := []string{"bin:\xff", "bin:\xfe"}
	for _, k := range keys {
		a17Hold(t, c, k, lease.Spec{TTL: 5 * time.Second, Deadline: time.Minute})
	}
	code, out, errOut := leasectl(t, "", "list", "-url", srv.URL(), "-json", "bin:*")
	if code != 0 {
		t.Fatalf("list: %d %q", code, errOut)
	}
	seen := map[string]int{}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		var j leaseJSON
		if err := json.Unmarshal([]byte(line), &j); err != nil {
			t.Fatalf("list -json line %q: %v", line, err)
		}
		key := j.Key
		if j.KeyBase64 != "" {
			b, err := base64.StdEncoding.DecodeString(j.KeyBase64)
			if err != nil {
				t.Fatalf("list -json line %q: key_base64: %v", line, err)
			}
			key = string(b)
		}
		seen[key]++
	}
	for _, k := range keys {
		if seen[k] != 1 {
			t.Errorf("list -json: key %q listed %d times; keys listed: %v", k, seen[k], seen)
		}
	}
	// What a script would do next with a listed key.
	for k := range seen {
		code, out, errOut := leasectl(t, "", "show", "-url", srv.URL(), "-json", "--", k)
		var j leaseJSON
		if code != 0 || json.Unmarshal([]byte(out), &j) != nil || j.Holder == "" {
			t.Errorf("show of listed key %q = %d %q %q: not held, though list -json listed it", k, code, strings.TrimSpace(out), errOut)
		}
	}
}

// A key that begins or ends with a space is quoted in the text output:
// "orders:42 " printed bare read as orders:42, a lease on another key.
func TestAdversary57_ListTextQuotesEdgeSpaces(t *testing.T) {
	t.Parallel()
	srv := leasetest.StartRedis(t)
	c, err := lease.New(srv.Client(t))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for _, k := range []string{"sp:42 ", " sp:43", "sp:4 4"} {
		a17Hold(t, c, k, lease.Spec{TTL: 5 * time.Second, Deadline: time.Minute})
	}
	code, out, errOut := leasectl(t, "", "list", "-url", srv.URL(), "*sp:4*")
	if code != 0 {
		t.Fatalf("list: %d %q", code, errOut)
	}
	for _, want := range []string{`"sp:42 "`, `" sp:43"`, "sp:4 4"} {
		if !strings.Contains(out, want) {
			t.Errorf("list: %q not in\n%s", want, out)
		}
	}
	if strings.Contains(out, `"sp:4 4"`) {
		t.Errorf("list quoted a key with an inner space only:\n%s", out)
	}
}
