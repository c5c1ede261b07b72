package luckydraw_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	"github.com/hyapp/roomflow/internal/testenv"
	"github.com/hyapp/roomflow/schemas/activityv1"
	"github.com/hyapp/roomflow/schemas/envelope"
	"github.com/hyapp/roomflow/services/luckydraw"
	"github.com/hyapp/roomflow/services/luckydraw/luckyoutbox"
	"github.com/hyapp/roomflow/services/luckydraw/wallet/walletfake"
)

// replica is another draw service on e's database (a replica of the
// deployment), drawing in the caller's goroutine.
func (e *env) replica(t *testing.T, cfg luckydraw.Config) *luckydraw.Service {
	t.Helper()
	cfg.AppCode, cfg.AuditKey, cfg.SwitchCacheTTL = app, "test-key", time.Nanosecond
	svc, err := luckydraw.New(cfg, e.db)
	if err != nil {
		t.Fatal(err)
	}
	return svc
}

// TestOutboxFormatsCrashBeforeFirstPublish: lucky.outbox_format switched
// rows -> draw_events -> rows across replicas, every process dying right
// after its draws commit (no synchronous credit, no publish), a crashed
// worker holding some rows of both shapes: the draw_events replica wrote
// no activity_event row to lucky_outbox and one lucky_draw_events row per
// draw (its reward credits stay lucky_outbox rows); a worker of this
// release then publishes every event the draw records imply, ids intact,
// and grants every reward.
func TestOutboxFormatsCrashBeforeFirstPublish(t *testing.T) {
	d := &crashingDispatcher{}
	e := start(t, luckydraw.Config{Dispatcher: d, WalletCreditTimeout: 50 * time.Millisecond}, 1_000_000)
	// The draw_events replica pays no reward synchronously (the dispatch
	// switch off: LuckyRewardPending attempt 0 goes in its rows) and caps
	// its anchor's payout, so its rows carry LuckyRiskRejected too.
	packed := e.replica(t, luckydraw.Config{OutboxFormat: luckyoutbox.FormatDrawEvents, DisableWalletCreditDispatch: true,
		MaxAnchorDailyPayout: 150})
	back := e.replica(t, luckydraw.Config{OutboxFormat: luckyoutbox.FormatRows, Dispatcher: d, WalletCreditTimeout: 50 * time.Millisecond})
	ctx := context.Background()
	var packedDraws []string
	for i, step := range []struct {
		svc  *luckydraw.Service
		name string
	}{{e.svc, "rows"}, {packed, "draw_events"}, {back, "rows-again"}} {
		for j := range 12 {
			req := drawReq(fmt.Sprint(step.name, j), int64(100*i+j+1))
			if step.svc == packed {
				req.Meta.TargetUserId = 901 // an anchor of its own: the others' payouts leave its cap alone
			}
			resp, err := step.svc.ExecuteLuckyGiftDraw(ctx, req)
			if err != nil {
				t.Fatal(err)
			}
			if step.svc == packed {
				packedDraws = append(packedDraws, resp.DrawId)
			}
		}
	}
	if n := e.count(t, `SELECT COUNT(*) FROM lucky_draw_events`); n != int64(len(packedDraws)) {
		t.Fatalf("%d lucky_draw_events rows, want one per draw_events draw (%d)", n, len(packedDraws))
	}
	for _, id := range packedDraws {
		if n := e.count(t, `SELECT COUNT(*) FROM lucky_outbox WHERE aggregate_id = ? AND event_type = 'activity_event'`, id); n != 0 {
			t.Fatalf("draw_events draw %s wrote %d lucky_outbox events", id, n)
		}
	}
	if n := e.count(t, `SELECT COUNT(*) FROM lucky_outbox o JOIN lucky_draw_records d ON d.draw_id = o.aggregate_id
		WHERE o.event_type = 'reward_credit' AND d.target_user_id = 901`); n == 0 {
		t.Fatal("no reward_credit row of a draw_events draw")
	}
	if n := e.count(t, `SELECT COUNT(*) FROM lucky_draw_events WHERE message_types = 'LuckyGiftDrawn,LuckyPoolChanged,LuckyRiskRejected,LuckyRewardPending'`); n == 0 {
		t.Fatal("no lucky_draw_events row carries a risk rejection and a pending reward")
	}
	// A worker died holding some rows of both shapes, its leases expired.
	for _, q := range []string{`UPDATE lucky_outbox SET status = 'processing', worker_id = 'crashed', lock_until_ms = 1 WHERE event_type = 'activity_event' LIMIT 7`,
		`UPDATE lucky_draw_events SET status = 'processing', worker_id = 'crashed', lock_until_ms = 1 LIMIT 4`} {
		if res, err := e.db.Exec(q); err != nil {
			t.Fatal(err)
		} else if n, _ := res.RowsAffected(); n == 0 {
			t.Fatalf("%s: no row", q)
		}
	}

	w, err := walletfake.Listen(walletfake.Config{Seed: 5}, "")
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	k := testenv.NewKafka(t)
	worker, err := luckyoutbox.New(luckyoutbox.Config{AppCode: app, PollInterval: 20 * time.Millisecond, BatchSize: 10,
		Backoff: backoffFast(), Topic: k.Config.Topics.LuckyEvents, Kafka: k.Cluster()}, e.db, walletClient(t, w.Addr()))
	if err != nil {
		t.Fatal(err)
	}
	defer worker.Close(ctx)
	testenv.Eventually(t, 30*time.Second, "every row done, every reward granted", func() bool {
		if _, err := worker.ProcessBatch(ctx); err != nil {
			t.Fatal(err)
		}
		return e.count(t, `SELECT (SELECT COUNT(*) FROM lucky_outbox WHERE status <> 'done') + (SELECT COUNT(*) FROM lucky_draw_events WHERE status <> 'done')
			+ (SELECT COUNT(*) FROM lucky_draw_records WHERE reward_status = 'pending')`) == 0
	})
	got := publishedEvents(t, k.DrainCommitted(t, k.Config.Topics.LuckyEvents))
	for id := range expectedEvents(t, e.db, packedDraws) {
		if !got[id] {
			t.Errorf("%s never published", id)
		}
	}
}

