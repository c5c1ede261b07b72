package luckyoutbox_test

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/proto"

	"github.com/hyapp/roomflow/internal/cfgerr"
	"github.com/hyapp/roomflow/internal/kafkax"
	"github.com/hyapp/roomflow/internal/testenv"
	"github.com/hyapp/roomflow/schemas/activityv1"
	"github.com/hyapp/roomflow/schemas/envelope"
	"github.com/hyapp/roomflow/services/luckydraw"
	"github.com/hyapp/roomflow/services/luckydraw/luckyoutbox"
	"github.com/hyapp/roomflow/services/luckydraw/wallet/walletfake"
)

// A reward whose wallet fails is retried by Run with backoff until the
// wallet answers: granted once, with the wallet's receipt, one
// LuckyRewardPending per failed attempt and one LuckyRewardGranted, all
// produced to Kafka.
func TestPendingRewardEventuallyGranted(t *testing.T) {
	e := newEnv(t)
	reg := prometheus.NewRegistry()
	w := e.worker(e.config(reg))
	rewardID, drawID := e.seedReward(1, 70, 0)
	eventID := luckyoutbox.RewardCreditEventID(rewardID)
	_ = e.fake.SetFaults(walletfake.Faults{ErrorRate: 1})

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	testenv.Eventually(t, 10*time.Second, "two failed attempts", func() bool { return e.outbox(eventID).RetryCount >= 2 })
	// Run's first poll refreshed the backlog gauge: the reward was due.
	if v, ok := testenv.Metric(reg, "roomflow_lucky_outbox_backlog", "event_type", "reward_credit"); !ok || v < 1 {
		t.Fatalf("backlog gauge of reward_credit = %v (registered %v), want >= 1", v, ok)
	}
	if r := e.outbox(eventID); !r.LastError.Valid || r.LastError.String == "" || len(r.LastError.String) > 200 {
		t.Fatalf("last_error %q: want a short error", r.LastError.String)
	}
	_ = e.fake.SetFaults(walletfake.Faults{})
	testenv.Eventually(t, 10*time.Second, "reward granted", func() bool { st, _ := e.draw(drawID); return st == "granted" })
	evs := e.events(drawID)
	testenv.Eventually(t, 10*time.Second, "events produced", func() bool {
		var n int
		_ = e.db.QueryRow(`SELECT COUNT(*) FROM lucky_outbox WHERE event_type = 'activity_event' AND status <> 'done'`).Scan(&n)
		return n == 0
	})
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run = %v, want nil at cancel", err)
	}

	_, receipt := e.draw(drawID)
	if receipt != walletfake.ReceiptID(rewardID) {
		t.Fatalf("credit_receipt_id %q, want %q", receipt, walletfake.ReceiptID(rewardID))
	}
	r := e.outbox(eventID)
	if r.Status != "done" || r.RetryCount < 2 {
		t.Fatalf("reward_credit row %+v, want done after >= 2 retries", r)
	}
	if st := e.fake.Stats(); st.Credits != 1 || e.fake.Balances()[1001] != 70 {
		t.Fatalf("wallet %+v balances %v: want one credit of 70", st, e.fake.Balances())
	}
	want := []string{"LuckyRewardGranted:" + rewardID}
	for a := 1; a <= r.RetryCount; a++ {
		want = append(want, "LuckyRewardPending:"+rewardID+":"+string(rune('0'+a)))
	}
	slices.Sort(want)
	if !slices.Equal(evs, want) {
		t.Fatalf("events %v, want %v", evs, want)
	}
	recs := e.kafka.DrainCommitted(t, e.kafka.Config.Topics.LuckyEvents)
	if len(recs) != len(want) {
		t.Fatalf("%d records on the topic, want %d", len(recs), len(want))
	}
	for _, rec := range recs {
		if string(rec.Key) != "gift-1" || string(envelope.Header(rec, envelope.HeaderAppCode)) != app {
			t.Fatalf("record key %q app_code %q", rec.Key, envelope.Header(rec, envelope.HeaderAppCode))
		}
		if string(envelope.Header(rec, envelope.HeaderEventID)) == "LuckyRewardGranted:"+rewardID {
			var g activityv1.LuckyRewardGranted
			if err := proto.Unmarshal(rec.Value, &g); err != nil || g.GetCreditReceiptId() != receipt || g.GetRewardCoins() != 70 ||
				g.GetUserId() != 1001 || g.GetDrawId() != drawID || g.GetGiftId() != "gift-1" || g.GetRoomId() != "room-1" {
				t.Fatalf("granted event %v (%v)", &g, err)
			}
		}
	}
	if v, _ := testenv.Metric(reg, "roomflow_lucky_outbox_retries_total", "event_type", "reward_credit"); v < 2 {
		t.Fatalf("retries metric %v, want >= 2", v)
	}
	if v, _ := testenv.Metric(reg, "roomflow_lucky_outbox_wallet_call_seconds", "result", "error"); v < 2 {
		t.Fatalf("wallet call errors observed %v, want >= 2", v)
	}
}

