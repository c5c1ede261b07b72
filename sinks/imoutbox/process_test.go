package imoutbox_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/hyapp/roomflow/internal/kafkax"
	"github.com/hyapp/roomflow/internal/mysqlx"
	"github.com/hyapp/roomflow/internal/testenv"
	"github.com/hyapp/roomflow/sinks/imoutbox"
	"github.com/hyapp/roomflow/sinks/tencentim"
	"github.com/hyapp/roomflow/sinks/tencentim/imfake"
)

// TestMain lets a test run publish-im in a child process (the test binary
// re-executed), so crashes are real SIGKILLs of a separate process.
func TestMain(m *testing.M) {
	if os.Getenv("IMOUTBOX_CHILD_CONFIG") != "" {
		os.Exit(runChild())
	}
	os.Exit(m.Run())
}

// childConfig is what a child publisher is built from: the test's config
// without its IM client's (the fake's credentials are constants).
type childConfig struct {
	DSN           string
	Service       imoutbox.ServiceConfig
	IMEndpoint    string
	FastPathDelay time.Duration
	Group, Topic  string
	Kafka         kafkax.Cluster
}

// runChild is `roomflow publish-im` in miniature: config, MySQL pool,
// publisher, SIGTERM, MySQL closed last.
func runChild() int {
	var cc childConfig
	if err := json.Unmarshal([]byte(os.Getenv("IMOUTBOX_CHILD_CONFIG")), &cc); err != nil {
		fmt.Fprintln(os.Stderr, "child config:", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	db, err := openDB(ctx, cc.DSN)
	if err != nil {
		fmt.Fprintln(os.Stderr, "child mysql:", err)
		return 2
	}
	defer db.Close()
	log := slog.New(slog.NewJSONHandler(os.Stderr, nil))
	cfg := imoutbox.Config{ServiceConfig: cc.Service, FastPathDelay: cc.FastPathDelay, Group: cc.Group, Topic: cc.Topic, Kafka: cc.Kafka,
		IM: tencentim.Config{Endpoint: cc.IMEndpoint, SDKAppID: testApp, SecretKey: testKey, AdminIdentifier: testAdmin}}
	cfg.Registerer, cfg.Logger, cfg.Kafka.Logger = prometheus.NewRegistry(), log, log
	p, err := imoutbox.NewPublisher(cfg, db)
	if err != nil {
		fmt.Fprintln(os.Stderr, "child publisher:", err)
		return 2
	}
	fmt.Fprintln(os.Stderr, "child running")
	if err := p.Run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "child run:", err)
		return 1
	}
	return 0
}

// openDB is mysqlx.Open with roomflow's pool defaults, on a DSN.
func openDB(ctx context.Context, dsn string) (*sql.DB, error) {
	dc, err := mysql.ParseDSN(dsn)
	if err != nil {
		return nil, err
	}
	mysqlx.Tune(dc)
	conn, err := mysql.NewConnector(dc)
	if err != nil {
		return nil, err
	}
	db := sql.OpenDB(conn)
	db.SetMaxOpenConns(16)
	db.SetMaxIdleConns(16)
	if err := db.PingContext(ctx); err != nil {
		db.Close()
		return nil, err
	}
	return db, nil
}

type child struct {
	cmd *exec.Cmd
	out *testenv.SyncBuffer
}

func (e *env) startChild() *child {
	e.t.Helper()
	raw, err := json.Marshal(childConfig{DSN: e.m.DSN, Service: e.cfg.ServiceConfig, IMEndpoint: e.cfg.IM.Endpoint,
		FastPathDelay: e.cfg.FastPathDelay, Group: e.cfg.Group, Topic: e.cfg.Topic, Kafka: e.cfg.Kafka})
	if err != nil {
		e.t.Fatal(err)
	}
	cmd := testenv.ChildCommand("^$", "IMOUTBOX_CHILD_CONFIG="+string(raw))
	out := &testenv.SyncBuffer{}
	cmd.Stderr, cmd.Stdout = out, out
	if err := cmd.Start(); err != nil {
		e.t.Fatal(err)
	}
	c := &child{cmd: cmd, out: out}
	e.t.Cleanup(func() { _ = cmd.Process.Kill(); _, _ = cmd.Process.Wait() })
	return c
}

