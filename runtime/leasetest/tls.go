package leasetest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// tlsFiles are the PEM files a TLS server is started with.
type tlsFiles struct{ ca, cert, key string }

// StartTLS starts a redis-server that accepts only TLS connections (--port
// 0, --tls-port on a free loopback port) with a certificate for 127.0.0.1
// and localhost, signed by a CA made for this server. Clients need no
// certificate of their own (--tls-auth-clients no). Client, TLSConfig,
// CAFile and URL give what a client needs; the server stops when the test
// ends. A redis-server built without TLS fails the test.
func StartTLS(t testing.TB, args ...string) *Server {
	t.Helper()
	s, err := NewTLS(args...)
	if err != nil {
		t.Fatalf("leasetest: %v", err)
	}
	t.Cleanup(s.Stop)
	return s
}

// NewTLS is StartTLS for callers without a testing.TB. Call Stop when done.
func NewTLS(args ...string) (*Server, error) {
	s, err := launch(args, func(s *Server) error {
		files, conf, err := writeCerts(s.dir)
		if err != nil {
			return err
		}
		s.tls, s.tlsConf = files, conf
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("TLS server (is %s built with TLS? Debian's redis-server is): %w", binName(), err)
	}
	return s, nil
}

func binName() string {
	bin, err := serverBinary()
	if err != nil {
		return "redis-server"
	}
	return bin
}

// TLSConfig returns a client TLS configuration that trusts the server's
// CA, or nil for a server without TLS. Each call returns a new copy.
func (s *Server) TLSConfig() *tls.Config {
	if s.tlsConf == nil {
		return nil
	}
	return s.tlsConf.Clone()
}

// CAFile returns the path of the PEM file of the CA that signed a TLS
// server's certificate ("" for a server without TLS), for clients set up
// from files, as in production.
func (s *Server) CAFile() string {
	if s.tls == nil {
		return ""
	}
	return s.tls.ca
}

// URL returns the server's address as a go-redis URL: redis://host:port, or
// rediss://host:port for a TLS server (redis.ParseURL then needs the CA in
// the TLS configuration's RootCAs).
func (s *Server) URL() string {
	if s.tls != nil {
		return "rediss://" + s.Addr()
	}
	return "redis://" + s.Addr()
}

// writeCerts makes a CA and a server certificate for 127.0.0.1, ::1 and
// localhost in dir, valid for a day.
func writeCerts(dir string) (*tlsFiles, *tls.Config, error) {
	now := time.Now()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	caTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "leasetest CA"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, nil, err
	}
	caCert, err := x509.ParseCertificate(caDER)
	if err != nil {
		return nil, nil, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2),
		Subject:      pkix.Name{CommonName: "127.0.0.1"},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
		DNSNames:     []string{"localhost"},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, caKey)
	if err != nil {
		return nil, nil, err
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, nil, err
	}
	f := &tlsFiles{
		ca:   filepath.Join(dir, "ca.crt"),
		cert: filepath.Join(dir, "redis.crt"),
		key:  filepath.Join(dir, "redis.key"),
	}
	for path, block := range map[string]*pem.Block{
		f.ca:   {Type: "CERTIFICATE", Bytes: caDER},
		f.cert: {Type: "CERTIFICATE", Bytes: der},
		f.key:  {Type: "PRIVATE KEY", Bytes: keyDER},
	} {
		if err := os.WriteFile(path, pem.EncodeToMemory(block), 0o600); err != nil {
			return nil, nil, err
		}
	}
	pool := x509.NewCertPool()
	pool.AddCert(caCert)
	return f, &tls.Config{RootCAs: pool, ServerName: "127.0.0.1", MinVersion: tls.VersionTLS12}, nil
}
