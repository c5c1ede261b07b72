package testenv

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
	"net/url"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// PKI is a test certificate authority made in the test (crypto/x509, an
// hour's validity) with a server certificate and a client certificate it
// signed, for TLS and mutual-TLS tests (kfake.TLS with ServerTLS; roomflow
// lucky, the stats API and the fake wallet with ServerCert/ServerKey).
// Issue signs more leaves (client certificates carrying DNS or SPIFFE URI
// names, rotated server certificates); a second NewPKI is "another CA".
// The CA and every pair are PEM files in Dir, as a Kubernetes Secret
// mounts them.
type PKI struct {
	Dir        string
	CAFile     string // ca.crt
	ClientCert string // user.crt, CN ClientName, no SAN
	ClientKey  string // user.key, PKCS#8
	ServerCert string // server.crt: serverDNS (and 127.0.0.1 when withIP)
	ServerKey  string // server.key
	server     tls.Certificate
	pool       *x509.CertPool
	ca         *x509.Certificate
	caKey      *ecdsa.PrivateKey

	mu     sync.Mutex
	serial int64
}

// ClientName is the common name of PKI's client certificate.
const ClientName = "roomflow"

// Leaf is a certificate Issue signed, as files and loaded.
type Leaf struct {
	CertFile, KeyFile string
	Cert              tls.Certificate
	X509              *x509.Certificate
}

// LeafOpts describe a leaf to sign.
type LeafOpts struct {
	// Name is the subject common name (never checked by roomflow: only
	// SANs are).
	Name string
	// DNS and URIs are the SANs (URIs such as
	// spiffe://cluster.local/ns/room/sa/room-service); IPs too.
	DNS  []string
	URIs []string
	IPs  []net.IP
	// Server makes a server certificate (ExtKeyUsageServerAuth); else a
	// client one.
	Server bool
	// File is the base name of the .crt and .key files in Dir (default
	// leaf-<serial>). Issuing again under a name replaces its files
	// atomically (write, then rename), as a rotation does.
	File string
}

// NewPKI makes a CA and signs a server certificate for serverDNS (and for
// 127.0.0.1 when withIP, so clients that dial a listen address verify it
// without a server name) and a client certificate.
func NewPKI(t testing.TB, serverDNS string, withIP bool) *PKI {
	t.Helper()
	p, err := MakePKI(t.TempDir(), serverDNS, withIP)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// MakePKI is NewPKI writing into dir, for programs without a testing.TB
// (the benchmarks' -mtls).
func MakePKI(dir, serverDNS string, withIP bool) (*PKI, error) {
	now := time.Now()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "roomflow test CA " + filepath.Base(dir)},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, err
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return nil, err
	}
	p := &PKI{Dir: dir, pool: x509.NewCertPool(), ca: ca, caKey: caKey, serial: 1}
	p.pool.AddCert(ca)
	if p.CAFile, err = writePEMFile(dir, "ca.crt", "CERTIFICATE", caDER); err != nil {
		return nil, err
	}
	var ips []net.IP
	if withIP {
		ips = []net.IP{net.IPv4(127, 0, 0, 1)}
	}
	srv, err := p.issue(LeafOpts{Name: serverDNS, DNS: []string{serverDNS}, IPs: ips, Server: true, File: "server"})
	if err != nil {
		return nil, err
	}
	p.server, p.ServerCert, p.ServerKey = srv.Cert, srv.CertFile, srv.KeyFile
	cli, err := p.issue(LeafOpts{Name: ClientName, File: "user"})
	if err != nil {
		return nil, err
	}
	p.ClientCert, p.ClientKey = cli.CertFile, cli.KeyFile
	return p, nil
}

// Issue signs a leaf with the PKI's CA and writes it to Dir.
func (p *PKI) Issue(t testing.TB, o LeafOpts) Leaf {
	t.Helper()
	l, err := p.issue(o)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// IssueErr is Issue for programs without a testing.TB.
func (p *PKI) IssueErr(o LeafOpts) (Leaf, error) { return p.issue(o) }

func (p *PKI) issue(o LeafOpts) (Leaf, error) {
	p.mu.Lock()
	p.serial++
	serial := p.serial
	p.mu.Unlock()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return Leaf{}, err
	}
	usage := x509.ExtKeyUsageClientAuth
	if o.Server {
		usage = x509.ExtKeyUsageServerAuth
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: o.Name},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage},
		DNSNames: o.DNS, IPAddresses: o.IPs,
	}
	for _, s := range o.URIs {
		u, err := url.Parse(s)
		if err != nil {
			return Leaf{}, err
		}
		tmpl.URIs = append(tmpl.URIs, u)
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, p.ca, &key.PublicKey, p.caKey)
	if err != nil {
		return Leaf{}, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return Leaf{}, err
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return Leaf{}, err
	}
	base := o.File
	if base == "" {
		base = fmt.Sprintf("leaf-%d", serial)
	}
	l := Leaf{Cert: tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: cert}, X509: cert}
	if l.CertFile, err = writePEMFile(p.Dir, base+".crt", "CERTIFICATE", der); err != nil {
		return Leaf{}, err
	}
	if l.KeyFile, err = writePEMFile(p.Dir, base+".key", "PRIVATE KEY", keyDER); err != nil {
		return Leaf{}, err
	}
	return l, nil
}

// Pool is a pool holding the CA.
func (p *PKI) Pool() *x509.CertPool { return p.pool }

// ClientTLS is a client config trusting the CA and presenting leaf (nil:
// no client certificate) whatever CAs the server asks for (crypto/tls
// would otherwise leave out a certificate of a CA the server does not
// name, and a test of "another CA" would test "no certificate").
func (p *PKI) ClientTLS(leaf *Leaf) *tls.Config {
	c := &tls.Config{RootCAs: p.pool, MinVersion: tls.VersionTLS12}
	if leaf != nil {
		cert := leaf.Cert
		c.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &cert, nil }
	}
	return c
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

// writePEMFile writes one PEM block to dir/name atomically (a temporary
// file renamed over it), so a reader never sees half a file.
func writePEMFile(dir, name, typ string, der []byte) (string, error) {
	path := filepath.Join(dir, name)
	tmp, err := os.CreateTemp(dir, "."+name+".*")
	if err != nil {
		return "", err
	}
	_, err = tmp.Write(pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}))
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chmod(tmp.Name(), 0o600)
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		_ = os.Remove(tmp.Name())
		return "", err
	}
	return path, nil
}
