package kafkax_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hyapp/roomflow/internal/cfgerr"
	"github.com/hyapp/roomflow/internal/kafkax"
	"github.com/hyapp/roomflow/internal/testenv"
)

const (
	saslUser = "roomflow"
	saslPass = "s3cret-Pa55word-xyz"
)

func loadTLS(t *testing.T, f kafkax.TLSFiles) *tls.Config {
	t.Helper()
	tc, err := f.Load()
	if err != nil {
		t.Fatal(err)
	}
	return tc
}

// fakeCluster starts a one-broker kfake with topic "t" and opts.
func fakeCluster(t *testing.T, opts ...kfake.Opt) []string {
	t.Helper()
	c, err := kfake.NewCluster(append([]kfake.Opt{kfake.NumBrokers(1), kfake.SeedTopics(1, "t")}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c.ListenAddrs()
}

// debugLog records everything franz-go logs, at debug, so a test can
// check that no line carries the password.
type debugLog struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (d *debugLog) Level() kgo.LogLevel { return kgo.LogLevelDebug }

func (d *debugLog) Log(level kgo.LogLevel, msg string, keyvals ...any) {
	d.mu.Lock()
	defer d.mu.Unlock()
	fmt.Fprintf(&d.buf, "%s %s %v\n", level, msg, keyvals)
}

func (d *debugLog) String() string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.buf.String()
}

// roundTrip produces one record through c.NewClient and consumes it back
// with a second client of c.
func roundTrip(t *testing.T, c kafkax.Cluster) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	p, err := c.NewClient("test-producer")
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	want := "hello " + t.Name()
	if err := p.ProduceSync(ctx, &kgo.Record{Topic: "t", Value: []byte(want)}).FirstErr(); err != nil {
		t.Fatalf("produce: %v", err)
	}
	cl, err := c.NewClient("test-consumer", kgo.ConsumeTopics("t"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	for {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			t.Fatalf("consume: %v", err)
		}
		for _, e := range fs.Errors() {
			t.Fatalf("consume: %v", e.Err)
		}
		for _, r := range fs.Records() {
			if string(r.Value) == want {
				return
			}
		}
	}
}

// Every mechanism logs in against kfake and carries a produce and a
// consume; franz-go's own debug log never shows the password.
func TestSASLRoundTrip(t *testing.T) {
	for _, mech := range []string{kafkax.SASLPlain, kafkax.SASLScramSHA256, kafkax.SASLScramSHA512} {
		t.Run(mech, func(t *testing.T) {
			brokers := fakeCluster(t, kfake.EnableSASL(), kfake.Superuser(mech, saslUser, saslPass))
			logs := &debugLog{}
			c := kafkax.Cluster{Brokers: brokers, SASL: kafkax.SASL{Mechanism: mech, User: saslUser, Password: saslPass},
				Extra: []kgo.Opt{kgo.WithLogger(logs)}}
			if err := c.Validate(); err != nil {
				t.Fatal(err)
			}
			roundTrip(t, c)
			if !strings.Contains(logs.String(), "sasl") {
				t.Fatalf("the debug log should show the SASL login (is the logger wired?):\n%s", logs)
			}
			if strings.Contains(logs.String(), saslPass) {
				t.Fatalf("franz-go's debug log shows the password:\n%s", logs)
			}
		})
	}
}

// A wrong password fails the first request with an error that says the
// login failed, for every mechanism, and never shows either password.
func TestSASLWrongPassword(t *testing.T) {
	for _, mech := range []string{kafkax.SASLPlain, kafkax.SASLScramSHA256, kafkax.SASLScramSHA512} {
		t.Run(mech, func(t *testing.T) {
			brokers := fakeCluster(t, kfake.EnableSASL(), kfake.Superuser(mech, saslUser, saslPass))
			const wrong = "wrong-Pa55word-abc"
			logs := &debugLog{}
			c := kafkax.Cluster{Brokers: brokers, SASL: kafkax.SASL{Mechanism: mech, User: saslUser, Password: wrong},
				Extra: []kgo.Opt{kgo.WithLogger(logs)}}
			err := ping(t, c)
			if err == nil {
				t.Fatal("a wrong password must fail")
			}
			msg := err.Error()
			var ce *kafkax.ConnectError
			if !errors.As(err, &ce) || !strings.Contains(msg, "refused the SASL login") || !strings.Contains(msg, "wrong user or password") ||
				!strings.Contains(msg, mech) || !strings.Contains(msg, saslUser) || !strings.Contains(msg, brokers[0]) {
				t.Fatalf("error should say the login failed, with mechanism and user: %q", msg)
			}
			for _, p := range []string{wrong, saslPass} {
				if strings.Contains(msg, p) || strings.Contains(logs.String(), p) {
					t.Fatalf("a password is shown: %q\n%s", msg, logs)
				}
			}
		})
	}
}

// ping is c.Ping with a deadline.
func ping(t *testing.T, c kafkax.Cluster) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	return c.Ping(ctx)
}

