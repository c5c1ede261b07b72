package imoutbox_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/hyapp/roomflow/internal/app"
	"github.com/hyapp/roomflow/internal/testenv"
	"github.com/hyapp/roomflow/sinks/imoutbox"
	"github.com/hyapp/roomflow/sinks/tencentim/imfake"
)

// SIGTERM on publish-im: consuming and claiming stop, the send in flight
// ends within publish_timeout and its result is recorded, claimed rows not
// yet sent are handed back (pending, no worker), and a restarted publisher
// delivers them through the compensation scan.
func TestPublisherShutdownAndRestart(t *testing.T) {
	e := newEnv(t, true)
	e.cfg.PublishTimeout = 2 * time.Second // the slow send is in flight at SIGTERM
	e.cfg.LockTTL = 5 * time.Second
	evs := []event{gift("slow", "r1", 1)}
	for i := 2; i <= 21; i++ {
		evs = append(evs, gift(fmt.Sprintf("behind-%02d", i), "r1", int64(i)))
	}
	for i := 0; i < 10; i++ {
		evs = append(evs, gift(fmt.Sprintf("other-%02d", i), fmt.Sprintf("o%d", i), 1))
	}
	raws := e.insert(0, evs...)
	e.fake.Inject(imfake.Fault{EventID: "slow", Delay: 30 * time.Second, Times: 1})
	e.produce(raws, evs)
	_, stop := e.publisher(fastOnly)
	testenv.Eventually(t, 20*time.Second, "other rooms delivered while r1 is stuck", func() bool {
		return e.countStatus("delivered") == 10 && e.row("slow").Status == "delivering"
	})
	time.Sleep(50 * time.Millisecond)
	start := time.Now()
	stop()
	if el := time.Since(start); el > e.cfg.PublishTimeout+3*time.Second {
		t.Fatalf("shutdown took %s (publish_timeout %s)", el, e.cfg.PublishTimeout)
	}
	if r := e.row("slow"); r.Status != "retryable" || r.RetryCount != 1 || !strings.Contains(r.LastError.String, "timeout") {
		t.Fatalf("in-flight result: %+v", r)
	}
	for i := 2; i <= 21; i++ {
		if r := e.row(fmt.Sprintf("behind-%02d", i)); r.Status != "pending" || r.WorkerID != "" || r.RetryCount != 0 {
			t.Fatalf("unsent row not handed back: %+v", r)
		}
	}
	// Restart: the compensation scan picks the handed-back rows up.
	_, stop2 := e.publisher(fastAndScan)
	testenv.Eventually(t, 20*time.Second, "everything delivered after restart", func() bool { return e.countStatus("delivered") == len(evs) })
	stop2()
	acc := e.fake.AcceptedByEvent()
	for _, ev := range evs {
		if acc[ev.ID] != 1 {
			t.Fatalf("%s accepted %d times", ev.ID, acc[ev.ID])
		}
	}
}

// IM-11: an envelope that does not decode stays in the table, the round
// reports the error and a metric counts it.
func TestEnvelopeDecodeFailure(t *testing.T) {
	e := newEnv(t, false)
	now := time.Now().Add(-time.Second).UnixMilli()
	if _, err := e.db.Exec(`INSERT INTO room_outbox (app_code, event_id, event_type, room_id, payload, occurred_at_ms, created_at_ms, updated_at_ms)
		VALUES ('hyapp', 'garbage', 'RoomGiftSent', 'r1', x'ffffffff', ?, ?, ?)`, now, now, now); err != nil {
		t.Fatal(err)
	}
	e.insert(time.Second, gift("fine", "r2", 1))
	reg := prometheus.NewRegistry()
	err := e.serviceOn(reg).ProcessPendingOutbox(context.Background())
	if err == nil || !strings.Contains(err.Error(), "decode") {
		t.Fatalf("round error: %v", err)
	}
	if r := e.row("garbage"); r.Status != "retryable" || !strings.Contains(r.LastError.String, "decode") {
		t.Fatalf("garbage row: %+v", r)
	}
	if e.row("fine").Status != "delivered" {
		t.Fatal("a decode failure must not stop the batch")
	}
	if v := metric(t, reg, "roomflow_im_outbox_decode_errors_total", nil); v != 1 {
		t.Fatalf("decode errors metric %v", v)
	}
}

