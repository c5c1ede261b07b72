package command

import (
	"errors"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/hyapp/roomflow/internal/cfgerr"
	"github.com/hyapp/roomflow/internal/testenv"
)

// TestTotalsBootstrapUpgrade is the upgrade with history through the
// commands: the pipeline runs without the marker (no totals published),
// `totals bootstrap` refuses beside the running mic processor, then, with
// it stopped, seeds the totals from the facts; the processor publishes on
// from there and `roomflow verify` finds the totals equal to the facts.
func TestTotalsBootstrapUpgrade(t *testing.T) {
	k := testenv.NewKafka(t, testenv.Partitions(3))
	m := testenv.NewMySQL(t)
	cfg := "mysql:\n  dsn: \"" + m.DSN + "\"\nlog:\n  level: error\nmetrics:\n  addr: \"\"\napi:\n  addr: \"\"\n  app_addr: \"\"\n  grpc_addr: \"\"\n" +
		k.ConfigYAML(3) + "sink:\n  group: " + testenv.UniqueName(t) + "-sink\n"
	p := testenv.WriteConfig(t, cfg)
	loadgen := func(prefix string) {
		t.Helper()
		if out, err := runCLI(t, cfg, "loadgen", "--to", "kafka", "--sessions", "60", "--gifts", "10", "--users", "25", "--id-prefix", prefix); err != nil {
			t.Fatalf("loadgen: %v\n%s", err, out)
		}
	}
	verify := func() (string, error) { return runCLI(t, cfg, "verify", "--idle", "1s") }
	var usage *cfgerr.UsageError
	if _, err := runCLI(t, cfg, "totals", "bootstrap", "--batch-size", "0"); !errors.As(err, &usage) || !strings.Contains(err.Error(), "--batch-size") {
		t.Fatalf("--batch-size 0: %v, want a usage error naming it", err)
	}
	loadgen("before")
	stopProcess, pout := testenv.StartCommand(t, NewRoot, p, "process")
	stopSink, sout := testenv.StartCommand(t, NewRoot, p, "sink")
	testenv.Eventually(t, 90*time.Second, "verify to pass on the pipeline's facts", func() bool {
		_, err := verify()
		return err == nil
	})
	if out, _ := verify(); !strings.Contains(out, "0 lifetime totals") {
		t.Fatalf("totals published before the bootstrap:\n%s", out)
	}
	if out, err := runCLI(t, cfg, "totals", "bootstrap"); err == nil || !strings.Contains(err.Error(), "process.mic_group") {
		t.Fatalf("bootstrap beside the running processor: %v\n%s", err, out)
	}
	if err := stopProcess(); err != nil {
		t.Fatalf("process: %v\n%s", err, pout.String())
	}
	out, err := runCLI(t, cfg, "totals", "bootstrap")
	if err != nil || !regexp.MustCompile(`totals bootstrap: [1-9][0-9]* users`).MatchString(out) {
		t.Fatalf("bootstrap: %v\n%s", err, out)
	}
	stopProcess, pout = testenv.StartCommand(t, NewRoot, p, "process")
	loadgen("after")
	testenv.Eventually(t, 90*time.Second, "verify to pass after the bootstrap", func() bool {
		out, err = verify()
		if err != nil {
			return false
		}
		// every user with history has its total
		mt := regexp.MustCompile(`: (\d+) lifetime totals \((\d+) user_mic_lifetime_stats rows\)`).FindStringSubmatch(out)
		return mt != nil && mt[1] == mt[2] && mt[1] != "0"
	})
	if err := stopProcess(); err != nil {
		t.Fatalf("process: %v\n%s", err, pout.String())
	}
	if err := stopSink(); err != nil {
		t.Fatalf("sink: %v\n%s", err, sout.String())
	}
}
