package command

import (
	"strings"
	"testing"
	"time"

	"github.com/hyapp/roomflow/internal/testenv"
)

// TestRebuildRepairsVerify runs the pipeline's processors and sink (the
// commands) over a loadgen scenario until `roomflow verify` is clean,
// stops them, corrupts the mic facts and a stream-owned pool, and shows
// verify failing, rebuild refusing while a sink runs, then rebuild making
// verify clean again.
func TestRebuildRepairsVerify(t *testing.T) {
	k := testenv.NewKafka(t, testenv.Partitions(3))
	m := testenv.NewMySQL(t)
	cfg := "mysql:\n  dsn: \"" + m.DSN + "\"\nlog:\n  level: error\nmetrics:\n  addr: \"\"\napi:\n  addr: \"\"\n  app_addr: \"\"\n  grpc_addr: \"\"\n" +
		k.ConfigYAML(3) + "sink:\n  group: " + testenv.UniqueName(t) + "-sink\n"
	p := testenv.WriteConfig(t, cfg)
	if out, err := runCLI(t, cfg, "loadgen", "--to", "kafka", "--sessions", "60", "--gifts", "40", "--users", "25", "--id-prefix", "rb"); err != nil {
		t.Fatalf("loadgen: %v\n%s", err, out)
	}
	stopProcess, pout := testenv.StartCommand(t, NewRoot, p, "process")
	stopSink, sout := testenv.StartCommand(t, NewRoot, p, "sink")
	verify := func() (string, error) { return runCLI(t, cfg, "verify", "--idle", "1s") }
	testenv.Eventually(t, 90*time.Second, "verify to pass on the pipeline's facts", func() bool {
		_, err := verify()
		return err == nil
	})
	if _, err := runCLI(t, cfg, "rebuild", "--idle", "5s"); err == nil || !strings.Contains(err.Error(), "stop every roomflow sink first") {
		t.Fatalf("rebuild with a running sink: %v", err)
	}
	if err := stopSink(); err != nil {
		t.Fatalf("sink: %v\n%s", err, sout.String())
	}
	if err := stopProcess(); err != nil {
		t.Fatalf("process: %v\n%s", err, pout.String())
	}

	for _, q := range []string{
		"UPDATE user_mic_lifetime_stats SET mic_online_ms = mic_online_ms + 60000 ORDER BY user_id LIMIT 1",
		"DELETE FROM user_mic_daily_stats ORDER BY user_id, stat_date LIMIT 1",
		"UPDATE lucky_pools SET balance = balance - 7, total_in = total_in - 7 WHERE scope_type = 'platform'",
	} {
		if _, err := m.DB.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	out, err := verify()
	if err == nil || !strings.Contains(out, "user_mic_lifetime_stats") || !strings.Contains(out, "lucky_pools.total_in[platform/global]") {
		t.Fatalf("verify of the corrupted tables: %v\n%s", err, out)
	}
	out, err = runCLI(t, cfg, "rebuild", "--idle", "5s")
	if err != nil || !strings.Contains(out, "rebuilt lucky_pools: ") ||
		!strings.Contains(out, "DROP TABLE user_mic_sessions__old, user_mic_daily_stats__old, user_mic_lifetime_stats__old, lucky_pools__old;") {
		t.Fatalf("rebuild: %v\n%s", err, out)
	}
	if out, err := verify(); err != nil || !strings.Contains(out, ": 0 differences") {
		t.Fatalf("verify after the rebuild: %v\n%s", err, out)
	}
}
