package streams

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"slices"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/plain"
)

// The changelog reader reaches the brokers the way the session client
// does: same seeds, TLS, SASL, dialer and logger, its own client id.
func TestRestoreOptsCopyTheConnection(t *testing.T) {
	logger := kgo.BasicLogger(io.Discard, kgo.LogLevelWarn, nil)
	tlsCfg := &tls.Config{ServerName: "kafka.internal", MinVersion: tls.VersionTLS12}
	src := newClient(t, kgo.SeedBrokers("k1:9092", "k2:9092"), kgo.ClientID("roomflow-mic"), kgo.DialTLSConfig(tlsCfg),
		kgo.SASL(plain.Auth{User: "u", Pass: "p"}.AsMechanism()), kgo.WithLogger(logger))
	restore := newClient(t, restoreOpts(src)...)
	if got := restore.OptValue(kgo.SeedBrokers).([]string); !slices.Equal(got, []string{"k1:9092", "k2:9092"}) {
		t.Errorf("seed brokers %v", got)
	}
	if got := restore.OptValue(kgo.ClientID); got != "roomflow-mic-restore" {
		t.Errorf("client id %v, want roomflow-mic-restore", got)
	}
	if got, _ := restore.OptValue(kgo.DialTLSConfig).(*tls.Config); got == nil || got.ServerName != "kafka.internal" {
		t.Errorf("TLS config %v, want the session's", got)
	}
	if got := restore.OptValue(kgo.SASL).([]sasl.Mechanism); len(got) != 1 || got[0].Name() != "PLAIN" {
		t.Errorf("SASL %v, want the session's PLAIN", got)
	}
	if got := restore.OptValue(kgo.WithLogger); got != logger {
		t.Errorf("logger %v, want the session's", got)
	}

	dialed := false
	dial := func(context.Context, string, string) (net.Conn, error) {
		dialed = true
		return nil, errors.New("no network in this test")
	}
	restore = newClient(t, restoreOpts(newClient(t, kgo.SeedBrokers("k1:9092"), kgo.Dialer(dial)))...)
	got, _ := restore.OptValue(kgo.Dialer).(func(context.Context, string, string) (net.Conn, error))
	if got == nil {
		t.Fatal("no dialer, want the session's")
	}
	if _, _ = got(context.Background(), "tcp", "k1:9092"); !dialed {
		t.Error("the dialer is not the session's")
	}
}

func newClient(t *testing.T, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}
