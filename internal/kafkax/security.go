package kafkax

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"syscall"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/hyapp/roomflow/internal/cfgerr"
	"github.com/hyapp/roomflow/internal/tlsx"
)

// The SASL mechanisms a Cluster can log in with: the ones Kafka (and
// Strimzi's KafkaUser) offers with a user name and a password.
const (
	SASLPlain       = "PLAIN"
	SASLScramSHA256 = "SCRAM-SHA-256"
	SASLScramSHA512 = "SCRAM-SHA-512"
)

// SASL is the login of every client of a Cluster. The zero value (no
// Mechanism) logs in with nothing, as a plaintext or TLS-only listener
// expects.
//
// Password is a secret: String, GoString, LogValue and JSON leave it out,
// so printing or logging a Cluster (or a component's Config holding one)
// never shows it.
type SASL struct {
	// Mechanism is SASLPlain, SASLScramSHA256 or SASLScramSHA512; empty
	// disables SASL.
	Mechanism string
	User      string
	Password  string `json:"-"`
}

// Enabled reports whether a mechanism is set.
func (s SASL) Enabled() bool { return s.Mechanism != "" }

// Validate names the field that is wrong (keys mechanism, user, password);
// the zero SASL is valid. It never includes the password.
func (s SASL) Validate() error {
	var ch cfgerr.Checks
	switch s.Mechanism {
	case "":
		if s.User != "" || s.Password != "" {
			ch.Bad("mechanism", "must be set (%s, %s or %s) when a user or password is given", SASLPlain, SASLScramSHA256, SASLScramSHA512)
		}
		return ch.Err()
	case SASLPlain, SASLScramSHA256, SASLScramSHA512:
	default:
		ch.Bad("mechanism", "must be %s, %s or %s (got %q)", SASLPlain, SASLScramSHA256, SASLScramSHA512, s.Mechanism)
	}
	if s.User == "" {
		ch.Bad("user", "must be set with mechanism %s", s.Mechanism)
	}
	if s.Password == "" {
		ch.Bad("password", "must be set with mechanism %s", s.Mechanism)
	}
	return ch.Err()
}

// mechanism is franz-go's implementation of s, nil when s is disabled or
// names no known mechanism (Validate reports that).
func (s SASL) mechanism() sasl.Mechanism {
	switch s.Mechanism {
	case SASLPlain:
		return plain.Auth{User: s.User, Pass: s.Password}.AsMechanism()
	case SASLScramSHA256:
		return scram.Auth{User: s.User, Pass: s.Password}.AsSha256Mechanism()
	case SASLScramSHA512:
		return scram.Auth{User: s.User, Pass: s.Password}.AsSha512Mechanism()
	}
	return nil
}

// String is the mechanism and user, never the password.
func (s SASL) String() string {
	if !s.Enabled() {
		return "none"
	}
	return s.Mechanism + " user " + s.User
}

// GoString keeps %#v from printing the password.
func (s SASL) GoString() string {
	return fmt.Sprintf("kafkax.SASL{Mechanism: %q, User: %q, Password: %q}", s.Mechanism, s.User, redactedIfSet(s.Password))
}

// LogValue keeps slog from printing the password.
func (s SASL) LogValue() slog.Value {
	return slog.GroupValue(slog.String("mechanism", s.Mechanism), slog.String("user", s.User))
}

func redactedIfSet(v string) string {
	if v == "" {
		return ""
	}
	return "REDACTED"
}

// TLSFiles is how a Cluster's clients dial brokers over TLS, as files on
// disk (a Kubernetes Secret mounted as a volume; Strimzi's cluster CA and,
// for mTLS, a KafkaUser's user.crt and user.key): internal/tlsx's client
// files, loaded once at start by Load, so a missing or bad file stops the
// process before it connects anywhere (errors keyed ca_file, cert_file,
// key_file; paths, never a key's bytes).
type TLSFiles = tlsx.ClientFiles

// ConnectError is a failure to reach or log into a Cluster's brokers,
// with what was tried (brokers, TLS, SASL mechanism and user: never the
// password) and what the failure most likely means. Cluster.Explain and
// Cluster.Ping return it; Err is franz-go's error.
type ConnectError struct {
	Brokers []string
	TLS     bool
	SASL    SASL
	// Hint says in words what Err most likely means ("the broker refused
	// the SASL login: ...").
	Hint string
	Err  error
}

func (e *ConnectError) Error() string {
	how := "plaintext"
	if e.TLS {
		how = "TLS"
	}
	if e.SASL.Enabled() {
		how += ", SASL " + e.SASL.String()
	}
	return fmt.Sprintf("kafka: brokers %s (%s): %s: %v", strings.Join(e.Brokers, ","), how, e.Hint, e.Err)
}

func (e *ConnectError) Unwrap() error { return e.Err }

// Explain returns err as a *ConnectError when it is a failure to log in
// to, or to set up TLS with, c's brokers (an error of a request of a
// client of c), else err as it is. A Kafka broker answers a refused login
// with SASL_AUTHENTICATION_FAILED, but may also just close the connection
// (kfake does; so do listeners whose SASL or TLS setting differs from the
// client's): with SASL on, a connection closed before its first answer is
// explained as a refused login too.
func (c Cluster) Explain(err error) error {
	if err == nil {
		return nil
	}
	var ce *ConnectError
	if errors.As(err, &ce) {
		return err
	}
	hint := ""
	var verr *tls.CertificateVerificationError
	var rerr tls.RecordHeaderError
	closed := errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET)
	switch {
	case errors.Is(err, kerr.SaslAuthenticationFailed), c.SASL.Enabled() && closed:
		hint = fmt.Sprintf("the broker refused the SASL login of user %q: wrong user or password, or a mechanism (%s) the listener does not enable", c.SASL.User, c.SASL.Mechanism)
	case errors.Is(err, kerr.IllegalSaslState), errors.Is(err, kerr.UnsupportedSaslMechanism):
		hint = fmt.Sprintf("the listener does not accept SASL %s", c.SASL.Mechanism)
	case errors.As(err, &verr):
		hint = "the broker's TLS certificate is not trusted: check the CA file and the server name it is checked against"
	case errors.As(err, &rerr):
		hint = "TLS is on but the listener does not speak TLS"
	case strings.Contains(err.Error(), "remote error: tls:"):
		hint = "the broker refused the TLS handshake (a listener that requires a client certificate needs cert_file and key_file)"
	case closed && c.TLS == nil:
		hint = "the broker closed the connection: a listener that requires TLS or SASL needs them configured"
	default:
		return err
	}
	return &ConnectError{Brokers: c.Brokers, TLS: c.TLS != nil, SASL: c.SASL, Hint: hint, Err: err}
}

// Ping asks c's brokers for their metadata once, through a short-lived
// client without metrics, and returns nil or the failure as Explain says
// it: a command that must fail at once on a wrong password or CA (roomflow
// topics, the release step) checks with it first.
func (c Cluster) Ping(ctx context.Context) error {
	c.Metrics = nil
	cl, err := c.NewClient("ping")
	if err != nil {
		return err
	}
	defer cl.Close()
	return c.Explain(cl.Ping(ctx))
}