// TLS with the test CA: a round trip; the broker's name checked against
// server_name when the certificate has no IP; a client that does not trust
// the CA is refused with a certificate error.
func TestTLSRoundTrip(t *testing.T) {
	t.Run("ca_file", func(t *testing.T) {
		p := testenv.NewPKI(t, "kafka.test", true)
		brokers := fakeCluster(t, kfake.TLS(p.ServerTLS(false)))
		roundTrip(t, kafkax.Cluster{Brokers: brokers, TLS: loadTLS(t, kafkax.TLSFiles{CAFile: p.CAFile})})
	})
	t.Run("server_name", func(t *testing.T) {
		p := testenv.NewPKI(t, "kafka-bootstrap.kafka.svc", false)
		brokers := fakeCluster(t, kfake.TLS(p.ServerTLS(false)))
		roundTrip(t, kafkax.Cluster{Brokers: brokers, TLS: loadTLS(t, kafkax.TLSFiles{CAFile: p.CAFile, ServerName: "kafka-bootstrap.kafka.svc"})})
		err := ping(t, kafkax.Cluster{Brokers: brokers, TLS: loadTLS(t, kafkax.TLSFiles{CAFile: p.CAFile})})
		if err == nil || !strings.Contains(err.Error(), "certificate") {
			t.Fatalf("a certificate without the dialled host must be refused: %v", err)
		}
	})
	t.Run("untrusted", func(t *testing.T) {
		p := testenv.NewPKI(t, "kafka.test", true)
		other := testenv.NewPKI(t, "kafka.test", true)
		brokers := fakeCluster(t, kfake.TLS(p.ServerTLS(false)))
		err := ping(t, kafkax.Cluster{Brokers: brokers, TLS: loadTLS(t, kafkax.TLSFiles{CAFile: other.CAFile})})
		if err == nil || !strings.Contains(err.Error(), "TLS certificate is not trusted") || !strings.Contains(err.Error(), "unknown authority") {
			t.Fatalf("a broker signed by an unknown CA must be refused, saying so: %v", err)
		}
	})
	t.Run("insecure_skip_verify", func(t *testing.T) {
		p := testenv.NewPKI(t, "kafka.test", false)
		brokers := fakeCluster(t, kfake.TLS(p.ServerTLS(false)))
		roundTrip(t, kafkax.Cluster{Brokers: brokers, TLS: loadTLS(t, kafkax.TLSFiles{InsecureSkipVerify: true})})
	})
}

// mTLS: a broker that requires a client certificate refuses a client
// without one and serves one with the CA-signed certificate; together
// with SCRAM-SHA-512 it is a Strimzi TLS listener with a SCRAM user.
func TestMutualTLSAndSCRAM(t *testing.T) {
	p := testenv.NewPKI(t, "kafka.test", true)
	brokers := fakeCluster(t, kfake.TLS(p.ServerTLS(true)), kfake.EnableSASL(),
		kfake.Superuser(kafkax.SASLScramSHA512, saslUser, saslPass))
	auth := kafkax.SASL{Mechanism: kafkax.SASLScramSHA512, User: saslUser, Password: saslPass}
	err := ping(t, kafkax.Cluster{Brokers: brokers, SASL: auth, TLS: loadTLS(t, kafkax.TLSFiles{CAFile: p.CAFile})})
	if err == nil || !strings.Contains(err.Error(), "needs cert_file and key_file") {
		t.Fatalf("a client without a certificate must be refused by an mTLS broker, saying why: %v", err)
	}
	if err := ping(t, kafkax.Cluster{Brokers: brokers, TLS: loadTLS(t, kafkax.TLSFiles{CAFile: p.CAFile, CertFile: p.ClientCert, KeyFile: p.ClientKey})}); err == nil ||
		!strings.Contains(err.Error(), "SASL is required") {
		t.Fatalf("a client without SASL must be refused, saying SASL is missing: %v", err)
	}
	roundTrip(t, kafkax.Cluster{Brokers: brokers, SASL: auth,
		TLS: loadTLS(t, kafkax.TLSFiles{CAFile: p.CAFile, CertFile: p.ClientCert, KeyFile: p.ClientKey})})
}

