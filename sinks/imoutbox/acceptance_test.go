package imoutbox_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hyapp/roomflow/internal/cfgerr"
	"github.com/hyapp/roomflow/internal/kafkax"
	"github.com/hyapp/roomflow/internal/testenv"
	"github.com/hyapp/roomflow/schemas/roomv1"
	"github.com/hyapp/roomflow/sinks/imoutbox"
	"github.com/hyapp/roomflow/sinks/tencentim"
	"github.com/hyapp/roomflow/sinks/tencentim/imfake"
)

// IM-1, IM-3 (acceptance rows 1-3): the synchronous IM publish failed, the
// command succeeded (room-service committed the row as pending), the row
// stays pending with retry_count 0, and the compensation worker delivers the
// same event_id and marks it delivered.
func TestSyncFailedRowIsPendingThenWorkerDelivers(t *testing.T) {
	e := newEnv(t, false)
	ev := gift("gift-1", "r1", 7)
	e.insert(time.Second, ev) // committed by room-service; its sync publish failed
	if r := e.row("gift-1"); r.Status != "pending" || r.RetryCount != 0 || r.LastError.Valid {
		t.Fatalf("after sync failure: %+v", r)
	}
	if err := e.service().ProcessPendingOutbox(context.Background()); err != nil {
		t.Fatal(err)
	}
	acc := e.fake.Accepted()
	if len(acc) != 1 || acc[0].EventID != "gift-1" || acc[0].GroupID != "room-r1" || acc[0].Priority != "High" ||
		acc[0].Random != tencentim.RandomFor("gift-1") || !strings.Contains(acc[0].Data, `"room_version":7`) {
		t.Fatalf("accepted %+v", acc)
	}
	if r := e.row("gift-1"); r.Status != "delivered" || r.LastError.Valid || r.RetryCount != 0 {
		t.Fatalf("after worker: %+v", r)
	}
}

// An envelope without app_code belongs to the configured app_code (the rule
// of every stage): its IM message names it, exactly like the message of the
// same event naming it itself.
func TestEmptyAppCodeIsTheConfiguredOne(t *testing.T) {
	e := newEnv(t, false)
	e.cfg.AppCode = "hyapp"
	named, omitted := gift("g-named", "r1", 1), gift("g-omitted", "r1", 1)
	omitted.NoAppCode = true
	e.insert(time.Second, named, omitted)
	if err := e.service().ProcessPendingOutbox(context.Background()); err != nil {
		t.Fatal(err)
	}
	data := map[string]map[string]any{}
	for _, a := range e.fake.Accepted() {
		var d map[string]any
		if err := json.Unmarshal([]byte(a.Data), &d); err != nil {
			t.Fatal(err)
		}
		data[a.EventID] = d
	}
	a, b := data["g-named"], data["g-omitted"]
	if len(data) != 2 || a["app_code"] != "hyapp" {
		t.Fatalf("accepted %v", data)
	}
	a["event_id"], b["event_id"], a["occurred_at_ms"], b["occurred_at_ms"] = nil, nil, nil, nil
	if !reflect.DeepEqual(a, b) {
		t.Fatalf("messages differ:\n named   %v\n omitted %v", a, b)
	}
}

// IM-3, IM-5 (acceptance rows 4-5): a failed publish makes the row retryable
// with retry_count+1 and last_error; the next round succeeds -> delivered.
func TestPublishFailureRetryableThenDelivered(t *testing.T) {
	e := newEnv(t, false)
	e.insert(time.Second, gift("g-fail", "r1", 1))
	e.fake.Inject(imfake.Fault{EventID: "g-fail", HTTPStatus: 502, Times: 1})
	s := e.service()
	if err := s.ProcessPendingOutbox(context.Background()); err != nil {
		t.Fatal(err)
	}
	r := e.row("g-fail")
	if r.Status != "retryable" || r.RetryCount != 1 || !r.LastError.Valid || !strings.Contains(r.LastError.String, "http") {
		t.Fatalf("after failure: %+v", r)
	}
	if len(e.fake.Accepted()) != 0 {
		t.Fatal("a 502 must not count as accepted")
	}
	if err := s.ProcessPendingOutbox(context.Background()); err != nil {
		t.Fatal(err)
	}
	if r := e.row("g-fail"); r.Status != "delivered" || r.RetryCount != 1 || r.LastError.Valid {
		t.Fatalf("after retry: %+v", r)
	}
	if n := e.fake.AcceptedByEvent()["g-fail"]; n != 1 {
		t.Fatalf("accepted %d times", n)
	}
}

