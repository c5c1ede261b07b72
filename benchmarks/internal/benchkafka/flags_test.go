package benchkafka

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/hyapp/roomflow/internal/config"
	"github.com/hyapp/roomflow/internal/testenv"
)

// -kafka-config connects a benchmark to a TLS + SCRAM-SHA-512 cluster
// with the benchmark's own topics; a bad file fails naming the key; with
// neither flag the benchmark gets an unsecured kfake.
func TestFlagsConnect(t *testing.T) {
	const pass = "bench-Pa55-31c7"
	p := testenv.NewPKI(t, "kafka.test", true)
	kc, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.TLS(p.ServerTLS(false)), kfake.EnableSASL(),
		kfake.Superuser("SCRAM-SHA-512", "bench", pass))
	if err != nil {
		t.Fatal(err)
	}
	defer kc.Close()
	dir := t.TempDir()
	write := func(name, body string) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	pw := write("pw", pass)
	cfgFile := func(pwFile string) string {
		return write("roomflow.yaml", fmt.Sprintf("kafka:\n  brokers: [\"unused:1\"]\n  tls:\n    enabled: true\n    ca_file: %s\n"+
			"  sasl:\n    mechanism: SCRAM-SHA-512\n    user: bench\n    password_file: %s\n", p.CAFile, pwFile))
	}
	connect := func(args ...string) (config.KafkaConfig, func(), error) {
		fs := flag.NewFlagSet("bench", flag.ContinueOnError)
		f := RegisterFlags(fs, "kfake")
		if err := fs.Parse(args); err != nil {
			t.Fatal(err)
		}
		base := config.Default().Kafka
		base.Topics = base.Topics.WithPrefix("bench.")
		return f.Connect(base, Options{Brokers: 1})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	k, stop, err := connect("-kafka-config", cfgFile(pw), "-brokers", kc.ListenAddrs()[0])
	if err != nil {
		t.Fatal(err)
	}
	stop()
	if !strings.HasPrefix(k.Topics.RoomEvents, "bench.") || k.Brokers[0] != kc.ListenAddrs()[0] {
		t.Fatalf("the benchmark's topics and -brokers must be kept: %v %v", k.Topics.RoomEvents, k.Brokers)
	}
	if err := k.Cluster(nil, nil).Ping(ctx); err != nil {
		t.Fatalf("secured connection: %v", err)
	}
	if got := Describe(k); got != fmt.Sprintf("[%s] TLS SASL SCRAM-SHA-512", kc.ListenAddrs()[0]) || strings.Contains(got, pass) {
		t.Fatalf("describe: %q", got)
	}

	if _, _, err := connect("-kafka-config", cfgFile(filepath.Join(dir, "missing"))); err == nil ||
		!strings.Contains(err.Error(), "kafka.sasl.password_file") {
		t.Fatalf("a missing password file must fail naming the key: %v", err)
	}

	k, stop, err = connect()
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	if k.TLS.Enabled || k.SASL.Mechanism != "" {
		t.Fatalf("kfake runs unsecured: %+v", k)
	}
	if err := k.Cluster(nil, nil).Ping(ctx); err != nil {
		t.Fatalf("kfake: %v", err)
	}
}