// Lost answers: the wallet credits but the worker hears an error; the
// retry gets the same receipt, the user is paid once and the draw granted
// once.
func TestLostResponsesCreditOnce(t *testing.T) {
	e := newEnv(t)
	w := e.worker(e.config(nil))
	rewardID, drawID := e.seedReward(1, 30, 0)
	_ = e.fake.SetFaults(walletfake.Faults{LostRate: 1})
	runBatches(t, w, "two lost answers", func() bool { return e.fake.Stats().Lost >= 2 })
	if st, _ := e.draw(drawID); st != "pending" {
		t.Fatalf("reward_status %s while every answer is lost, want pending", st)
	}
	_ = e.fake.SetFaults(walletfake.Faults{})
	runBatches(t, w, "granted", func() bool { st, _ := e.draw(drawID); return st == "granted" })
	st := e.fake.Stats()
	if st.Credits != 1 || st.Repeats < 2 || e.fake.Balances()[1001] != 30 {
		t.Fatalf("wallet %+v balances %v: want 1 credit, the other calls repeats", st, e.fake.Balances())
	}
	if l := e.fake.Ledger()[rewardID]; l.Calls < 3 {
		t.Fatalf("ledger %+v: want >= 3 calls for the reward", l)
	}
	var granted int
	for _, id := range e.events(drawID) {
		if id == "LuckyRewardGranted:"+rewardID {
			granted++
		}
	}
	if granted != 1 {
		t.Fatalf("%d LuckyRewardGranted events, want 1", granted)
	}
}

// Two workers polling the same table never claim the same row: every
// reward is called exactly once (no repeat reaches the wallet).
func TestTwoWorkersNeverDoubleClaim(t *testing.T) {
	e := newEnv(t)
	const n = 150
	for i := range n {
		e.seedReward(i, 5, 0)
	}
	cfg := e.config(nil)
	cfg.BatchSize = 7
	a := e.worker(cfg)
	cfg.WorkerID = "w2"
	b := e.worker(cfg)
	var claimed [2]int
	var wg sync.WaitGroup
	for i, w := range []*luckyoutbox.Worker{a, b} {
		wg.Go(func() {
			for {
				k, err := w.ProcessBatch(context.Background())
				if err != nil {
					t.Errorf("ProcessBatch: %v", err)
					return
				}
				claimed[i] += k
				var left int
				_ = e.db.QueryRow(`SELECT COUNT(*) FROM lucky_draw_records WHERE reward_status <> 'granted'`).Scan(&left)
				if left == 0 {
					return
				}
			}
		})
	}
	wg.Wait()
	st := e.fake.Stats()
	if st.Calls != n || st.Credits != n || st.Repeats != 0 {
		t.Fatalf("wallet %+v: want %d calls, each a first credit", st, n)
	}
	if claimed[0] == 0 || claimed[1] == 0 {
		t.Logf("one worker claimed nothing (%v): the race was not exercised this run", claimed)
	}
	if claimed[0]+claimed[1] < n {
		t.Fatalf("claimed %v, want >= %d reward rows in all", claimed, n)
	}
}