// MsgFreqCtrl (OK answer, dropped) is not delivered; a permanent error
// (10010) is recorded with its code and retried (V1) or failed (opt-in).
func TestDropAndPermanentErrors(t *testing.T) {
	e := newEnv(t, false)
	e.insert(time.Second, gift("g-drop", "r1", 1), gift("g-gone", "gone", 1))
	e.fake.Inject(imfake.Fault{EventID: "g-drop", FreqCtrl: true, Times: 1})
	e.fake.DeleteGroup("room-gone")
	s := e.service()
	if err := s.ProcessPendingOutbox(context.Background()); err != nil {
		t.Fatal(err)
	}
	if r := e.row("g-drop"); r.Status != "retryable" || !strings.Contains(r.LastError.String, "MsgFreqCtrl") {
		t.Fatalf("dropped: %+v", r)
	}
	if r := e.row("g-gone"); r.Status != "retryable" || !strings.Contains(r.LastError.String, "permanent 10010") {
		t.Fatalf("permanent, V1: %+v", r)
	}
	e.cfg.MarkPermanentFailed = true
	if err := e.service().ProcessPendingOutbox(context.Background()); err != nil {
		t.Fatal(err)
	}
	if r := e.row("g-drop"); r.Status != "delivered" {
		t.Fatalf("drop retried: %+v", r)
	}
	if r := e.row("g-gone"); r.Status != "failed" || r.RetryCount != 2 {
		t.Fatalf("permanent, mark failed: %+v", r)
	}
}

