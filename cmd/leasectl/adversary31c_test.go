package main

import (
	"strings"
	"testing"
)

// leasectl hides the password of -url (and $REDIS_URL) in its messages
// and its -h. A URL that does not parse must not be echoed with the
// password either: a malformed URL in $REDIS_URL would otherwise put the
// operator's password into a CI log or a terminal recording. Before, the
// parse error quoted the whole URL.
func TestAdversary31c_MalformedURLHidesPassword(t *testing.T) {
	const secret = "Sup3rS3cret"
	for _, url := range []string{
		"redis://ops:" + secret + "%zz@127.0.0.1:1/0", // a bad escape in the password
		"redis://ops:" + secret + "@127.0.0.1:1/0%zz", // a bad escape elsewhere
		"redis://ops:" + secret + "@127.0.0.1:xx/0",   // a bad port
		"redis://ops:" + secret + "@127.0.0.1:1/0?nope=1",
		"redis://ops:" + secret + "@127.0.0.1:1/abc",
	} {
		for _, cluster := range []bool{false, true} {
			args := []string{"list", "-url", url}
			if cluster {
				args = []string{"list", "-cluster", "-url", url}
			}
			code, out, errOut := leasectl(t, "", args...)
			// A Cluster URL has no database: ParseClusterURL takes "/abc",
			// and the dial then fails (exit 1).
			if code == exitOK || code == exitUsage && !strings.Contains(errOut, "-url") {
				t.Errorf("%q: exit %d, stderr %q; want a failure, a usage error naming -url", args, code, errOut)
			}
			if strings.Contains(out+errOut, secret) || strings.Contains(out+errOut, "S3cret") {
				t.Errorf("%q: the password is in the output:\nstdout %q\nstderr %q", args, out, errOut)
			}
		}
	}
}
