package deploy

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hyapp/roomflow/cmd/roomflow/command"
	"github.com/hyapp/roomflow/internal/testenv"
)

// writeConfig writes cfgYAML to a file of the test's and returns its path.
func writeConfig(t *testing.T, cfgYAML string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "roomflow.yaml")
	if err := os.WriteFile(p, []byte(cfgYAML), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// kafkaYAML is the kafka section of a config on k: its brokers and per-test
// topic names, with the given partition count.
func kafkaYAML(k *testenv.Kafka, partitions int) string {
	var b strings.Builder
	b.WriteString("kafka:\n  brokers: [\"" + strings.Join(k.Brokers, "\",\"") + "\"]\n")
	b.WriteString("  partitions: " + strconv.Itoa(partitions) + "\n  topics:\n")
	for _, s := range k.Config.Topics.List() {
		b.WriteString("    " + s.Key + ": " + s.Name + "\n")
	}
	return b.String()
}

// runCommand runs `roomflow --config cfgPath args...` in-process in the
// background; stop cancels it and returns its error.
func runCommand(t *testing.T, cfgPath string, args ...string) (stop func() error, out *testenv.SyncBuffer) {
	t.Helper()
	out = &testenv.SyncBuffer{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		root := command.NewRoot()
		root.SetOut(out)
		root.SetErr(out)
		root.SetArgs(append([]string{"--config", cfgPath}, args...))
		done <- root.ExecuteContext(ctx)
	}()
	return func() error {
		cancel()
		select {
		case err := <-done:
			return err
		case <-time.After(30 * time.Second):
			t.Fatal("command did not stop on cancel")
			return nil
		}
	}, out
}