// A processing row whose lock expired (a crashed worker) is claimed again;
// one whose lock holds is not.
func TestExpiredLockIsReclaimed(t *testing.T) {
	e := newEnv(t)
	w := e.worker(e.config(nil))
	now := time.Now().UnixMilli()
	deadReward, deadDraw := e.seedReward(1, 10, 0)
	liveReward, liveDraw := e.seedReward(2, 10, 0)
	for id, lock := range map[string]int64{deadReward: now - 1, liveReward: now + 60_000} {
		if _, err := e.db.Exec(`UPDATE lucky_outbox SET status = 'processing', worker_id = 'crashed', lock_until_ms = ? WHERE event_id = ?`,
			lock, luckyoutbox.RewardCreditEventID(id)); err != nil {
			t.Fatal(err)
		}
	}
	runBatches(t, w, "the expired claim granted", func() bool { st, _ := e.draw(deadDraw); return st == "granted" })
	if st, _ := e.draw(liveDraw); st != "pending" {
		t.Fatalf("reward under a live lock is %s, want pending", st)
	}
	if r := e.outbox(luckyoutbox.RewardCreditEventID(liveReward)); r.Status != "processing" || r.WorkerID != "crashed" {
		t.Fatalf("live claim %+v was taken over", r)
	}
	if _, ok := e.fake.Ledger()[liveReward]; ok {
		t.Fatal("the reward under a live lock was credited")
	}
}

