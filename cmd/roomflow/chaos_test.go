package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"go.yaml.in/yaml/v3"
	"google.golang.org/protobuf/proto"

	"github.com/hyapp/roomflow/internal/config"
	"github.com/hyapp/roomflow/internal/testenv"
	"github.com/hyapp/roomflow/producers/loadgen"
	"github.com/hyapp/roomflow/schemas/roomv1"
	"github.com/hyapp/roomflow/schemas/userv1"
	"github.com/hyapp/roomflow/sinks/tencentim/imfake"
)

// chaosChildEnv names the config file of a chaos child process.
const chaosChildEnv = "ROOMFLOW_CHAOS_CHILD_CONFIG"

// TestHelperChaosChild is not a test: it is the body of a child process of
// TestPipelineChaosSIGKILL, running the real command tree (`roomflow run
// --config <file>`) until SIGTERM or SIGKILL. Without the environment
// variable it returns at once.
func TestHelperChaosChild(t *testing.T) {
	path := os.Getenv(chaosChildEnv)
	if path == "" {
		return
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	root := newRoot()
	root.SetArgs([]string{"run", "--config", path})
	if err := root.ExecuteContext(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "roomflow:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

// chaosChild is one `roomflow run` process of the chaos test.
type chaosChild struct {
	n    int
	cmd  *exec.Cmd
	log  string
	done chan struct{}
	err  error
}

func (c *chaosChild) exited() bool {
	select {
	case <-c.done:
		return true
	default:
		return false
	}
}

func (c *chaosChild) tail() string {
	b, _ := os.ReadFile(c.log)
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(b)
}

// TestPipelineChaosSIGKILL runs the whole pipeline (relay, room and mic
// processors, MySQL sink, publish-im) as real `roomflow run` processes
// while a loadgen scenario is written into room_outbox at a steady rate,
// SIGKILLs them at random moments (once while two of them run side by
// side, so rebalances and transactional fencing between live instances
// happen too), and then lets one run until the pipeline converges. Every
// stage must have acted exactly once: the MySQL facts equal the oracle,
// every room_outbox row is delivered, the fake Tencent IM accepted every
// message once, and the committed topics hold every room event and every
// closed session's UserMicSessionClosed exactly once.
func TestPipelineChaosSIGKILL(t *testing.T) {
	if os.Getenv(chaosChildEnv) != "" {
		return
	}
	session := 2500 * time.Millisecond
	k := testenv.NewKafka(t, testenv.FakeOpts(kfake.GroupMinSessionTimeout(500*time.Millisecond)))
	if k.Fake == nil {
		session = 6 * time.Second // a real broker's group.min.session.timeout.ms
	}
	m := testenv.NewMySQL(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	const secret = "chaos-secret-key-not-for-production"
	im := imfake.New(imfake.Config{SDKAppID: 1400000001, AdminIdentifier: "administrator", SecretKey: secret})
	imURL, stopIM, err := im.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer stopIM() //nolint:errcheck // test teardown

	sc := loadgen.DefaultScenario()
	sc.Seed = rand.Uint64()
	sc.Sessions, sc.Gifts, sc.Users, sc.Rooms = 600, 1200, 120, 40
	sc.EventIDPrefix = testenv.UniqueName(t)
	events, oracle := sc.Generate()
	if err := loadgen.SeedRule(ctx, m.DB, sc.Rule); err != nil {
		t.Fatal(err)
	}

	cfg := testenv.Config(t, k, m)
	cfg.AppCode = sc.AppCode
	cfg.Log.Level, cfg.Log.Format = "warn", "text"
	cfg.Kafka.SessionTimeout = config.Duration(session)
	cfg.IM.Endpoint, cfg.IM.SDKAppID, cfg.IM.SecretKey = imURL, 1400000001, secret
	cfg.Mic.CompensationInterval = config.Duration(24 * time.Hour) // the scenario lies in the past
	cfg.Relay.FailoverTimeout = config.Duration(2 * time.Second)
	cfg.Relay.PollInterval = config.Duration(20 * time.Millisecond)
	cfg.Shutdown.Timeout = config.Duration(3 * time.Second)
	cfg.IM.FastPathDelay = 0 // no room-service publishes by itself here
	cfg.OutboxWorker.ClaimGrace = config.Duration(2 * time.Second)
	cfg.OutboxWorker.LockTTL = config.Duration(5 * time.Second) // a killed child's claims expire soon
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	raw, err := yaml.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "roomflow.yaml")
	if err := os.WriteFile(cfgPath, raw, 0o600); err != nil {
		t.Fatal(err)
	}

	var all []*chaosChild
	start := func() *chaosChild {
		c := &chaosChild{n: len(all) + 1, log: filepath.Join(dir, fmt.Sprintf("child-%d.log", len(all)+1)), done: make(chan struct{})}
		f, err := os.Create(c.log)
		if err != nil {
			t.Fatal(err)
		}
		c.cmd = testenv.ChildCommand("^TestHelperChaosChild$", chaosChildEnv+"="+cfgPath)
		c.cmd.Stdout, c.cmd.Stderr = f, f
		if err := c.cmd.Start(); err != nil {
			t.Fatal(err)
		}
		go func() { c.err = c.cmd.Wait(); f.Close(); close(c.done) }()
		all = append(all, c)
		return c
	}
	t.Cleanup(func() {
		for _, c := range all {
			if !c.exited() {
				_ = c.cmd.Process.Kill()
				<-c.done
			}
		}
	})
	kills, selfExits := 0, 0
	kill := func(c *chaosChild) {
		err := c.cmd.Process.Signal(syscall.SIGKILL)
		<-c.done
		if err != nil { // it stopped by itself just before
			selfExits++
			t.Logf("child %d exited by itself (%v); log tail:\n%s", c.n, c.err, c.tail())
			return
		}
		kills++
	}
	// live drops (and logs) children that exited on their own: a child
	// whose transactional id was fenced by a newer one stops.
	live := func(cs []*chaosChild) []*chaosChild {
		var out []*chaosChild
		for _, c := range cs {
			if c.exited() {
				selfExits++
				t.Logf("child %d exited by itself (%v); log tail:\n%s", c.n, c.err, c.tail())
				continue
			}
			out = append(out, c)
		}
		return out
	}
	// settle waits until no consumer group is rebalancing. kfake (unlike a
	// Kafka broker) starts no session timer for a member whose JoinGroup
	// answer it could not deliver, so a process killed while its members
	// wait in their first join would stall those groups for the whole
	// rebalance timeout (60s) instead of kafka.session_timeout. Kills still
	// land at random points of processing, batches and transactions.
	groups := []string{cfg.Process.RoomGroup, cfg.Process.MicGroup, cfg.Sink.Group, cfg.OutboxWorker.Group}
	adm := kadm.NewClient(k.Client(t))
	settle := func() {
		if k.Fake == nil {
			return
		}
		for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
			dg, err := adm.DescribeGroups(ctx, groups...)
			if err != nil {
				continue
			}
			stable := 0
			for _, g := range dg {
				if g.Err == nil && g.State == "Stable" {
					stable++
				}
			}
			if stable == len(groups) {
				return
			}
		}
		t.Log("consumer groups did not settle within 20s; killing anyway")
	}
	sleep := func(min, max time.Duration) { time.Sleep(min + rand.N(max-min)) }

	t0 := time.Now()
	written := make(chan error, 1)
	go func() {
		// ~3.4k events over ~22s: the kills below all land while rows
		// are still arriving.
		_, err := loadgen.WriteOutbox(ctx, m.DB, events, 50, float64(len(events))/22)
		written <- err
	}()

	running := []*chaosChild{start()}
	target := 4 + rand.IntN(3) // 4..6 SIGKILLs
	doubled := false
	for kills < target {
		sleep(1500*time.Millisecond, 3500*time.Millisecond)
		if kills == 1 && !doubled {
			// Two live instances: the groups rebalance between them and
			// the newer one's transactional ids fence the older one's
			// (same host name, so the same ids), which then stops.
			doubled = true
			running = append(running, start())
			sleep(2*time.Second, 4*time.Second)
		}
		if running = live(running); len(running) == 0 {
			running = append(running, start())
			continue
		}
		settle()
		j := rand.IntN(len(running))
		kill(running[j])
		running = append(running[:j], running[j+1:]...)
		if len(running) == 0 {
			running = append(running, start())
		}
	}
	for len(running) > 1 {
		kill(running[0])
		running = running[1:]
	}
	final := running[0]
	if err := <-written; err != nil {
		t.Fatalf("write room_outbox: %v", err)
	}
	writtenAt := time.Since(t0)
	t.Logf("%d events (%d IM messages, %d mic sessions) written in %s; %d SIGKILLs, %d processes, %d stopped by themselves",
		len(events), oracle.IMMessages, len(oracle.Sessions), writtenAt.Round(time.Millisecond), kills, len(all), selfExits)

	var rep loadgen.Report
	var delivered int
	converged := false
	for deadline := time.Now().Add(75 * time.Second); time.Now().Before(deadline); time.Sleep(500 * time.Millisecond) {
		if final.exited() {
			t.Fatalf("the last child exited before convergence (%v); log tail:\n%s", final.err, final.tail())
		}
		if rep, err = loadgen.Compare(ctx, m.DB, sc.AppCode, oracle); err != nil {
			t.Fatal(err)
		}
		if err := m.DB.QueryRowContext(ctx, "SELECT COUNT(*) FROM room_outbox WHERE status = 'delivered'").Scan(&delivered); err != nil {
			t.Fatal(err)
		}
		if rep.OK() && delivered == len(events) && im.Stats().Accepted >= oracle.IMMessages {
			converged = true
			break
		}
		// ROOMFLOW_CHAOS_PROGRESS=1 logs every step: which stage lags.
		if os.Getenv("ROOMFLOW_CHAOS_PROGRESS") != "" {
			var statuses string
			_ = m.DB.QueryRowContext(ctx, "SELECT GROUP_CONCAT(CONCAT(status, ':', n)) FROM (SELECT status, COUNT(*) n FROM room_outbox GROUP BY status) s").Scan(&statuses)
			var gs []string
			if lags, err := adm.Lag(ctx, groups...); err == nil {
				for _, g := range groups {
					l := lags[g]
					gs = append(gs, fmt.Sprintf("%s=%s/%d members/lag %d", g[len(g)-4:], l.State, len(l.Members), l.Lag.Total()))
				}
			}
			t.Logf("%s: %d diffs, %s, IM %d/%d %v", time.Since(t0).Round(time.Second), len(rep.Diffs), statuses, im.Stats().Accepted, oracle.IMMessages, gs)
		}
	}
	if !converged {
		t.Fatalf("no convergence: %d fact differences (first: %v), %d/%d rows delivered, IM %d/%d accepted; last child's log:\n%s",
			len(rep.Diffs), firstDiff(rep), delivered, len(events), im.Stats().Accepted, oracle.IMMessages, final.tail())
	}
	t.Logf("converged %s after the last write, %s after the first (kills: %d)",
		(time.Since(t0) - writtenAt).Round(time.Millisecond), time.Since(t0).Round(time.Millisecond), kills)

	// Stop the last child cleanly: no transaction stays open, so the
	// topics can be read read_committed to their end.
	if err := final.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-final.done:
		if final.err != nil {
			t.Errorf("last child on SIGTERM: %v; log tail:\n%s", final.err, final.tail())
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("last child did not stop within 20s of SIGTERM; log tail:\n%s", final.tail())
	}

	// MySQL facts again, now that nothing runs.
	if rep, err = loadgen.Compare(ctx, m.DB, sc.AppCode, oracle); err != nil || !rep.OK() {
		t.Fatalf("facts after stop: %v %d differences (first: %v)", err, len(rep.Diffs), firstDiff(rep))
	}
	if rep.LifetimeRows == 0 || rep.DailyRows == 0 || rep.PoolRows == 0 {
		t.Fatalf("facts compared nothing: %+v", rep)
	}
	var rows, notDelivered int
	if err := m.DB.QueryRowContext(ctx, "SELECT COUNT(*), COALESCE(SUM(status <> 'delivered'), 0) FROM room_outbox").Scan(&rows, &notDelivered); err != nil {
		t.Fatal(err)
	}
	if rows != len(events) || notDelivered != 0 {
		t.Errorf("room_outbox: %d rows, %d not delivered; want %d rows all delivered", rows, notDelivered, len(events))
	}

	// Tencent IM: each message accepted exactly once.
	byEvent := im.AcceptedByEvent()
	if len(byEvent) != oracle.IMMessages {
		t.Errorf("IM accepted %d distinct events, want %d", len(byEvent), oracle.IMMessages)
	}
	for id, n := range byEvent {
		if n != 1 {
			t.Errorf("IM accepted event %s %d times", id, n)
		}
	}
	if st := im.Stats(); st.Accepted != oracle.IMMessages {
		t.Errorf("IM accepted %d messages, want %d (stats %+v)", st.Accepted, oracle.IMMessages, st)
	}

	// The committed room events: every event exactly once.
	want := map[string]bool{}
	for _, e := range events {
		want[e.Envelope.EventId] = true
	}
	seen := map[string]int{}
	for _, r := range k.DrainCommitted(t, cfg.Kafka.Topics.RoomEvents) {
		var env roomv1.EventEnvelope
		if err := proto.Unmarshal(r.Value, &env); err != nil {
			t.Fatalf("room event at %s/%d@%d: %v", r.Topic, r.Partition, r.Offset, err)
		}
		seen[env.EventId]++
	}
	checkOnce(t, "room events topic", seen, want)

	// The public session-closed topic: one UserMicSessionClosed per closed
	// session of the oracle.
	want = map[string]bool{}
	for _, s := range oracle.Sessions {
		want[s.ID] = true
	}
	if len(want) == 0 {
		t.Fatal("the oracle closed no session")
	}
	seen = map[string]int{}
	for _, r := range k.DrainCommitted(t, cfg.Kafka.Topics.MicSessionClosed) {
		var c userv1.UserMicSessionClosed
		if err := proto.Unmarshal(r.Value, &c); err != nil {
			t.Fatalf("session closed at %s/%d@%d: %v", r.Topic, r.Partition, r.Offset, err)
		}
		seen[c.MicSessionId]++
	}
	checkOnce(t, "mic_session_closed topic", seen, want)
}

// checkOnce fails the test unless seen counts every id of want exactly
// once and nothing else.
func checkOnce(t *testing.T, what string, seen map[string]int, want map[string]bool) {
	t.Helper()
	var bad []string
	for id, n := range seen {
		if n != 1 || !want[id] {
			bad = append(bad, fmt.Sprintf("%s x%d (expected: %v)", id, n, want[id]))
		}
	}
	for id := range want {
		if seen[id] == 0 {
			bad = append(bad, id+" missing")
		}
	}
	if len(bad) > 0 {
		if len(bad) > 10 {
			bad = append(bad[:10], fmt.Sprintf("... %d more", len(bad)-10))
		}
		t.Errorf("%s: %d ids of %d not exactly once: %s", what, len(bad), len(want), strings.Join(bad, "; "))
	}
}