// An oversized event is refused locally with 80002, recorded and counted,
// never sent; it is retried on the fixed interval (not in a hot loop).
func TestOversizedEvent(t *testing.T) {
	e := newEnv(t, false)
	big := event{ID: "big", Type: "RoomUserLeft", Room: "r1", Payload: &roomv1.RoomUserLeft{UserId: 1, Reason: strings.Repeat("x", 13000)}}
	e.insert(time.Second, big, gift("small", "r1", 2))
	s := e.service()
	for i := 0; i < 3; i++ {
		if err := s.ProcessPendingOutbox(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	r := e.row("big")
	if r.Status != "retryable" || r.RetryCount != 3 || !strings.Contains(r.LastError.String, "80002") {
		t.Fatalf("oversized: %+v", r)
	}
	if e.row("small").Status != "delivered" {
		t.Fatal("an oversized event must not block the batch")
	}
	for _, req := range e.fake.Requests() {
		if req.EventID == "big" {
			t.Fatal("oversized message was sent")
		}
	}
}

// IM-7 (acceptance row 6): a row room-service already marked delivered (sync
// publish succeeded) is neither scanned nor sent again by the fast path.
func TestAlreadyDeliveredNotSentAgain(t *testing.T) {
	e := newEnv(t, true)
	evs := []event{gift("sync-ok", "r1", 1), gift("sync-failed", "r1", 2)}
	raws := e.insert(time.Second, evs...)
	// room-service: sync publish of sync-ok succeeded -> best-effort mark.
	if _, err := e.db.Exec(`UPDATE room_outbox SET status='delivered' WHERE event_id='sync-ok'`); err != nil {
		t.Fatal(err)
	}
	rows, err := imoutbox.NewRepo(e.db).ClaimPending(context.Background(), "probe", 100, 0, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 1 || rows[0].EventID != "sync-failed" {
		t.Fatalf("scan claimed %+v", rows)
	}
	if err := imoutbox.NewRepo(e.db).Release(context.Background(), "probe", rows); err != nil {
		t.Fatal(err)
	}
	e.produce(raws, evs)
	reg, stop := e.publisher(fastOnly) // fast path only
	testenv.Eventually(t, 15*time.Second, "both events seen by the fast path", func() bool {
		return metric(t, reg, "roomflow_im_outbox_claims_total", map[string]string{"source": "fast", "result": "done"}) == 1 &&
			e.row("sync-failed").Status == "delivered"
	})
	stop()
	for _, req := range e.fake.Requests() {
		if req.EventID == "sync-ok" {
			t.Fatal("an already delivered event was sent again")
		}
	}
}

// IM-6 (acceptance row 8): RoomCreated, RoomHeatChanged and RoomRankChanged
// make no IM call and are marked delivered, on both paths.
func TestNonIMEventsMarkedDelivered(t *testing.T) {
	e := newEnv(t, true)
	evs := []event{
		{ID: "c1", Type: "RoomCreated", Room: "r1", Payload: &roomv1.RoomCreated{OwnerUserId: 1}},
		{ID: "h1", Type: "RoomHeatChanged", Room: "r1", Payload: &roomv1.RoomHeatChanged{Heat: 10, Delta: 1}},
		{ID: "k1", Type: "RoomRankChanged", Room: "r1", Payload: &roomv1.RoomRankChanged{RankType: "day", Rank: 1}},
	}
	raws := e.insert(time.Second, evs...)
	e.produce(raws, evs)
	_, stop := e.publisher(fastOnly) // fast path only
	testenv.Eventually(t, 15*time.Second, "no-op events delivered", func() bool { return e.countStatus("delivered") == 3 })
	stop()
	scanned := []event{{ID: "c2", Type: "RoomCreated", Room: "r2", Payload: &roomv1.RoomCreated{OwnerUserId: 2}}}
	e.insert(time.Second, scanned...)
	if err := e.service().ProcessPendingOutbox(context.Background()); err != nil {
		t.Fatal(err)
	}
	if e.row("c2").Status != "delivered" {
		t.Fatal("worker: no-op not delivered")
	}
	if n := len(e.fake.Requests()); n != 0 {
		t.Fatalf("%d IM calls for non-IM events", n)
	}
}

// IM-9 (acceptance row 7): after cancel no new batch is claimed; the send in
// flight is bounded by publish_timeout and its result is recorded.
func TestWorkerCancel(t *testing.T) {
	e := newEnv(t, false)
	e.cfg.PublishTimeout = 500 * time.Millisecond
	e.insert(time.Second, gift("slow", "r1", 1))
	e.fake.Inject(imfake.Fault{EventID: "slow", Delay: 10 * time.Second})
	s := e.service()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { s.RunOutboxWorker(ctx); close(done) }()
	testenv.Eventually(t, 5*time.Second, "slow claimed", func() bool { return e.row("slow").Status == "delivering" })
	time.Sleep(50 * time.Millisecond)
	start := time.Now()
	cancel()
	e.insert(time.Second, gift("after-cancel", "r1", 2))
	select {
	case <-done:
	case <-time.After(3 * time.Second):
		t.Fatal("worker did not stop")
	}
	if el := time.Since(start); el > e.cfg.PublishTimeout+2*time.Second {
		t.Fatalf("stopped after %s, publish_timeout is %s", el, e.cfg.PublishTimeout)
	}
	if r := e.row("slow"); r.Status != "retryable" || r.RetryCount != 1 || !strings.Contains(r.LastError.String, "timeout") {
		t.Fatalf("in-flight result not recorded: %+v", r)
	}
	time.Sleep(3 * e.cfg.PollInterval)
	if r := e.row("after-cancel"); r.Status != "pending" || r.WorkerID != "" {
		t.Fatalf("claimed after cancel: %+v", r)
	}
}

// A compensation round records each result as it ends: a send that hangs
// for publish_timeout does not hold back the delivered marks of the other
// rooms in the round (it used to record them all after its slowest send,
// which left them delivering, under a renewed claim, for publish_timeout).
func TestScanRecordsEachResultAsItEnds(t *testing.T) {
	e := newEnv(t, false)
	e.cfg.PublishTimeout = 10 * time.Second
	e.cfg.LockTTL = 11 * time.Second // over publish_timeout
	e.cfg.DrainTimeout = time.Second
	evs := []event{gift("hung", "r1", 1)}
	for i := 0; i < 5; i++ {
		evs = append(evs, gift(fmt.Sprintf("free-%d", i), fmt.Sprintf("o%d", i), 1))
	}
	e.insert(time.Second, evs...)
	e.fake.Inject(imfake.Fault{EventID: "hung", Delay: 30 * time.Second, Times: 1})
	s := e.service()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.ProcessPendingOutbox(ctx) }()
	testenv.Eventually(t, 20*time.Second, "other rooms marked delivered while r1's send hangs", func() bool {
		select {
		case err := <-done:
			t.Fatalf("the round ended (%v) before the other rooms' deliveries were recorded: hung %+v, %d delivered",
				err, e.row("hung"), e.countStatus("delivered"))
		default:
		}
		return e.countStatus("delivered") == 5 && e.row("hung").Status == "delivering"
	})
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("round: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("round did not end after cancel")
	}
	if r := e.row("hung"); r.Status != "delivering" || r.RetryCount != 0 {
		t.Fatalf("send cancelled at shutdown: %+v, want left delivering", r)
	}
	if got := e.countStatus("delivered"); got != 5 {
		t.Fatalf("%d delivered, want 5", got)
	}
}

// Rows left delivering by a crash are reclaimed after lock_until_ms and
// resent with the same Random and body, which the IM dedup absorbs.
func TestCrashBetweenSendAndMark(t *testing.T) {
	e := newEnv(t, false)
	e.cfg.LockTTL = 3 * time.Second // outlives the crashed round even on a loaded machine
	const n = 40
	var evs []event
	for i, id := range ids("crash", n) {
		evs = append(evs, gift(id, fmt.Sprintf("r%d", i%7), int64(i)))
	}
	e.insert(time.Second, evs...)
	crashed := e.service()
	crashed.SetAfterSend(func(string) error { return errors.New("crash") })
	if err := crashed.ProcessPendingOutbox(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := e.countStatus("delivering"); got != n {
		t.Fatalf("%d rows delivering after the crash, want %d", got, n)
	}
	// Before the lock expires nobody takes them over.
	s := e.service()
	if err := s.ProcessPendingOutbox(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := e.countStatus("delivering"); got != n {
		t.Fatalf("live claims stolen: %d delivering", got)
	}
	var lockUntil int64
	if err := e.db.QueryRow(`SELECT MAX(lock_until_ms) FROM room_outbox`).Scan(&lockUntil); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Until(time.UnixMilli(lockUntil)) + 50*time.Millisecond)
	if err := s.ProcessPendingOutbox(context.Background()); err != nil {
		t.Fatal(err)
	}
	// Oracle: every inserted event exactly once at IM, every row delivered,
	// every resend a duplicate with the first send's Random and bytes.
	acc := e.fake.AcceptedByEvent()
	first := map[string]imfake.Request{}
	dups := 0
	for _, r := range e.fake.Requests() {
		f, seen := first[r.EventID]
		if !seen {
			first[r.EventID] = r
			if r.Outcome != "accepted" {
				t.Fatalf("first send of %s: %s", r.EventID, r.Outcome)
			}
			continue
		}
		if r.Outcome != "duplicate" || r.Random != f.Random || r.BodySHA != f.BodySHA {
			t.Fatalf("resend of %s: outcome %s, same random %v, same body %v", r.EventID, r.Outcome, r.Random == f.Random, r.BodySHA == f.BodySHA)
		}
		dups++
	}
	for _, ev := range evs {
		if acc[ev.ID] != 1 {
			t.Fatalf("%s accepted %d times", ev.ID, acc[ev.ID])
		}
		if r := e.row(ev.ID); r.Status != "delivered" {
			t.Fatalf("%s: %+v", ev.ID, r)
		}
	}
	if len(acc) != n || dups != n {
		t.Fatalf("accepted %d events, %d duplicates; want %d and %d", len(acc), dups, n, n)
	}
}

// A connection error's last_error and logs contain neither the usersig nor
// the secret key.
func TestConnectionErrorHasNoSecrets(t *testing.T) {
	e := newEnv(t, false)
	e.cfg.IM.Endpoint = "http://127.0.0.1:1" // refused
	e.insert(time.Second, gift("conn", "r1", 1))
	if err := e.service().ProcessPendingOutbox(context.Background()); err != nil {
		t.Fatal(err)
	}
	r := e.row("conn")
	if r.Status != "retryable" || !strings.Contains(r.LastError.String, "transport") {
		t.Fatalf("%+v", r)
	}
	sig, _ := tencentim.GenUserSig(testApp, testKey, testAdmin, time.Now(), 24*time.Hour)
	for _, secret := range []string{testKey, sig[:24], "usersig=", "sdkappid="} {
		if strings.Contains(r.LastError.String, secret) || strings.Contains(e.logs.String(), secret) {
			t.Fatalf("secret %q leaked:\nlast_error=%s\nlogs=%s", secret, r.LastError.String, e.logs.String())
		}
	}
	if !strings.Contains(e.logs.String(), `"event_id":"conn"`) || !strings.Contains(e.logs.String(), `"node_id":"test-node"`) {
		t.Fatalf("log lacks fields: %s", e.logs.String())
	}
}

// IM-8's configuration rules: <= 0 falls back to defaults, unknown
// retry strategies fail at start, IM credentials are required when
// delivering (and only then). Each problem names its field.
func TestConfigRules(t *testing.T) {
	s, err := imoutbox.NewService(imoutbox.ServiceConfig{PollInterval: 0, BatchSize: -5, PublishTimeout: -time.Second}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if c := imoutbox.Settings(s); c.PollInterval != time.Second || c.BatchSize != 100 || c.PublishTimeout != 3*time.Second {
		t.Fatalf("defaults not applied: %+v", c)
	}
	// lock_ttl is compared with the publish_timeout in effect (3s).
	if err := (imoutbox.ServiceConfig{ClaimGrace: time.Second, LockTTL: 2 * time.Second, PublishTimeout: -1}).Validate(); !slices.Contains(cfgerr.Keys(err), "lock_ttl") {
		t.Fatalf("lock_ttl under the default publish_timeout: %v", err)
	}
	if _, err := imoutbox.NewService(imoutbox.ServiceConfig{RetryStrategy: "exponential"}, nil, nil); !slices.Contains(cfgerr.Keys(err), "retry_strategy") {
		t.Fatalf("service strategy: %v", err)
	}
	if _, err := imoutbox.NewService(imoutbox.ServiceConfig{RetryStrategy: "fixed_interval"}, nil, nil); err != nil {
		t.Fatal(err)
	}

	cfg := imoutbox.Config{Group: "g", Topic: "t", Kafka: kafkax.Cluster{Brokers: []string{testenv.ClosedAddr(t)}}}
	_, err = imoutbox.NewPublisher(cfg, nil)
	if !slices.Contains(cfgerr.Keys(err), "im.sdk_app_id") || !slices.Contains(cfgerr.Keys(err), "im.secret_key") {
		t.Fatalf("publisher without IM credentials: %v", err)
	}
	cfg.IM.SecretKey = testKey
	if _, err := imoutbox.NewPublisher(cfg, nil); err == nil || strings.Contains(err.Error(), testKey) {
		t.Fatalf("publisher without an sdk_app_id: %v", err)
	}
	// With delivery off, neither IM nor Kafka is needed nor checked.
	if _, err := imoutbox.NewPublisher(imoutbox.Config{DisableDelivery: true, IM: tencentim.Config{Endpoint: "ftp://x"}}, nil); err != nil {
		t.Fatalf("disabled publisher: %v", err)
	}
}

// Config.Validate names every invalid field: the service's, the fast
// path's, the cluster's under kafka. and the IM client's under im.
func TestConfigValidateNamesTheField(t *testing.T) {
	valid := func() imoutbox.Config {
		return imoutbox.Config{
			ServiceConfig: imoutbox.ServiceConfig{PublishTimeout: 3 * time.Second, ClaimGrace: 5 * time.Second, LockTTL: 30 * time.Second, DrainTimeout: 10 * time.Second},
			IM: tencentim.Config{Endpoint: "https://im.example", SDKAppID: testApp, AdminIdentifier: testAdmin, SecretKey: testKey,
				UserSigTTL: 24 * time.Hour, MaxCallsPerSecond: 200, MaxMessagesPerGroupPerSecond: 40, MaxMessageBytes: 12 << 10},
			FastPathDelay: 3 * time.Second, Group: "g", Topic: "t", Kafka: kafkax.Cluster{Brokers: []string{"k:9092"}},
		}
	}
	if err := valid().Validate(); err != nil {
		t.Fatalf("valid: %v", err)
	}
	cases := []struct {
		key string
		mut func(*imoutbox.Config)
	}{
		{"retry_strategy", func(c *imoutbox.Config) { c.RetryStrategy = "exponential" }},
		{"claim_grace", func(c *imoutbox.Config) { c.ClaimGrace = -1 }},
		{"claim_grace", func(c *imoutbox.Config) { c.ClaimGrace = time.Second }}, // < fast_path_delay
		{"lock_ttl", func(c *imoutbox.Config) { c.LockTTL = -1 }},
		{"lock_ttl", func(c *imoutbox.Config) { c.LockTTL = c.PublishTimeout }},
		{"lanes", func(c *imoutbox.Config) { c.Lanes = -1 }},
		{"drain_timeout", func(c *imoutbox.Config) { c.DrainTimeout = -1 }},
		{"failure_summary_interval", func(c *imoutbox.Config) { c.FailureSummaryInterval = -1 }},
		{"fast_path_delay", func(c *imoutbox.Config) { c.FastPathDelay = -1 }},
		{"fast_path_delay", func(c *imoutbox.Config) { c.FastPathDelay = time.Hour }},
		{"group", func(c *imoutbox.Config) { c.Group = "" }},
		{"topic", func(c *imoutbox.Config) { c.Topic = "" }},
		{"kafka.brokers", func(c *imoutbox.Config) { c.Kafka.Brokers = nil }},
		{"im.endpoint", func(c *imoutbox.Config) { c.IM.Endpoint = "ftp://x" }},
		{"im.sdk_app_id", func(c *imoutbox.Config) { c.IM.SDKAppID = 0 }},
		{"im.secret_key", func(c *imoutbox.Config) { c.IM.SecretKey = "" }},
		{"im.usersig_ttl", func(c *imoutbox.Config) { c.IM.UserSigTTL = time.Minute }},
		{"im.max_calls_per_second", func(c *imoutbox.Config) { c.IM.MaxCallsPerSecond = -1 }},
	}
	for _, tc := range cases {
		c := valid()
		tc.mut(&c)
		if err := c.Validate(); !slices.Contains(cfgerr.Keys(err), tc.key) {
			t.Errorf("%s: error does not name the field: %v", tc.key, err)
		}
	}
	// With delivery off, only the service's fields are checked.
	c := valid()
	c.DisableDelivery = true
	c.IM, c.Kafka, c.Group, c.Topic, c.FastPathDelay = tencentim.Config{}, kafkax.Cluster{}, "", "", time.Hour
	if err := c.Validate(); err != nil {
		t.Fatalf("disabled: %v", err)
	}
	c.LockTTL = -1
	if err := c.Validate(); !slices.Contains(cfgerr.Keys(err), "lock_ttl") {
		t.Fatalf("disabled, bad lock_ttl: %v", err)
	}
}

// Tencent stored the message but the answer was lost (gateway 502): the
// row is retryable, and the resend is absorbed by Random dedup.
func TestLostAnswerResendIsDeduplicated(t *testing.T) {
	e := newEnv(t, false)
	e.insert(time.Second, gift("lost", "r1", 1))
	e.fake.Inject(imfake.Fault{EventID: "lost", HTTPStatus: 502, AfterAccept: true, Times: 1})
	s := e.service()
	for i := 0; i < 2; i++ {
		if err := s.ProcessPendingOutbox(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	if r := e.row("lost"); r.Status != "delivered" || r.RetryCount != 1 {
		t.Fatalf("%+v", r)
	}
	st := e.fake.Stats()
	if e.fake.AcceptedByEvent()["lost"] != 1 || st.Duplicates != 1 {
		t.Fatalf("stats %+v", st)
	}
}
