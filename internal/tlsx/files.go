// Package tlsx is roomflow's one TLS plumbing: the client side every
// outgoing connection uses (Kafka brokers, the wallet), and the server side
// of every RPC listener (roomflow lucky's gRPC, the stats API's HTTP and
// gRPC listeners): TLS 1.2 at least, client certificates checked against a
// CA, callers admitted by the names in their certificates, refusals
// counted and logged, and certificates re-read when their files change
// (cert-manager or a mesh rotating a mounted Secret), without a restart.
//
// Errors follow internal/cfgerr: *cfgerr.FieldError keyed by the field
// ("cert_file", "client_ca_file", ...) that the wiring re-keys under the
// application's dotted key. They name paths, never a key's bytes.
package tlsx

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"log/slog"
	"os"
	"sync"

	"github.com/hyapp/roomflow/internal/cfgerr"
)

// ClientFiles is how a client dials a TLS server, as files on disk (a
// Kubernetes Secret mounted as a volume). Load turns it into a
// *tls.Config once, at start, so a missing or bad file stops the process
// before it connects anywhere.
type ClientFiles struct {
	// CAFile is a PEM bundle of the CAs that sign the servers'
	// certificates; empty trusts the system roots.
	CAFile string
	// CertFile and KeyFile are the PEM client certificate and its key for
	// mutual TLS; both or neither.
	CertFile, KeyFile string
	// ServerName overrides the host name the server's certificate is
	// checked against; empty checks the dialled host.
	ServerName string
	// InsecureSkipVerify accepts any server certificate: the connection
	// is encrypted but not authenticated. For tests only.
	InsecureSkipVerify bool
	// Reload re-reads CertFile and KeyFile when either changes on disk
	// (checked at each handshake), so a rotated client certificate is
	// presented from the next connection on. A pair that does not load
	// (a rotation half written) keeps the previous one.
	Reload bool
	// Logger gets the reload lines, with its owner's component (nil:
	// slog.Default(), component tlsx).
	Logger *slog.Logger
}

// Validate checks what needs no file: cert_file and key_file together
// (keys cert_file, key_file).
func (f ClientFiles) Validate() error {
	var ch cfgerr.Checks
	switch {
	case f.CertFile == "" && f.KeyFile != "":
		ch.Bad("cert_file", "must be set with key_file (mutual TLS needs both)")
	case f.KeyFile == "" && f.CertFile != "":
		ch.Bad("key_file", "must be set with cert_file (mutual TLS needs both)")
	}
	return ch.Err()
}

// Load reads the files and returns the client TLS config (TLS 1.2 at
// least). Errors are *cfgerr.FieldError keyed ca_file, cert_file or
// key_file, saying whether the file cannot be read or does not hold what
// it must; they name paths, never a key's content.
func (f ClientFiles) Load() (*tls.Config, error) {
	var ch cfgerr.Checks
	tc := &tls.Config{
		MinVersion:         tls.VersionTLS12,
		ServerName:         f.ServerName,
		InsecureSkipVerify: f.InsecureSkipVerify, //nolint:gosec // opt-in, documented as tests only
	}
	if f.CAFile != "" {
		pool, err := loadPool(f.CAFile)
		if err != nil {
			ch.Bad("ca_file", "%v", err)
		}
		tc.RootCAs = pool
	}
	if err := f.Validate(); err != nil {
		ch.Add(err)
	} else if f.CertFile != "" {
		kp, err := newKeyPair(f.CertFile, f.KeyFile, f.Logger)
		ch.Add(err)
		if err == nil {
			tc.Certificates = []tls.Certificate{*kp.cert}
		}
		if err == nil && f.Reload {
			tc.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
				return kp.current(), nil
			}
		}
	}
	if err := ch.Err(); err != nil {
		return nil, err
	}
	return tc, nil
}