// SIGTERM on publish-im under the app frame while a send hangs far beyond
// shutdown.timeout (publish_timeout 8s, shutdown.timeout 3s): /readyz
// answers 503 at once, the hung send is cancelled and its row left
// delivering (for lock expiry), the rows queued behind it are handed back,
// everything else is delivered, Run returns within shutdown.timeout, and
// MySQL is closed only after every worker ended (no "database is closed").
// Once with the fast path claiming every row, once with the compensation
// scan claiming them (the events not on Kafka yet): which one does is
// otherwise a race, and both must drain the same way.
func TestDrainUnderAppFrame(t *testing.T) {
	t.Run("fast path", func(t *testing.T) { testDrainUnderAppFrame(t, true) })
	t.Run("compensation scan", func(t *testing.T) { testDrainUnderAppFrame(t, false) })
}

func testDrainUnderAppFrame(t *testing.T, fast bool) {
	e := newEnv(t, true)
	e.cfg.PublishTimeout = 8 * time.Second
	e.cfg.LockTTL = 9 * time.Second
	// Sends are cancelled at 3/4 of it: the last quarter records the
	// hand-backs, which a loaded machine does not finish in 250ms.
	e.cfg.DrainTimeout = 3 * time.Second
	d := app.NewDeps(testenv.Config(t, e.k, e.m), e.logger())
	d.Config.Metrics.Addr = testenv.ClosedAddr(t)
	createdAgo := time.Second // past claim_grace: the scan claims at once
	if fast {
		e.cfg.ClaimGrace = time.Minute // the scan leaves fresh rows to the fast path
		createdAgo = 0
	}
	evs := []event{gift("hung", "r1", 1)}
	for i := 2; i <= 6; i++ {
		evs = append(evs, gift(fmt.Sprintf("queued-%d", i), "r1", int64(i)))
	}
	for i := 0; i < 5; i++ {
		evs = append(evs, gift(fmt.Sprintf("free-%d", i), fmt.Sprintf("o%d", i), 1))
	}
	raws := e.insert(createdAgo, evs...)
	e.fake.Inject(imfake.Fault{EventID: "hung", Delay: 30 * time.Second, Times: 1})
	if fast {
		e.produce(raws, evs)
	}

	spec := app.Spec{Name: "publish-im", New: func(ctx context.Context, d *app.Deps) (app.Component, error) {
		db, err := d.DB(ctx)
		if err != nil {
			return nil, err
		}
		cfg := e.cfg
		cfg.Registerer, cfg.Logger = d.Registry, d.Log
		cfg.Kafka.Metrics, cfg.Kafka.Logger = d.Registry, d.Log
		return imoutbox.NewPublisher(cfg, db)
	}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- app.Run(ctx, d, []app.Spec{spec}) }()
	readyz := func() int {
		resp, err := http.Get("http://" + d.Config.Metrics.Addr + "/readyz")
		if err != nil {
			return 0
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	testenv.Eventually(t, 20*time.Second, "other rooms delivered while r1 hangs", func() bool {
		return e.countStatus("delivered") == 5 && e.row("hung").Status == "delivering" && readyz() == http.StatusOK
	})
	start := time.Now()
	cancel()
	testenv.Eventually(t, 2*time.Second, "/readyz 503 while draining", func() bool { return readyz() == http.StatusServiceUnavailable })
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Run did not return")
	}
	if el := time.Since(start); el > e.cfg.DrainTimeout+3*time.Second {
		t.Fatalf("stop took %s, shutdown.timeout is %s", el, e.cfg.DrainTimeout)
	}
	time.Sleep(200 * time.Millisecond) // anything still running would hit the closed pool now
	if l := e.logs.String(); strings.Contains(l, "database is closed") {
		t.Fatalf("a worker ran without its database:\n%s", l)
	}
	if r := e.row("hung"); r.Status != "delivering" || r.RetryCount != 0 || r.WorkerID == "" {
		t.Fatalf("cancelled send: %+v, want delivering under its claim until lock_until_ms", r)
	}
	for i := 2; i <= 6; i++ {
		if r := e.row(fmt.Sprintf("queued-%d", i)); r.Status != "pending" || r.WorkerID != "" {
			t.Fatalf("row queued behind the hung send: %+v, want handed back", r)
		}
	}
	if got := e.countStatus("delivered"); got != 5 {
		t.Fatalf("%d delivered, want 5", got)
	}
	source := map[bool]string{true: "fast", false: "scan"}[fast]
	if n := metric(t, d.Registry, "roomflow_im_outbox_claims_total", map[string]string{"source": source, "result": "claimed"}); n != float64(len(evs)) {
		t.Fatalf("%s claimed %v rows, want all %d", source, n, len(evs))
	}
}
