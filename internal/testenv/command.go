package testenv

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"
)

// WriteConfig writes cfgYAML to a file of the test's and returns its path.
func WriteConfig(t testing.TB, cfgYAML string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "roomflow.yaml")
	if err := os.WriteFile(p, []byte(cfgYAML), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// ConfigYAML is the kafka section of a roomflow config on k: its brokers
// and per-test topic names, with the given partition count.
func (k *Kafka) ConfigYAML(partitions int) string {
	var b strings.Builder
	b.WriteString("kafka:\n  brokers: [\"" + strings.Join(k.Brokers, "\",\"") + "\"]\n")
	b.WriteString("  partitions: " + strconv.Itoa(partitions) + "\n  topics:\n")
	for _, s := range k.Config.Topics.List() {
		b.WriteString("    " + s.Key + ": " + s.Name + "\n")
	}
	return b.String()
}

// StartCommand runs `roomflow --config cfgPath args...` in-process in the
// background on the command tree newRoot builds; stop cancels it and
// returns its error.
func StartCommand(t testing.TB, newRoot func() *cobra.Command, cfgPath string, args ...string) (stop func() error, out *SyncBuffer) {
	t.Helper()
	out = &SyncBuffer{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		root := newRoot()
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