// MaxRetries failures make the reward failed (row, draw, metric, a final
// LuckyRewardPending with failed=true); RetryFailed re-drives it to granted.
func TestMaxRetriesThenRetryFailed(t *testing.T) {
	e := newEnv(t)
	reg := prometheus.NewRegistry()
	cfg := e.config(reg)
	cfg.MaxRetries = 3
	w := e.worker(cfg)
	rewardID, drawID := e.seedReward(1, 40, 0)
	eventID := luckyoutbox.RewardCreditEventID(rewardID)
	_ = e.fake.SetFaults(walletfake.Faults{ErrorRate: 1})
	runBatches(t, w, "reward failed", func() bool { return e.outbox(eventID).Status == "failed" })
	if r := e.outbox(eventID); r.RetryCount != 3 {
		t.Fatalf("failed row %+v, want retry_count 3", r)
	}
	if st, _ := e.draw(drawID); st != "failed" {
		t.Fatalf("reward_status %s, want failed", st)
	}
	if v, _ := testenv.Metric(reg, "roomflow_lucky_reward_failed_total"); v != 1 {
		t.Fatalf("roomflow_lucky_reward_failed_total = %v, want 1", v)
	}
	// No more calls once failed.
	calls := e.fake.Stats().Calls
	for range 3 {
		if _, err := w.ProcessBatch(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	if got := e.fake.Stats().Calls; got != calls || calls != 3 {
		t.Fatalf("wallet calls %d then %d, want 3 and no more", calls, got)
	}
	var payload []byte
	if err := e.db.QueryRow(`SELECT payload FROM lucky_outbox WHERE event_id = ?`, "LuckyRewardPending:"+rewardID+":3").Scan(&payload); err != nil {
		t.Fatal(err)
	}
	var p activityv1.LuckyRewardPending
	if err := proto.Unmarshal(payload, &p); err != nil || !p.GetFailed() || p.GetAttempt() != 3 || p.GetRetryReason() == "" {
		t.Fatalf("final pending event %v (%v), want failed=true attempt 3", &p, err)
	}
	// The admin re-drive: other apps' failures are not touched.
	admin, err := luckydraw.NewAdmin(e.db, luckydraw.AdminConfig{Operator: "test"})
	if err != nil {
		t.Fatal(err)
	}
	if n, err := admin.RetryFailedRewards(context.Background(), "other-app"); err != nil || n != 0 {
		t.Fatalf("RetryFailedRewards(other-app) = %d, %v", n, err)
	}
	if n, err := admin.RetryFailedRewards(context.Background(), app); err != nil || n != 1 {
		t.Fatalf("RetryFailedRewards = %d, %v; want 1", n, err)
	}
	if r := e.outbox(eventID); r.Status != "pending" || r.RetryCount != 0 {
		t.Fatalf("re-driven row %+v, want pending with retry_count 0", r)
	}
	if st, _ := e.draw(drawID); st != "pending" {
		t.Fatalf("re-driven reward_status %s, want pending", st)
	}
	_ = e.fake.SetFaults(walletfake.Faults{})
	runBatches(t, w, "re-driven reward granted", func() bool { st, _ := e.draw(drawID); return st == "granted" })
	if e.fake.Stats().Credits != 1 {
		t.Fatalf("wallet %+v, want 1 credit", e.fake.Stats())
	}
}

// While wallet_credit_dispatch is off nothing is called and no attempt is
// counted, by the worker or the synchronous credit; on again, the reward
// is granted.
func TestDispatchSwitchOff(t *testing.T) {
	e := newEnv(t)
	reg := prometheus.NewRegistry()
	var mu sync.Mutex
	on := false
	cfg := e.config(reg)
	cfg.DispatchEnabled = func(_ context.Context, appCode string) (bool, error) {
		if appCode != app {
			return false, errors.New("unexpected app_code " + appCode)
		}
		mu.Lock()
		defer mu.Unlock()
		return on, nil
	}
	w := e.worker(cfg)
	rewardID, drawID := e.seedReward(1, 40, 0)
	eventID := luckyoutbox.RewardCreditEventID(rewardID)
	before := time.Now().UnixMilli()
	n, err := w.ProcessBatch(context.Background())
	if err != nil || n != 1 {
		t.Fatalf("ProcessBatch = %d, %v; want the row claimed", n, err)
	}
	r := e.outbox(eventID)
	if r.Status != "pending" || r.RetryCount != 0 || r.WorkerID != "" || r.NextRetry < before+20 {
		t.Fatalf("row after a paused dispatch %+v: want pending, no attempt, due after the poll interval", r)
	}
	st, receipt, err := credit(w, "", rewardID)
	if err != nil || st != "pending" || receipt != "" {
		t.Fatalf("Credit while paused = %s, %q, %v; want pending", st, receipt, err)
	}
	if c := e.fake.Stats().Calls; c != 0 {
		t.Fatalf("%d wallet calls while dispatch is off", c)
	}
	if r := e.outbox(eventID); r.RetryCount != 0 || r.Status != "pending" {
		t.Fatalf("row %+v after a paused Credit", r)
	}
	if v, _ := testenv.Metric(reg, "roomflow_lucky_outbox_dispatch_paused_total"); v != 2 {
		t.Fatalf("paused metric %v, want 2", v)
	}
	mu.Lock()
	on = true
	mu.Unlock()
	runBatches(t, w, "granted once dispatch is on", func() bool { st, _ := e.draw(drawID); return st == "granted" })
}

// The synchronous credit: granted with the receipt, committed before it
// returns; asked again it answers the stored status; a failure leaves the
// reward pending with one attempt; an unknown reward is an error.
func TestSyncCredit(t *testing.T) {
	e := newEnv(t)
	w := e.worker(e.config(nil))
	future := time.Now().Add(time.Hour).UnixMilli()
	rewardID, drawID := e.seedReward(1, 25, future)
	st, receipt, err := credit(w, app, rewardID)
	if err != nil || st != "granted" || receipt != walletfake.ReceiptID(rewardID) {
		t.Fatalf("Credit = %s, %q, %v", st, receipt, err)
	}
	if dst, drc := e.draw(drawID); dst != "granted" || drc != receipt {
		t.Fatalf("draw %s %q after Credit returned", dst, drc)
	}
	if r := e.outbox(luckyoutbox.RewardCreditEventID(rewardID)); r.Status != "done" {
		t.Fatalf("row %+v, want done", r)
	}
	st, receipt2, err := credit(w, app, rewardID)
	if err != nil || st != "granted" || receipt2 != receipt || e.fake.Stats().Calls != 1 {
		t.Fatalf("second Credit = %s, %q, %v (wallet %+v): want the stored grant, no call", st, receipt2, err, e.fake.Stats())
	}

	failing, failingDraw := e.seedReward(2, 25, future)
	_ = e.fake.SetFaults(walletfake.Faults{TimeoutRate: 1})
	t0 := time.Now()
	st, receipt, err = credit(w, app, failing)
	if err != nil || st != "pending" || receipt != "" {
		t.Fatalf("Credit on a hanging wallet = %s, %q, %v; want pending", st, receipt, err)
	}
	if d := time.Since(t0); d > 2*time.Second {
		t.Fatalf("Credit took %s: wallet_credit_timeout does not bound it", d)
	}
	r := e.outbox(luckyoutbox.RewardCreditEventID(failing))
	if r.Status != "pending" || r.RetryCount != 1 || r.NextRetry > time.Now().Add(time.Second).UnixMilli() {
		t.Fatalf("row after a failed sync credit %+v: want pending, attempt 1, due within the first backoff", r)
	}
	if dst, _ := e.draw(failingDraw); dst != "pending" {
		t.Fatalf("draw %s, want pending", dst)
	}
	if _, _, err := credit(w, app, "no-such-reward"); !errors.Is(err, luckyoutbox.ErrUnknownReward) {
		t.Fatalf("unknown reward: %v, want ErrUnknownReward", err)
	}
}

// One batch's rewards are one group: each gets its own outcome in the
// order asked, a reward granted before answers its stored receipt without
// a wallet call, and an unknown one its error without failing the others.
func TestSyncCreditGroup(t *testing.T) {
	e := newEnv(t)
	w := e.worker(e.config(nil))
	future := time.Now().Add(time.Hour).UnixMilli()
	r1, d1 := e.seedReward(1, 10, future)
	r2, _ := e.seedReward(2, 20, future)
	r3, d3 := e.seedReward(3, 30, future)
	if st, _, err := credit(w, app, r2); err != nil || st != "granted" {
		t.Fatalf("first credit of %s = %s, %v", r2, st, err)
	}
	out := w.CreditRewards(context.Background(), app, []string{r1, r2, "no-such-reward", r3})
	if len(out) != 4 {
		t.Fatalf("%d outcomes for 4 rewards", len(out))
	}
	for i, r := range map[int]string{0: r1, 1: r2, 3: r3} {
		if o := out[i]; o.Err != nil || o.Status != "granted" || o.CreditReceiptID != walletfake.ReceiptID(r) {
			t.Fatalf("outcome %d (%s) = %+v; want granted with its receipt", i, r, o)
		}
	}
	if !errors.Is(out[2].Err, luckyoutbox.ErrUnknownReward) {
		t.Fatalf("unknown reward: %+v, want ErrUnknownReward", out[2])
	}
	for _, d := range []string{d1, d3} {
		if st, _ := e.draw(d); st != "granted" {
			t.Fatalf("draw %s %s after CreditRewards returned", d, st)
		}
	}
	if st := e.fake.Stats(); st.Calls != 3 || st.Credits != 3 {
		t.Fatalf("wallet %+v: want one call per reward, none for the one granted before", st)
	}
}

// The synchronous credit racing the worker over due rewards: every reward
// is called once, granted once, one LuckyRewardGranted each.
func TestSyncCreditVsWorkerRace(t *testing.T) {
	e := newEnv(t)
	const n = 40
	var rewards []string
	for i := range n {
		r, _ := e.seedReward(i, 3, 0)
		rewards = append(rewards, r)
	}
	cfg := e.config(nil)
	cfg.BatchSize = 5
	w := e.worker(cfg)
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			if _, err := w.ProcessBatch(context.Background()); err != nil {
				t.Errorf("ProcessBatch: %v", err)
				return
			}
			var left int
			_ = e.db.QueryRow(`SELECT COUNT(*) FROM lucky_draw_records WHERE reward_status <> 'granted'`).Scan(&left)
			if left == 0 {
				return
			}
		}
	})
	for _, r := range rewards {
		wg.Go(func() {
			st, _, err := credit(w, app, r)
			if err != nil || (st != "granted" && st != "pending") {
				t.Errorf("Credit(%s) = %s, %v", r, st, err)
			}
		})
	}
	wg.Wait()
	if st := e.fake.Stats(); st.Calls != n || st.Credits != n {
		t.Fatalf("wallet %+v: want %d calls, one per reward", st, n)
	}
	var granted int
	if err := e.db.QueryRow(`SELECT COUNT(*) FROM lucky_outbox WHERE event_id LIKE 'LuckyRewardGranted:%'`).Scan(&granted); err != nil || granted != n {
		t.Fatalf("%d LuckyRewardGranted rows (%v), want %d", granted, err, n)
	}
}