// expectedEvents are the event ids the draw records imply: each draw's
// LuckyGiftDrawn, a LuckyPoolChanged per pool, a LuckyRiskRejected per
// scope of its risk snapshot, LuckyRewardGranted of a paid draw, and
// LuckyRewardPending attempt 0 of a paid draw among pendingAtDraw (drawn
// with the dispatch switch off).
func expectedEvents(t *testing.T, db *sql.DB, pendingAtDraw []string) map[string]bool {
	t.Helper()
	rows, err := db.Query(`SELECT draw_id, reward_coins, reward_id, risk_snapshot_json FROM lucky_draw_records`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	want := map[string]bool{}
	for rows.Next() {
		var id, rewardID string
		var coins int64
		var risk []byte
		if err := rows.Scan(&id, &coins, &rewardID, &risk); err != nil {
			t.Fatal(err)
		}
		var rs luckydraw.RiskSnapshot
		if err := json.Unmarshal(risk, &rs); err != nil {
			t.Fatal(err)
		}
		want["LuckyGiftDrawn:"+id] = true
		for _, scope := range []string{"platform", "room", "gift"} {
			want["LuckyPoolChanged:"+id+":"+scope] = true
		}
		for _, scope := range rs.Rejected {
			want["LuckyRiskRejected:"+id+":"+scope] = true
		}
		if coins > 0 {
			want["LuckyRewardGranted:"+rewardID] = true
			if slices.Contains(pendingAtDraw, id) {
				want["LuckyRewardPending:"+rewardID+":0"] = true
			}
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return want
}

// publishedEvents are the event ids of recs, each checked intact: the
// value is a message of the event_type header whose event_id is the
// event_id header.
func publishedEvents(t *testing.T, recs []*kgo.Record) map[string]bool {
	t.Helper()
	out := map[string]bool{}
	for _, r := range recs {
		id, typ := string(envelope.Header(r, envelope.HeaderEventID)), string(envelope.Header(r, envelope.HeaderEventType))
		md := activityv1.File_hyapp_activity_v1_lucky_events_proto.Messages().ByName(protoreflect.Name(typ))
		if md == nil {
			t.Fatalf("%s: event_type %q is no lucky event", id, typ)
		}
		mt, err := protoregistry.GlobalTypes.FindMessageByName(md.FullName())
		if err != nil {
			t.Fatal(err)
		}
		m := mt.New()
		if err := proto.Unmarshal(r.Value, m.Interface()); err != nil {
			t.Fatalf("%s: %v", id, err)
		}
		if got := m.Get(md.Fields().ByName("event_id")).String(); got != id {
			t.Fatalf("record with header event_id %s carries event %s", id, got)
		}
		out[id] = true
	}
	return out
}
