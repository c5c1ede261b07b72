package tlsx

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"slices"
	"strings"
	"sync"

	"github.com/hyapp/roomflow/internal/cfgerr"
)

// ServerConfig is one listener's TLS (lucky.tls, api.tls): with CertFile
// and KeyFile the listener serves TLS 1.2+; with ClientCAFile it requires a
// client certificate that CA signed; with AllowedClientNames a caller
// whose certificate carries none of the names among its DNS or URI SANs
// (URI for SPIFFE ids: spiffe://cluster.local/ns/room/sa/room-service) is
// refused by the request check (Guard). The zero value serves plaintext.
type ServerConfig struct {
	CertFile           string
	KeyFile            string
	ClientCAFile       string
	AllowedClientNames []string
}

// Enabled reports whether any field is set: the listener serves TLS (or
// Validate refuses the half-set block).
func (c ServerConfig) Enabled() bool {
	return c.CertFile != "" || c.KeyFile != "" || c.ClientCAFile != "" || len(c.AllowedClientNames) > 0
}

// Validate checks what needs no file (a config is valid before its
// certificates are mounted): cert_file and key_file together, the client
// CA and the names only with them, the names only with a client CA, no
// empty name. Keys are the field names (cert_file, key_file,
// client_ca_file, allowed_client_names).
func (c ServerConfig) Validate() error {
	var ch cfgerr.Checks
	if !c.Enabled() {
		return nil
	}
	if c.CertFile == "" {
		ch.Bad("cert_file", "must be set with key_file, client_ca_file or allowed_client_names (the listener's own certificate)")
	}
	if c.KeyFile == "" {
		ch.Bad("key_file", "must be set with cert_file (the certificate's key)")
	}
	if len(c.AllowedClientNames) > 0 && c.ClientCAFile == "" {
		ch.Bad("allowed_client_names", "needs client_ca_file: names are only checked on client certificates a trusted CA signed")
	}
	for i, n := range c.AllowedClientNames {
		if strings.TrimSpace(n) == "" {
			ch.Bad("allowed_client_names", "entry %d is empty", i)
		} else if strings.Contains(n, ":") {
			if u, err := url.Parse(n); err != nil || u.Scheme == "" {
				ch.Bad("allowed_client_names", "%q is neither a DNS name nor a URI (spiffe://trust-domain/path)", n)
			}
		}
	}
	return ch.Err()
}

// Server is a listener's TLS material loaded from files and re-read when
// they change: the certificate and key at each handshake's
// GetConfigForClient, the client CA bundle likewise. Safe for concurrent
// use.
type Server struct {
	cfg     ServerConfig
	pair    *keyPair
	ca      *watched[*x509.CertPool]
	allowed map[string]bool

	mu       sync.Mutex
	built    *tls.Config
	forCert  *tls.Certificate
	forPool  *x509.CertPool
	template *tls.Config
}

// Load validates c and reads its files; it returns nil, nil for the zero
// config (plaintext). Errors are keyed by field (see Validate); a file
// that cannot be read, a PEM that holds no certificate, a key that does
// not match its certificate name the path and the key, never the bytes.
func (c ServerConfig) Load(log *slog.Logger) (*Server, error) {
	if !c.Enabled() {
		return nil, nil
	}
	if err := c.Validate(); err != nil {
		return nil, err
	}
	var ch cfgerr.Checks
	s := &Server{cfg: c, allowed: map[string]bool{}}
	for _, n := range c.AllowedClientNames {
		s.allowed[strings.TrimSpace(n)] = true
	}
	var err error
	if s.pair, err = newKeyPair(c.CertFile, c.KeyFile, log); err != nil {
		ch.Add(err)
	}
	if c.ClientCAFile != "" {
		s.ca, err = newWatched("client CA", log, func() (*x509.CertPool, error) { return loadPool(c.ClientCAFile) }, c.ClientCAFile)
		if err != nil {
			ch.Bad("client_ca_file", "%v", err)
		}
	}
	if err := ch.Err(); err != nil {
		return nil, err
	}
	s.template = &tls.Config{MinVersion: tls.VersionTLS12}
	if s.ca != nil {
		s.template.ClientAuth = tls.RequireAndVerifyClientCert
	}
	return s, nil
}

// RequiresClientCert reports whether callers must present a certificate
// the client CA signed (s non-nil with client_ca_file).
func (s *Server) RequiresClientCert() bool { return s != nil && s.ca != nil }

// ChecksNames reports whether callers are admitted by name.
func (s *Server) ChecksNames() bool { return s != nil && len(s.allowed) > 0 }

// TLSConfig is the listener's config: every handshake gets the current
// certificate and client CA (re-read when their files changed).
func (s *Server) TLSConfig() *tls.Config {
	return &tls.Config{
		MinVersion:         tls.VersionTLS12,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) { return s.current(), nil },
	}
}

// current is the config of a handshake now: rebuilt only when the
// certificate or the pool changed.
func (s *Server) current() *tls.Config {
	cert := s.pair.current()
	var pool *x509.CertPool
	if s.ca != nil {
		pool = s.ca.get()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.built == nil || s.forCert != cert || s.forPool != pool {
		c := s.template.Clone()
		c.Certificates = []tls.Certificate{*cert}
		c.ClientCAs = pool
		s.built, s.forCert, s.forPool = c, cert, pool
	}
	return s.built
}

// Names are the DNS and URI SANs of a certificate, the names
// allowed_client_names matches.
func Names(c *x509.Certificate) []string {
	if c == nil {
		return nil
	}
	names := slices.Clone(c.DNSNames)
	for _, u := range c.URIs {
		names = append(names, u.String())
	}
	return names
}

// allowedPeer reports whether the verified client certificate of cs
// carries an allowed name; true when no names are configured.
func (s *Server) allowedPeer(cs *tls.ConnectionState) (bool, []string) {
	if !s.ChecksNames() {
		return true, nil
	}
	if cs == nil || len(cs.VerifiedChains) == 0 || len(cs.VerifiedChains[0]) == 0 {
		return false, nil
	}
	names := Names(cs.VerifiedChains[0][0])
	for _, n := range names {
		if s.allowed[n] {
			return true, names
		}
	}
	return false, names
}

// IsLoopback reports whether a listener on addr (host:port) is reachable
// from this host only: a loopback IP or "localhost". An empty host, an
// unspecified address (0.0.0.0, ::) or any other name listens for
// others.
func IsLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// Insecure reports whether a listener on addr with c admits callers from
// other hosts without checking who they are: not loopback and no client
// CA.
func Insecure(addr string, c ServerConfig) bool {
	return addr != "" && !IsLoopback(addr) && c.ClientCAFile == ""
}

// InsecureWarning is the WARN line's message for a listener Insecure
// reports: what is open and which keys close it. listenerKey is the
// address key (lucky.grpc_addr), tlsKey the block (lucky.tls).
func InsecureWarning(listenerKey, addr, tlsKey string) string {
	return fmt.Sprintf("%s %s accepts callers from other hosts without a client certificate: anyone who reaches the port is served; "+
		"set %s.cert_file, %s.key_file, %s.client_ca_file and %s.allowed_client_names (see docs/operations.md: Mutual TLS)",
		listenerKey, addr, tlsKey, tlsKey, tlsKey, tlsKey)
}