// activity_event rows reach the topic with the standard headers and the
// stored payload as is, keyed by kafka_key, and become done; a produce to a
// topic that does not exist is retried with backoff, never failed.
func TestActivityEventsReachKafka(t *testing.T) {
	e := newEnv(t)
	w := e.worker(e.config(nil))
	now := time.Now().UnixMilli()
	want := map[string][]byte{}
	for i, gift := range []string{"gift-a", "gift-b", "gift-a"} {
		id := "LuckyGiftDrawn:d" + string(rune('0'+i))
		payload, _ := proto.Marshal(&activityv1.LuckyGiftDrawn{EventId: id, AppCode: app, DrawId: "d", GiftId: gift, RewardCoins: int64(i)})
		want[id] = payload
		if _, err := e.db.Exec(`INSERT INTO lucky_outbox (event_id, app_code, event_type, message_type, aggregate_id, kafka_key, payload, status, next_retry_at_ms, created_at_ms, updated_at_ms)
			VALUES (?, ?, 'activity_event', 'LuckyGiftDrawn', 'd', ?, ?, 'pending', ?, ?, ?)`, id, app, gift, payload, now, now, now); err != nil {
			t.Fatal(err)
		}
	}
	if k, err := w.ProcessBatch(context.Background()); err != nil || k != 3 {
		t.Fatalf("ProcessBatch = %d, %v", k, err)
	}
	for id := range want {
		if r := e.outbox(id); r.Status != "done" {
			t.Fatalf("%s: %+v, want done", id, r)
		}
	}
	recs := e.kafka.DrainCommitted(t, e.kafka.Config.Topics.LuckyEvents)
	if len(recs) != 3 {
		t.Fatalf("%d records, want 3", len(recs))
	}
	for _, rec := range recs {
		id := string(envelope.Header(rec, envelope.HeaderEventID))
		var drawn activityv1.LuckyGiftDrawn
		_ = proto.Unmarshal(rec.Value, &drawn)
		if !bytes.Equal(rec.Value, want[id]) || string(rec.Key) != drawn.GetGiftId() ||
			string(envelope.Header(rec, envelope.HeaderEventType)) != "LuckyGiftDrawn" ||
			string(envelope.Header(rec, envelope.HeaderAppCode)) != app ||
			string(envelope.Header(rec, envelope.HeaderContentType)) != envelope.ContentType {
			t.Fatalf("record %s key %q headers %v", id, rec.Key, rec.Headers)
		}
		delete(want, id)
	}
	if len(want) != 0 {
		t.Fatalf("events never produced: %v", want)
	}

	// A topic that does not exist: the produce fails, the row is retried.
	cfg := e.config(nil)
	cfg.Topic = "no-such-topic"
	cfg.WorkerID = "w2"
	cfg.BatchSize = 1
	cfg.LockTTL = 2 * time.Second // the produce gives up after LockTTL/2
	cfg.Kafka = kafkax.Cluster{Brokers: e.kafka.Brokers}
	bad := e.worker(cfg)
	if _, err := e.db.Exec(`INSERT INTO lucky_outbox (event_id, app_code, event_type, message_type, aggregate_id, kafka_key, payload, status, next_retry_at_ms, created_at_ms, updated_at_ms)
		VALUES ('LuckyGiftDrawn:x', ?, 'activity_event', 'LuckyGiftDrawn', 'x', 'g', 'p', 'pending', 0, 0, 0)`, app); err != nil {
		t.Fatal(err)
	}
	if _, err := bad.ProcessBatch(context.Background()); err != nil {
		t.Fatal(err)
	}
	if r := e.outbox("LuckyGiftDrawn:x"); r.Status != "pending" || r.RetryCount != 1 || !r.LastError.Valid {
		t.Fatalf("row after a failed produce %+v: want pending, retry_count 1, last_error", r)
	}
}

