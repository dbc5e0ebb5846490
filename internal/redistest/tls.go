package redistest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// testCA is a certificate authority of a test's own and a server certificate it signed
// for 127.0.0.1, written to files a redis-server reads.
type testCA struct {
	pool                 *x509.CertPool
	caFile, cert, keyPEM string
}

func newTestCA(t TB) *testCA {
	t.Helper()
	dir, err := os.MkdirTemp("", "sy-redis-tls-")
	if err != nil {
		t.Fatalf("redis tls: %v", err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	fail := func(err error) {
		if err != nil {
			t.Fatalf("redis tls: %v", err)
		}
	}
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	fail(err)
	now := time.Now()
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "switchyard test CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	fail(err)
	ca, err := x509.ParseCertificate(caDER)
	fail(err)
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	fail(err)
	// Both ends of the cluster bus and of replication present it too.
	leaf := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "127.0.0.1"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour), IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}}
	leafDER, err := x509.CreateCertificate(rand.Reader, leaf, ca, &key.PublicKey, caKey)
	fail(err)
	keyDER, err := x509.MarshalECPrivateKey(key)
	fail(err)
	c := &testCA{pool: x509.NewCertPool(), caFile: filepath.Join(dir, "ca.crt"), cert: filepath.Join(dir, "node.crt"), keyPEM: filepath.Join(dir, "node.key")}
	c.pool.AddCert(ca)
	fail(os.WriteFile(c.caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}), 0o600))
	fail(os.WriteFile(c.cert, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: leafDER}), 0o600))
	fail(os.WriteFile(c.keyPEM, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), 0o600))
	return c
}

// serverArgs are a TLS-only redis-server's arguments beyond its port: clients need no
// certificate of their own; the cluster bus and replication use TLS too.
func (c *testCA) serverArgs() []string {
	return []string{"--tls-cert-file", c.cert, "--tls-key-file", c.keyPEM, "--tls-ca-cert-file", c.caFile,
		"--tls-auth-clients", "no", "--tls-cluster", "yes", "--tls-replication", "yes"}
}

// clientConfig is how a client reaches the servers: trusting the CA, naming 127.0.0.1.
func (c *testCA) clientConfig() *tls.Config {
	return &tls.Config{RootCAs: c.pool, ServerName: "127.0.0.1", MinVersion: tls.VersionTLS12}
}