// A publish-im process killed with SIGKILL in the middle of delivering,
// then restarted (same consumer group) and finally stopped with SIGTERM:
// every event reaches IM exactly once (resends of rows the dead process
// left delivering are absorbed by Random dedup, same Random and bytes),
// every row ends delivered, and the graceful stop exits 0 within
// publish_timeout plus shutdown.timeout.
func TestKill9AndRestart(t *testing.T) {
	e := newEnv(t, true)
	e.cfg.LockTTL = 2 * time.Second
	e.cfg.PublishTimeout = time.Second // under lock_ttl
	const n, rooms = 400, 20
	var evs []event
	for i := 0; i < n; i++ {
		evs = append(evs, gift(fmt.Sprintf("k9-%04d", i), fmt.Sprintf("r%02d", i%rooms), int64(i/rooms+1)))
	}
	raws := e.insert(0, evs...)
	e.fake.Inject(imfake.Fault{Delay: 5 * time.Millisecond}) // every answer a little slow: work is in flight at the kill
	e.produce(raws, evs)

	first := e.startChild()
	testenv.Eventually(t, 30*time.Second, "first process delivering", func() bool { return e.fake.Stats().Accepted >= n/4 })
	if err := first.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = first.cmd.Wait()
	afterKill := e.fake.Stats().Accepted
	if afterKill >= n {
		t.Fatalf("the kill came too late: %d accepted", afterKill)
	}

	second := e.startChild()
	testenv.Eventually(t, 60*time.Second, "every row delivered after restart", func() bool { return e.countStatus("delivered") == n })
	start := time.Now()
	if err := second.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := second.cmd.Wait(); err != nil {
		t.Fatalf("graceful stop: %v\n%s", err, second.out.String())
	}
	// Bounded by publish_timeout (in-flight sends) plus shutdown.timeout
	// (recording results, leaving a group whose rebalance may still wait
	// for the killed member's session to expire).
	if el := time.Since(start); el > e.cfg.PublishTimeout+e.cfg.DrainTimeout+2*time.Second {
		t.Fatalf("SIGTERM took %s", el)
	}

	// Oracle: the inserted events. Every request for an event carries the
	// same Random and bytes; exactly one was stored, any other was absorbed
	// as a duplicate or refused (a restart in the same second as the kill
	// can exceed the app limit: 60007, retried).
	acc := e.fake.AcceptedByEvent()
	firstSend := map[string]imfake.Request{}
	for _, r := range e.fake.Requests() {
		f, seen := firstSend[r.EventID]
		if !seen {
			firstSend[r.EventID] = r
			continue
		}
		if r.Random != f.Random || r.BodySHA != f.BodySHA {
			t.Fatalf("resend of %s differs: same Random %v, same body %v", r.EventID, r.Random == f.Random, r.BodySHA == f.BodySHA)
		}
		if r.Outcome != "duplicate" && r.Outcome != "accepted" && !strings.HasPrefix(r.Outcome, "error") {
			t.Fatalf("request for %s: %s", r.EventID, r.Outcome)
		}
	}
	for _, ev := range evs {
		if acc[ev.ID] != 1 {
			t.Fatalf("%s accepted %d times", ev.ID, acc[ev.ID])
		}
	}
	if len(acc) != n {
		t.Fatalf("%d events accepted, want %d", len(acc), n)
	}
	logs := first.out.String() + second.out.String()
	for _, secret := range []string{testKey, "usersig="} {
		if strings.Contains(logs, secret) {
			t.Fatalf("logs contain %q", secret)
		}
	}
	t.Logf("accepted before the kill: %d; duplicates absorbed: %d", afterKill, e.fake.Stats().Duplicates)
}