// readKeyPair reads a certificate and its key; errors keyed cert_file or
// key_file.
func readKeyPair(certFile, keyFile string) (*tls.Certificate, error) {
	var ch cfgerr.Checks
	certPEM, cerr := os.ReadFile(certFile)
	if cerr != nil {
		ch.Bad("cert_file", "cannot read: %v", cerr)
	}
	keyPEM, kerr := os.ReadFile(keyFile)
	if kerr != nil {
		ch.Bad("key_file", "cannot read: %v", kerr)
	}
	if cerr != nil || kerr != nil {
		return nil, ch.Err()
	}
	// X509KeyPair's errors describe the PEM blocks, never their bytes.
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, &cfgerr.FieldError{Key: "cert_file",
			Msg: fmt.Sprintf("%s and key_file %s are not a certificate and its key: %v", certFile, keyFile, err)}
	}
	return &cert, nil
}

// loadPool reads a PEM CA bundle.
func loadPool(path string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(path)
	if err != nil {
		return nil, &plainError{"cannot read: " + err.Error()}
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, &plainError{path + " holds no PEM certificate"}
	}
	return pool, nil
}

type plainError struct{ msg string }

func (e *plainError) Error() string { return e.msg }

// changed reports whether the file behind path is not the one a
// describes any more: another inode (a Kubernetes Secret update swaps a
// symlink), another size or modification time.
func changed(a, b os.FileInfo) bool {
	return a == nil || b == nil || !os.SameFile(a, b) || !a.ModTime().Equal(b.ModTime()) || a.Size() != b.Size()
}

// watched is a value loaded from files, re-loaded when one of them
// changes. A load that fails keeps the previous value (a rotation caught
// half written is retried at the next check) and is logged once per set
// of file versions.
type watched[T any] struct {
	what  string
	paths []string
	load  func() (T, error)
	log   *slog.Logger

	mu     sync.Mutex
	val    T
	stamps []os.FileInfo
	failed []os.FileInfo // the versions whose load failed last
}

func newWatched[T any](what string, log *slog.Logger, load func() (T, error), paths ...string) (*watched[T], error) {
	if log == nil {
		log = slog.Default().With("component", "tlsx")
	}
	w := &watched[T]{what: what, paths: paths, load: load, log: log}
	stamps := w.stat()
	v, err := load()
	if err != nil {
		return nil, err
	}
	w.val, w.stamps = v, stamps
	return w, nil
}

func (w *watched[T]) stat() []os.FileInfo {
	out := make([]os.FileInfo, len(w.paths))
	for i, p := range w.paths {
		out[i], _ = os.Stat(p)
	}
	return out
}

func anyChanged(a, b []os.FileInfo) bool {
	if len(a) != len(b) {
		return true
	}
	for i := range a {
		if changed(a[i], b[i]) {
			return true
		}
	}
	return false
}

// get returns the value, re-loaded first when a file changed.
func (w *watched[T]) get() T {
	now := w.stat()
	w.mu.Lock()
	defer w.mu.Unlock()
	if !anyChanged(now, w.stamps) {
		return w.val
	}
	v, err := w.load()
	if err != nil {
		if anyChanged(now, w.failed) {
			w.failed = now
			w.log.Warn("TLS files changed but do not load; keeping the previous ones",
				"what", w.what, "files", w.paths, "error", err)
		}
		return w.val
	}
	w.val, w.stamps, w.failed = v, now, nil
	w.log.Info("TLS files re-read", "what", w.what, "files", w.paths)
	return v
}

// keyPair is a certificate and its key, re-read when either file changes.
type keyPair struct {
	w    *watched[*tls.Certificate]
	cert *tls.Certificate // the first load
}

func newKeyPair(certFile, keyFile string, log *slog.Logger) (*keyPair, error) {
	w, err := newWatched("certificate", log, func() (*tls.Certificate, error) { return readKeyPair(certFile, keyFile) }, certFile, keyFile)
	if err != nil {
		return nil, err
	}
	return &keyPair{w: w, cert: w.val}, nil
}

func (k *keyPair) current() *tls.Certificate { return k.w.get() }
