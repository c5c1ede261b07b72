package kafkax

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
)

// TestCommitWatch: franz-go's silent-abort line sets Aborted until Reset,
// other info lines do not; warnings still reach the component's logger,
// info lines do not.
func TestCommitWatch(t *testing.T) {
	var buf bytes.Buffer
	w := Cluster{Logger: slog.New(slog.NewTextHandler(&buf, nil))}.NewCommitWatch("relay")
	w.Log(kgo.LogLevelInfo, "ending transaction", "commit", true)
	if w.Aborted() {
		t.Fatal("an ordinary info line counted as an abort")
	}
	w.Log(kgo.LogLevelInfo, silentAbort+"; issuing an abort to clear any server-side partition registrations", "transactional_id", "x")
	if !w.Aborted() {
		t.Fatal("franz-go's silent abort was not noticed")
	}
	w.Reset()
	if w.Aborted() {
		t.Fatal("Reset kept the abort")
	}
	w.Log(kgo.LogLevelWarn, "produce failed")
	out := buf.String()
	if !strings.Contains(out, "produce failed") || !strings.Contains(out, "component=relay") {
		t.Errorf("the warning did not reach the component's logger: %q", out)
	}
	if strings.Contains(out, "ending transaction") || strings.Contains(out, silentAbort) {
		t.Errorf("info lines reached the component's logger: %q", out)
	}
	Cluster{}.NewCommitWatch("relay").Log(kgo.LogLevelWarn, "no logger") // must not panic
}
