package luckyoutbox_test

import (
	"context"
	"database/sql"
	"fmt"
	"sort"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/proto"

	"github.com/hyapp/roomflow/internal/backoff"
	"github.com/hyapp/roomflow/internal/testenv"
	"github.com/hyapp/roomflow/schemas/walletv1"
	"github.com/hyapp/roomflow/services/luckydraw/luckyoutbox"
	"github.com/hyapp/roomflow/services/luckydraw/wallet"
	"github.com/hyapp/roomflow/services/luckydraw/wallet/walletfake"
)

const app = "hyapp"

// env is one test's MariaDB database, kfake cluster and fake wallet.
type env struct {
	t      *testing.T
	db     *sql.DB
	kafka  *testenv.Kafka
	fake   *walletfake.Wallet
	wallet *wallet.Client
}

func newEnv(t *testing.T) *env {
	t.Helper()
	fake, err := walletfake.Listen(walletfake.Config{Seed: 1}, "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fake.Close() })
	wc, err := wallet.New(wallet.Config{Addr: fake.Addr()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { wc.Close() })
	return &env{t: t, db: testenv.NewMySQL(t).DB, kafka: testenv.NewKafka(t, testenv.Partitions(1)), fake: fake, wallet: wc}
}

// fastConfig retries within milliseconds.
func (e *env) config(reg prometheus.Registerer) luckyoutbox.Config {
	return luckyoutbox.Config{
		AppCode:      app,
		PollInterval: 20 * time.Millisecond,
		Backoff:      backoff.Config{First: 5 * time.Millisecond, Max: 10 * time.Millisecond},
		WorkerID:     "w1",
		Topic:        e.kafka.Config.Topics.LuckyEvents,
		Kafka:        e.kafka.Cluster(),
		Registerer:   reg,
	}
}

func (e *env) worker(cfg luckyoutbox.Config) *luckyoutbox.Worker {
	e.t.Helper()
	w, err := luckyoutbox.New(cfg, e.db, e.wallet)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { w.Close(context.Background()) })
	return w
}

// seedReward writes what the draw transaction writes for a paid draw: the
// draw record (reward pending) and its reward_credit row, due at dueMs.
func (e *env) seedReward(n int, coins int64, dueMs int64) (rewardID, drawID string) {
	e.t.Helper()
	drawID, rewardID = fmt.Sprintf("draw-%d", n), fmt.Sprintf("rw-%d", n)
	now := time.Now().UnixMilli()
	if _, err := e.db.Exec(`INSERT INTO lucky_draw_records (draw_id, app_code, command_id, room_id, sender_user_id, gift_id, coin_spent, rule_version,
		candidate_tiers_json, selected_tier_id, tier_type, reward_coins, random_digest, pool_snapshot_json, risk_snapshot_json,
		reward_id, reward_status, created_at_ms, updated_at_ms)
		VALUES (?, ?, ?, 'room-1', ?, 'gift-1', 10, 'v1', '[]', 't1', 'fixed', ?, 'digest', '{}', '{}', ?, 'pending', ?, ?)`,
		drawID, app, "cmd-"+drawID, 1000+n, coins, rewardID, now, now); err != nil {
		e.t.Fatal(err)
	}
	payload, err := proto.Marshal(&walletv1.CreditLuckyRewardRequest{RewardId: rewardID, CommandId: "cmd-" + drawID, DrawId: drawID,
		RoomId: "room-1", UserId: int64(1000 + n), RewardCoins: coins, Reason: "lucky_gift_reward"})
	if err != nil {
		e.t.Fatal(err)
	}
	if _, err := e.db.Exec(`INSERT INTO lucky_outbox (event_id, app_code, event_type, aggregate_id, payload, status, next_retry_at_ms, created_at_ms, updated_at_ms)
		VALUES (?, ?, 'reward_credit', ?, ?, 'pending', ?, ?, ?)`, luckyoutbox.RewardCreditEventID(rewardID), app, drawID, payload, dueMs, now, now); err != nil {
		e.t.Fatal(err)
	}
	return rewardID, drawID
}

// outboxRow is a lucky_outbox row's state.
type outboxRow struct {
	Status     string
	RetryCount int
	NextRetry  int64
	WorkerID   string
	LastError  sql.NullString
}

func (e *env) outbox(eventID string) outboxRow {
	e.t.Helper()
	var r outboxRow
	if err := e.db.QueryRow(`SELECT status, retry_count, next_retry_at_ms, worker_id, last_error FROM lucky_outbox WHERE event_id = ?`, eventID).
		Scan(&r.Status, &r.RetryCount, &r.NextRetry, &r.WorkerID, &r.LastError); err != nil {
		e.t.Fatalf("outbox row %s: %v", eventID, err)
	}
	return r
}

func (e *env) draw(drawID string) (status, receipt string) {
	e.t.Helper()
	if err := e.db.QueryRow(`SELECT reward_status, credit_receipt_id FROM lucky_draw_records WHERE draw_id = ?`, drawID).Scan(&status, &receipt); err != nil {
		e.t.Fatal(err)
	}
	return status, receipt
}

// events lists the activity_event ids of a draw, sorted.
func (e *env) events(drawID string) []string {
	e.t.Helper()
	rows, err := e.db.Query(`SELECT event_id FROM lucky_outbox WHERE event_type = 'activity_event' AND aggregate_id = ?`, drawID)
	if err != nil {
		e.t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			e.t.Fatal(err)
		}
		out = append(out, id)
	}
	sort.Strings(out)
	return out
}

// runBatches calls ProcessBatch until cond holds (or fails the test).
func runBatches(t *testing.T, w *luckyoutbox.Worker, what string, cond func() bool) {
	t.Helper()
	testenv.Eventually(t, 10*time.Second, what, func() bool {
		if _, err := w.ProcessBatch(context.Background()); err != nil {
			t.Fatalf("ProcessBatch: %v", err)
		}
		return cond()
	})
}

// credit is the synchronous credit of one reward (a batch of one).
func credit(w *luckyoutbox.Worker, appCode, rewardID string) (status, receipt string, err error) {
	o := w.CreditRewards(context.Background(), appCode, []string{rewardID})[0]
	return o.Status, o.CreditReceiptID, o.Err
}
