package main

import (
	"encoding/base64"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/leasegen/leasegen/runtime/lease"
	"github.com/leasegen/leasegen/runtime/leasetest"
)

// watch -json: every change of a key that is not UTF-8 (held, granted by
// handover, ended) carries key_base64 with the key's bytes (adversary round 59: held).
func TestAdversary59_WatchJSONKeyBase64(t *testing.T) {
	t.Parallel()
	srv := leasetest.StartRedis(t)
	c, err := lease.New(srv.Client(t))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	key := "bin:\xff{%}"
	h := a17Hold(t, c, key, lease.Spec{TTL: 5 * time.Second, Deadline: time.Minute})
	go func() { time.Sleep(700 * time.Millisecond); h.stop() }()
	code, out, errOut := leasectl(t, "", "watch", "-url", srv.URL(), "-json", "-interval", "200ms", "-for", "1500ms", "bin:*")
	t.Logf("watch: %d\n%s\n%s", code, out, errOut)
	kinds := map[string]bool{}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		var ch changeJSON
		if err := json.Unmarshal([]byte(line), &ch); err != nil {
			t.Fatalf("%q: %v", line, err)
		}
		b, err := base64.StdEncoding.DecodeString(ch.Lease.KeyBase64)
		if err != nil || string(b) != key {
			t.Errorf("change %s: key_base64 %q decodes to %q, want %q", ch.Change, ch.Lease.KeyBase64, b, key)
		}
		kinds[ch.Change] = true
	}
	t.Logf("kinds %v", kinds)
}