func TestConfigValidate(t *testing.T) {
	ok := luckyoutbox.Config{Topic: "t", Kafka: kafkax.Cluster{Brokers: []string{"b:9092"}}}
	for _, tc := range []struct {
		name string
		edit func(*luckyoutbox.Config)
		keys []string
	}{
		{"defaults", func(*luckyoutbox.Config) {}, nil},
		{"no topic", func(c *luckyoutbox.Config) { c.Topic = "" }, []string{"topic"}},
		{"no brokers", func(c *luckyoutbox.Config) { c.Kafka = kafkax.Cluster{} }, []string{"kafka.brokers"}},
		{"negative", func(c *luckyoutbox.Config) { c.BatchSize, c.MaxRetries, c.PollInterval = -1, -1, -1 }, []string{"batch_size", "poll_interval", "max_retries"}},
		{"lease too short", func(c *luckyoutbox.Config) { c.LockTTL = time.Second }, []string{"lock_ttl"}},
		{"bad backoff", func(c *luckyoutbox.Config) { c.Backoff.Multiplier = 0.5 }, []string{"backoff.multiplier"}},
		{"long worker id", func(c *luckyoutbox.Config) { c.WorkerID = string(make([]byte, 65)) }, []string{"worker_id"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := ok
			tc.edit(&c)
			if got := cfgerr.Keys(c.Validate()); !slices.Equal(got, tc.keys) {
				t.Fatalf("keys %v, want %v (%v)", got, tc.keys, c.Validate())
			}
		})
	}
}

