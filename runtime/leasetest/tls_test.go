package leasetest_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasegen/leasegen/runtime/leasetest"
)

// A TLS-only server: its own client and a rediss:// URL with the CA file
// both work; a plain client and a client that does not trust the CA are
// refused.
func TestTLS(t *testing.T) {
	t.Parallel()
	s := leasetest.StartTLS(t)
	ctx := context.Background()
	if err := s.Client(t).Ping(ctx).Err(); err != nil {
		t.Fatalf("PING over TLS: %v", err)
	}

	if !strings.HasPrefix(s.URL(), "rediss://") {
		t.Fatalf("URL = %q, want rediss://", s.URL())
	}
	o, err := redis.ParseURL(s.URL())
	if err != nil {
		t.Fatal(err)
	}
	pem, err := os.ReadFile(s.CAFile())
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		t.Fatalf("CA file %s holds no certificate", s.CAFile())
	}
	o.TLSConfig.RootCAs = pool
	viaURL := redis.NewClient(o)
	defer viaURL.Close()
	if err := viaURL.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatalf("SET via %s with the CA file: %v", s.URL(), err)
	}

	plain := redis.NewClient(&redis.Options{Addr: s.Addr(), MaxRetries: -1, ReadTimeout: time.Second})
	defer plain.Close()
	if err := plain.Ping(ctx).Err(); err == nil {
		t.Fatal("a plain client got PONG from the TLS port")
	} else {
		t.Logf("plain client: %v", err)
	}

	untrusting := redis.NewClient(&redis.Options{Addr: s.Addr(), MaxRetries: -1, TLSConfig: &tls.Config{ServerName: "127.0.0.1"}})
	defer untrusting.Close()
	err = untrusting.Ping(ctx).Err()
	var unknownCA x509.UnknownAuthorityError
	if !errors.As(err, &unknownCA) {
		t.Fatalf("client without the CA: %v, want an unknown authority error", err)
	}

	// Restart keeps the certificates.
	if err := s.Restart(); err != nil {
		t.Fatal(err)
	}
	if err := s.Client(t).Ping(ctx).Err(); err != nil {
		t.Fatalf("PING over TLS after Restart: %v", err)
	}
}