// Every TLS file problem names its field and the path, never a key's bytes.
func TestTLSFilesLoadNamesTheField(t *testing.T) {
	p := testenv.NewPKI(t, "kafka.test", true)
	missing := filepath.Join(p.Dir, "missing.pem")
	notPEM := filepath.Join(p.Dir, "garbage.txt")
	if err := os.WriteFile(notPEM, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	keyPEM, err := os.ReadFile(p.ClientKey)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		key  string
		want string
		f    kafkax.TLSFiles
	}{
		{"ca_file", "no such file", kafkax.TLSFiles{CAFile: missing}},
		{"ca_file", "holds no PEM certificate", kafkax.TLSFiles{CAFile: notPEM}},
		{"cert_file", "must be set with key_file", kafkax.TLSFiles{KeyFile: p.ClientKey}},
		{"key_file", "must be set with cert_file", kafkax.TLSFiles{CertFile: p.ClientCert}},
		{"cert_file", "no such file", kafkax.TLSFiles{CertFile: missing, KeyFile: p.ClientKey}},
		{"key_file", "no such file", kafkax.TLSFiles{CertFile: p.ClientCert, KeyFile: missing}},
		{"cert_file", "are not a certificate and its key", kafkax.TLSFiles{CertFile: p.ClientKey, KeyFile: p.ClientCert}},
		{"cert_file", "are not a certificate and its key", kafkax.TLSFiles{CertFile: p.CAFile, KeyFile: p.ClientKey}},
	} {
		_, err := tc.f.Load()
		if err == nil {
			t.Errorf("%+v: accepted", tc.f)
			continue
		}
		if !slices.Contains(cfgerr.Keys(err), tc.key) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: want %s: ...%s..., got %v", tc.f, tc.key, tc.want, err)
		}
		if strings.Contains(err.Error(), strings.Split(string(keyPEM), "\n")[1]) {
			t.Errorf("%+v: the error shows the key's bytes: %v", tc.f, err)
		}
	}
	tc := loadTLS(t, kafkax.TLSFiles{CAFile: p.CAFile, CertFile: p.ClientCert, KeyFile: p.ClientKey, ServerName: "x"})
	if tc.RootCAs == nil || len(tc.Certificates) != 1 || tc.ServerName != "x" || tc.InsecureSkipVerify || tc.MinVersion != tls.VersionTLS12 {
		t.Fatalf("loaded config: %+v", tc)
	}
}

// Cluster.Validate names the SASL field at fault and never prints the
// password; neither does printing or logging the SASL.
func TestSASLValidateAndPrint(t *testing.T) {
	base := kafkax.Cluster{Brokers: []string{"k:9092"}}
	for _, tc := range []struct {
		key string
		s   kafkax.SASL
	}{
		{"sasl.mechanism", kafkax.SASL{Mechanism: "GSSAPI", User: "u", Password: saslPass}},
		{"sasl.mechanism", kafkax.SASL{Mechanism: "scram-sha-512", User: "u", Password: saslPass}},
		{"sasl.mechanism", kafkax.SASL{User: "u", Password: saslPass}},
		{"sasl.user", kafkax.SASL{Mechanism: kafkax.SASLPlain, Password: saslPass}},
		{"sasl.password", kafkax.SASL{Mechanism: kafkax.SASLScramSHA256, User: "u"}},
	} {
		c := base
		c.SASL = tc.s
		err := c.Validate()
		if !slices.Contains(cfgerr.Keys(err), tc.key) {
			t.Errorf("%v: want %s named, got %v", tc.s, tc.key, err)
		}
		if err != nil && strings.Contains(err.Error(), saslPass) {
			t.Errorf("error shows the password: %v", err)
		}
	}
	base.SASL = kafkax.SASL{Mechanism: kafkax.SASLScramSHA512, User: "u", Password: saslPass}
	if err := base.Validate(); err != nil {
		t.Fatal(err)
	}
	var logged bytes.Buffer
	slogJSON(&logged).Info("cluster", "sasl", base.SASL)
	for _, s := range []string{fmt.Sprint(base), fmt.Sprintf("%+v", base), fmt.Sprintf("%#v", base), fmt.Sprint(base.SASL), logged.String()} {
		if strings.Contains(s, saslPass) {
			t.Errorf("printed with the password: %s", s)
		}
	}
	if !strings.Contains(logged.String(), `"mechanism":"SCRAM-SHA-512"`) {
		t.Errorf("slog should still show the mechanism: %s", logged.String())
	}
}

func slogJSON(w *bytes.Buffer) *slog.Logger { return slog.New(slog.NewJSONHandler(w, nil)) }