// The stuck-work gauges: the age of the oldest pending reward, and per
// lucky event message the age of the oldest event not yet published; the
// message types without a backlog are present at 0.
func TestOldestWorkGauges(t *testing.T) {
	e := newEnv(t)
	_ = e.fake.SetFaults(walletfake.Faults{ErrorRate: 1}) // the reward stays pending
	e.seedReward(1, 70, 0)
	created := time.Now().Add(-100 * time.Second).UnixMilli()
	if _, err := e.db.Exec(`INSERT INTO lucky_outbox (event_id, app_code, event_type, message_type, aggregate_id, kafka_key, payload, status, created_at_ms, updated_at_ms)
		VALUES ('LuckyGiftDrawn:old', ?, 'activity_event', 'LuckyGiftDrawn', 'old', 'gift-1', '', 'failed', ?, ?)`, app, created, created); err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	cfg := e.config(reg)
	cfg.Now = func() time.Time { return time.Now().Add(10 * time.Minute) }
	w := e.worker(cfg)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	testenv.Eventually(t, 10*time.Second, "the reward gauge", func() bool {
		v, _ := testenv.Metric(reg, "roomflow_lucky_reward_pending_oldest_seconds")
		return v >= 600
	})
	cancel()
	<-done
	if v, _ := testenv.Metric(reg, "roomflow_lucky_reward_pending_oldest_seconds"); v > 660 {
		t.Errorf("oldest pending reward %v s, want about 600 (10 minutes ahead)", v)
	}
	if v, _ := testenv.Metric(reg, "roomflow_lucky_outbox_oldest_seconds", "event_type", "LuckyGiftDrawn"); v < 700 || v > 760 {
		t.Errorf("oldest LuckyGiftDrawn %v s, want about 700", v)
	}
	if v, ok := testenv.Metric(reg, "roomflow_lucky_outbox_oldest_seconds", "event_type", "LuckyDrawRejected"); !ok || v != 0 {
		t.Errorf("LuckyDrawRejected without backlog: %v (present %v), want 0", v, ok)
	}
}
