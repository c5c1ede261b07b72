package command

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/hyapp/roomflow/internal/testenv"
)

// A Strimzi-style secured cluster (TLS listener with the cluster CA, a
// SCRAM-SHA-512 user) through the CLI: `roomflow topics` (the release
// step) creates the topics over it, a wrong password stops it with an
// error that says so and never shows a password, a missing password file
// stops it before it connects, and `roomflow config` never prints the
// password.
func TestConfigSecuredKafka(t *testing.T) {
	const user, pass = "roomflow", "Scram-Pa55-4e1d"
	p := testenv.NewPKI(t, "kafka.test", true)
	kc, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.TLS(p.ServerTLS(false)), kfake.EnableSASL(),
		kfake.Superuser("SCRAM-SHA-512", user, pass))
	if err != nil {
		t.Fatal(err)
	}
	defer kc.Close()
	dir := t.TempDir()
	pwFile := filepath.Join(dir, "password")
	if err := os.WriteFile(pwFile, []byte(pass+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := func(passwordFile string) string {
		return fmt.Sprintf("log:\n  level: error\nkafka:\n  brokers: [%q]\n  partitions: 1\n  tls:\n    enabled: true\n    ca_file: %s\n"+
			"  sasl:\n    mechanism: SCRAM-SHA-512\n    user: %s\n    password_file: %q\n", kc.ListenAddrs()[0], p.CAFile, user, passwordFile)
	}

	out, err := runCLI(t, cfg(pwFile), "topics")
	if err != nil || !strings.Contains(out, "hyapp.room.events.v1") {
		t.Fatalf("topics over TLS + SCRAM-SHA-512: %v\n%s", err, out)
	}

	_, err = runCLI(t, cfg(filepath.Join(dir, "missing")), "topics")
	if err == nil || !strings.Contains(err.Error(), "config: kafka.sasl.password_file: cannot read") {
		t.Fatalf("a missing password file must stop the command naming the key: %v", err)
	}

	const wrong = "Wrong-Pa55-77aa"
	t.Setenv("ROOMFLOW_KAFKA_SASL_PASSWORD", wrong)
	_, err = runCLI(t, cfg(pwFile), "topics")
	if err == nil || !strings.Contains(err.Error(), `refused the SASL login of user "roomflow"`) {
		t.Fatalf("a wrong password must fail saying the login was refused: %v", err)
	}
	if strings.Contains(err.Error(), wrong) || strings.Contains(err.Error(), pass) {
		t.Fatalf("the error shows a password: %v", err)
	}

	out, err = runCLI(t, cfg(pwFile), "config")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(out, wrong) || strings.Contains(out, pass) || !strings.Contains(out, "password_file: "+pwFile) {
		t.Fatalf("roomflow config must show the password file, never a password:\n%s", out)
	}
}
