package testenv

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
	"testing"
	"time"
)

// PKI is a test certificate authority made in the test (crypto/x509, an
// hour's validity) with a broker certificate and a client certificate it
// signed, for TLS and mutual-TLS tests against kfake (kfake.TLS with
// ServerTLS). The CA and the client pair are PEM files in Dir, as a
// Kubernetes Secret mounts them.
type PKI struct {
	Dir        string
	CAFile     string // ca.crt
	ClientCert string // user.crt, CN ClientName
	ClientKey  string // user.key, PKCS#8
	server     tls.Certificate
	pool       *x509.CertPool
}

// ClientName is the common name of PKI's client certificate.
const ClientName = "roomflow"

// NewPKI makes a CA and signs a server certificate for serverDNS (and for
// 127.0.0.1 when withIP, so clients that dial kfake's listen address
// verify it without a server name) and a client certificate.
func NewPKI(t testing.TB, serverDNS string, withIP bool) *PKI {
	t.Helper()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	dir := t.TempDir()
	now := time.Now()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	must(err)
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "roomflow test CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	must(err)
	ca, err := x509.ParseCertificate(caDER)
	must(err)
	p := &PKI{Dir: dir, pool: x509.NewCertPool()}
	p.pool.AddCert(ca)
	p.CAFile = writePEM(t, dir, "ca.crt", "CERTIFICATE", caDER)

	leaf := func(serial int64, cn string, usage x509.ExtKeyUsage, dns []string, ips []net.IP) ([]byte, *ecdsa.PrivateKey) {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		must(err)
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: cn},
			NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour),
			KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage},
			DNSNames: dns, IPAddresses: ips,
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
		must(err)
		return der, key
	}
	var ips []net.IP
	if withIP {
		ips = []net.IP{net.IPv4(127, 0, 0, 1)}
	}
	srvDER, srvKey := leaf(2, serverDNS, x509.ExtKeyUsageServerAuth, []string{serverDNS}, ips)
	p.server = tls.Certificate{Certificate: [][]byte{srvDER}, PrivateKey: srvKey}
	cliDER, cliKey := leaf(3, ClientName, x509.ExtKeyUsageClientAuth, nil, nil)
	p.ClientCert = writePEM(t, dir, "user.crt", "CERTIFICATE", cliDER)
	keyDER, err := x509.MarshalPKCS8PrivateKey(cliKey)
	must(err)
	p.ClientKey = writePEM(t, dir, "user.key", "PRIVATE KEY", keyDER)
	return p
}

// ServerTLS is the brokers' listener config (for kfake.TLS);
// requireClient makes it mutual TLS: a client certificate signed by the CA
// is required.
func (p *PKI) ServerTLS(requireClient bool) *tls.Config {
	c := &tls.Config{Certificates: []tls.Certificate{p.server}, MinVersion: tls.VersionTLS12}
	if requireClient {
		c.ClientAuth = tls.RequireAndVerifyClientCert
		c.ClientCAs = p.pool
	}
	return c
}

func writePEM(t testing.TB, dir, name, typ string, der []byte) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}
