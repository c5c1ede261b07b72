package luckydraw_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/hyapp/roomflow/domain/fairness"
	"github.com/hyapp/roomflow/internal/testenv"
	"github.com/hyapp/roomflow/schemas/activityv1"
	"github.com/hyapp/roomflow/services/luckydraw"
	"github.com/hyapp/roomflow/services/statsapi"
)

// syncBuffer is a log sink for concurrent draws.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func testKeyring(t testing.TB) *fairness.Keyring {
	t.Helper()
	k, err := fairness.NewKeyring(base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{7}, 32)), nil)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// commitRevealEnv is a service in commit_reveal mode logging to its
// buffer.
func commitRevealEnv(t *testing.T) (*env, *syncBuffer) {
	logs := &syncBuffer{}
	e := start(t, luckydraw.Config{Randomness: fairness.ModeCommitReveal, FairnessKeys: testKeyring(t),
		Logger: slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))}, 1_000_000)
	return e, logs
}

func (e *env) metricsText(t *testing.T) string {
	t.Helper()
	mfs, err := e.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	for _, mf := range mfs {
		if _, err := expfmt.MetricFamilyToText(&b, mf); err != nil {
			t.Fatal(err)
		}
	}
	return b.String()
}

// A commit-reveal day: no seed, no draw (recorded rejection); once the
// writer stored the day, draws take their value from the seed, the user's
// client_seed and nonces 1, 2, … without gaps; a retry changes nothing;
// the seed appears nowhere before its reveal, and after it every stored
// value recomputes from the revealed seed.
func TestCommitRevealDraws(t *testing.T) {
	e, logs := commitRevealEnv(t)
	ctx := context.Background()
	checkReq := &activityv1.CheckLuckyGiftRequest{Meta: &activityv1.LuckyGiftMeta{RoomId: "r1"}, GiftId: "rose"}
	if c, err := e.client.CheckLuckyGift(ctx, checkReq); err != nil || c.RejectReason != luckydraw.RejectFairnessNotCommitted {
		t.Fatalf("check before any seed: %v %v", c, err)
	}
	if r, err := e.client.ExecuteLuckyGiftDraw(ctx, drawReq("early", 7)); err != nil || r.RejectReason != luckydraw.RejectFairnessNotCommitted {
		t.Fatalf("draw before any seed: %v %v", r, err)
	}
	if n := e.count(t, `SELECT COUNT(*) FROM lucky_draw_records WHERE command_id = 'early' AND reward_status = 'rejected'
	AND reject_reason = 'fairness_not_committed'`); n != 1 {
		t.Fatalf("the rejection is not recorded (%d rows)", n)
	}
	now := time.Now()
	if err := e.svc.FairnessStep(ctx, now); err != nil {
		t.Fatal(err)
	}
	if v, _ := testenv.Metric(e.reg, "roomflow_lucky_fairness_next_day_committed", "app_code", app); v != 1 {
		t.Fatalf("next_day_committed = %v", v)
	}
	if n := e.count(t, `SELECT COUNT(*) FROM lucky_outbox WHERE message_type = 'LuckyFairnessCommitted' AND kafka_key = ?`, app); n != 2 {
		t.Fatalf("%d LuckyFairnessCommitted rows, want today's and tomorrow's", n)
	}
	var wg sync.WaitGroup
	answers := make([]*activityv1.ExecuteLuckyGiftDrawResponse, 12)
	for i := range answers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req := drawReq(fmt.Sprintf("c%d", i), int64(7+i%2))
			if i%3 == 0 {
				req.Meta.ClientSeed = "我的-seed"
			}
			r, err := e.client.ExecuteLuckyGiftDraw(ctx, req)
			if err != nil || r.RejectReason != "" {
				t.Errorf("draw %d: %v %v", i, r, err)
			}
			answers[i] = r
		}()
	}
	wg.Wait()
	retry, err := e.client.ExecuteLuckyGiftDraw(ctx, drawReq("c1", 8))
	if err != nil || retry.Tier.GetTierId() != answers[1].Tier.GetTierId() {
		t.Fatalf("retry: %v %v, first %v", retry, err, answers[1])
	}
	for _, u := range []int64{7, 8} {
		if n := e.count(t, `SELECT COUNT(*) FROM lucky_draw_records WHERE sender_user_id = ? AND fairness_mode = 'commit_reveal'
		AND nonce BETWEEN 1 AND 6`, u); n != 6 {
			t.Errorf("user %d: %d draws with nonces 1-6", u, n)
		}
		if n := e.count(t, `SELECT COUNT(DISTINCT nonce) FROM lucky_draw_records WHERE sender_user_id = ? AND nonce > 0`, u); n != 6 {
			t.Errorf("user %d: %d distinct nonces, want 6", u, n)
		}
	}
	var sealed []byte
	if err := e.db.QueryRow(`SELECT seed_sealed FROM lucky_fairness_days WHERE app_code = ? AND day_start_ms = ?`, app,
		fairness.DayStartMs(now.UnixMilli(), 24*time.Hour)).Scan(&sealed); err != nil {
		t.Fatal(err)
	}
	seed, err := testKeyring(t).Open(sealed, fairness.AAD(app, fairness.DayStartMs(now.UnixMilli(), 24*time.Hour)))
	if err != nil {
		t.Fatal(err)
	}
	secret := hex.EncodeToString(seed)
	before := logs.String() + e.metricsText(t) + fmt.Sprint(answers)
	if strings.Contains(strings.ToLower(before), secret) || bytes.Contains([]byte(before), seed) {
		t.Fatal("the seed appears in a log, a metric or an answer before its reveal")
	}
	if n := e.count(t, `SELECT COUNT(*) FROM lucky_outbox WHERE INSTR(payload, UNHEX(?)) > 0 OR INSTR(payload, ?) > 0`, secret, secret); n != 0 {
		t.Fatalf("%d outbox rows carry the seed before its reveal", n)
	}
	// The reveal: reveal_grace (1h) after the day ends.
	if err := e.svc.FairnessStep(ctx, now.Add(25*time.Hour+time.Minute)); err != nil {
		t.Fatal(err)
	}
	var revealed string
	if err := e.db.QueryRow(`SELECT revealed_seed FROM lucky_fairness_days WHERE app_code = ? AND day_start_ms = ?`, app,
		fairness.DayStartMs(now.UnixMilli(), 24*time.Hour)).Scan(&revealed); err != nil || revealed != secret {
		t.Fatalf("revealed %q, %v", revealed, err)
	}
	if n := e.count(t, `SELECT COUNT(*) FROM lucky_outbox WHERE message_type = 'LuckyFairnessRevealed'`); n != 1 {
		t.Fatalf("%d LuckyFairnessRevealed rows", n)
	}
	rows, err := e.db.Query(`SELECT client_seed, sender_user_id, nonce, random_value FROM lucky_draw_records WHERE fairness_mode = 'commit_reveal'
	AND reward_status <> 'rejected'`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	n := 0
	for rows.Next() {
		var in fairness.Input
		var v int64
		if err := rows.Scan(&in.ClientSeed, &in.SenderUserID, &in.Nonce, &v); err != nil {
			t.Fatal(err)
		}
		in.AppCode = app
		if got := fairness.RandomPPM(seed, in); got != v {
			t.Errorf("draw %+v stored %d, the seed gives %d", in, v, got)
		}
		n++
	}
	if n != 12 {
		t.Fatalf("%d commit-reveal draws, want 12", n)
	}
}

// An app outside lucky.fairness.app_codes draws in crypto mode, counted.
func TestUnlistedAppDrawsCrypto(t *testing.T) {
	e := start(t, luckydraw.Config{Randomness: fairness.ModeCommitReveal, FairnessKeys: testKeyring(t), FairnessAppCodes: []string{"other"}}, 1_000_000)
	if r, err := e.client.ExecuteLuckyGiftDraw(context.Background(), drawReq("u1", 7)); err != nil || r.RejectReason != "" {
		t.Fatalf("draw: %v %v", r, err)
	}
	if n := e.count(t, `SELECT COUNT(*) FROM lucky_draw_records WHERE fairness_mode = 'crypto' AND nonce = 0`); n != 1 {
		t.Fatalf("%d crypto draws", n)
	}
	if v, _ := testenv.Metric(e.reg, "roomflow_lucky_fairness_unlisted_draws_total", "app_code", app); v != 1 {
		t.Fatalf("unlisted draws = %v", v)
	}
}

// TestUnlistedReplicaDrawsTheStoredMode: a replica whose
// lucky.fairness.app_codes no longer lists the app (taken off the list, or
// a rolling deploy half done) draws a day stored commit_reveal in that
// mode, its nonces running on with the listing replica's; before, it drew
// crypto with nonce 0 on a day whose commitment was out.
func TestUnlistedReplicaDrawsTheStoredMode(t *testing.T) {
	e, _ := commitRevealEnv(t)
	ctx := context.Background()
	if err := e.svc.FairnessStep(ctx, time.Now()); err != nil {
		t.Fatal(err)
	}
	unlisted := e.replica(t, luckydraw.Config{FairnessAppCodes: []string{"other"}, FairnessKeys: testKeyring(t)})
	for i, call := range []func(context.Context, *activityv1.ExecuteLuckyGiftDrawRequest) (*activityv1.ExecuteLuckyGiftDrawResponse, error){
		unlisted.ExecuteLuckyGiftDraw,
		func(ctx context.Context, r *activityv1.ExecuteLuckyGiftDrawRequest) (*activityv1.ExecuteLuckyGiftDrawResponse, error) {
			return e.client.ExecuteLuckyGiftDraw(ctx, r)
		},
		unlisted.ExecuteLuckyGiftDraw,
	} {
		if r, err := call(ctx, drawReq(fmt.Sprint("d", i+1), 7)); err != nil || r.RejectReason != "" {
			t.Fatalf("draw %d: %v %v", i+1, r, err)
		}
	}
	for i := 1; i <= 3; i++ {
		var mode string
		var nonce int
		if err := e.db.QueryRow(`SELECT fairness_mode, nonce FROM lucky_draw_records WHERE command_id = ?`, fmt.Sprint("d", i)).Scan(&mode, &nonce); err != nil {
			t.Fatal(err)
		}
		if mode != fairness.ModeCommitReveal || nonce != i {
			t.Errorf("draw d%d: %s nonce %d, want the stored day's commit_reveal with nonce %d", i, mode, nonce, i)
		}
	}
}

// TestUnlistedReplicaRevealsDueDays: once no replica lists the app, the
// remaining ones still reveal its committed days when due (the list
// decides which apps get new days, not which seeds are revealed), and
// make no new day for it.
func TestUnlistedReplicaRevealsDueDays(t *testing.T) {
	e, _ := commitRevealEnv(t)
	ctx := context.Background()
	now := time.Now()
	if err := e.svc.FairnessStep(ctx, now); err != nil {
		t.Fatal(err)
	}
	if r, err := e.client.ExecuteLuckyGiftDraw(ctx, drawReq("d1", 7)); err != nil || r.RejectReason != "" {
		t.Fatalf("draw: %v %v", r, err)
	}
	unlisted := e.replica(t, luckydraw.Config{FairnessAppCodes: []string{"other"}, FairnessKeys: testKeyring(t)})
	if err := unlisted.FairnessStep(ctx, now.Add(25*time.Hour+time.Minute)); err != nil {
		t.Fatal(err)
	}
	today := fairness.DayStartMs(now.UnixMilli(), 24*time.Hour)
	v, err := luckydraw.VerifyFairnessDay(ctx, e.db, app, today)
	if err != nil || v.Draws != 1 || len(v.Differences) != 0 {
		t.Fatalf("today's day after its reveal was due: %+v %v", v, err)
	}
	if n := e.count(t, `SELECT COUNT(*) FROM lucky_outbox WHERE message_type = 'LuckyFairnessRevealed' AND kafka_key = ?`, app); n != 1 {
		t.Fatalf("%d LuckyFairnessRevealed rows, want today's", n)
	}
	if n := e.count(t, `SELECT COUNT(*) FROM lucky_fairness_days WHERE app_code = ?`, app); n != 2 {
		t.Fatalf("%d days of %s, want the 2 the listing replica made", n, app)
	}
}

// The schedule refuses today, past and stored days and takes a later one
// (the writer stores it, with a WARN naming lucky.randomness); verify
// refuses a day not revealed or in crypto mode, finds nothing on a
// revealed day and finds a tampered value.
func TestFairnessScheduleAndVerify(t *testing.T) {
	e, logs := commitRevealEnv(t)
	ctx := context.Background()
	now := time.Now()
	const dayMs = int64(24 * time.Hour / time.Millisecond)
	today := fairness.DayStartMs(now.UnixMilli(), 24*time.Hour)
	a, err := luckydraw.NewAdmin(e.db, luckydraw.AdminConfig{Operator: "test", Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	schedule := func(mode string, from int64) error {
		_, err := a.ScheduleFairness(ctx, app, mode, from, 24*time.Hour)
		return err
	}
	if err := e.svc.FairnessStep(ctx, now); err != nil {
		t.Fatal(err)
	}
	for name, from := range map[string]int64{"today": today, "past": today - dayMs, "committed tomorrow": today + dayMs} {
		if err := schedule(fairness.ModeCrypto, from); !errors.Is(err, luckydraw.ErrSchedule) {
			t.Errorf("schedule %s: %v, want ErrSchedule", name, err)
		}
	}
	if n := e.count(t, `SELECT COUNT(*) FROM lucky_fairness_schedule`); n != 0 {
		t.Fatalf("a refused schedule wrote %d rows", n)
	}
	for i := range 5 {
		if r, err := e.client.ExecuteLuckyGiftDraw(ctx, drawReq(fmt.Sprintf("v%d", i), int64(1+i%2))); err != nil || r.RejectReason != "" {
			t.Fatalf("draw: %v %v", r, err)
		}
	}
	if _, err := luckydraw.VerifyFairnessDay(ctx, e.db, app, today); !errors.Is(err, luckydraw.ErrNotVerifiable) ||
		!strings.Contains(err.Error(), "not revealed") {
		t.Errorf("verify before the reveal: %v", err)
	}
	if err := schedule(fairness.ModeCrypto, today+2*dayMs); err != nil {
		t.Fatal(err)
	}
	// A day later: today's seed is revealed (its grace is 1h) and the day
	// after tomorrow stored.
	if err := e.svc.FairnessStep(ctx, now.Add(25*time.Hour)); err != nil {
		t.Fatal(err)
	}
	if n := e.count(t, `SELECT COUNT(*) FROM lucky_fairness_days WHERE day_start_ms = ? AND mode = 'crypto' AND commitment = ''`, today+2*dayMs); n != 1 {
		t.Fatal("the scheduled crypto day was not stored as such")
	}
	if !strings.Contains(logs.String(), `"key":"lucky.randomness"`) {
		t.Error("no WARN naming lucky.randomness for a day scheduled against it")
	}
	if _, err := luckydraw.VerifyFairnessDay(ctx, e.db, app, today+2*dayMs); !errors.Is(err, luckydraw.ErrNotVerifiable) {
		t.Errorf("verify a crypto day: %v", err)
	}
	v, err := luckydraw.VerifyFairnessDay(ctx, e.db, app, today)
	if err != nil || v.Draws != 5 || len(v.Differences) != 0 {
		t.Fatalf("verify: %+v %v", v, err)
	}
	if _, err := e.db.Exec(`UPDATE lucky_draw_records SET random_value = (random_value + 1) % 1000000 WHERE command_id = 'v3'`); err != nil {
		t.Fatal(err)
	}
	if _, err := e.db.Exec(`UPDATE lucky_draw_records SET nonce = 9 WHERE command_id = 'v4'`); err != nil {
		t.Fatal(err)
	}
	if v, err = luckydraw.VerifyFairnessDay(ctx, e.db, app, today); err != nil || len(v.Differences) < 2 {
		t.Fatalf("verify after tampering: %+v %v", v, err)
	}
}

// A user verifies their draws of a commit-reveal day from the public
// routes exactly as docs/fairness.md says (userverify_test.go: the
// standard library only); before the reveal the seed route, the RPC and
// the user's draw say nothing of the seed, and another user's draw is
// 404.
func TestUserVerifiesFromPublicRoutes(t *testing.T) {
	e, _ := commitRevealEnv(t)
	ctx := context.Background()
	now := time.Now()
	if err := e.svc.FairnessStep(ctx, now); err != nil {
		t.Fatal(err)
	}
	api, err := statsapi.New(statsapi.Config{DefaultAppCode: app}, e.db)
	if err != nil {
		t.Fatal(err)
	}
	run, err := api.Start(statsapi.Listeners{Internal: "127.0.0.1:0", App: "127.0.0.1:0", GRPC: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { run.Stop(context.Background()) })
	base := "http://" + run.Addrs().App
	day := fairness.DayLabel(fairness.DayStartMs(now.UnixMilli(), 24*time.Hour), 24*time.Hour)
	commitment, err := userCommitment(base, app, day)
	if err != nil {
		t.Fatal(err)
	}
	var mine []string
	for i := range 4 {
		req := drawReq(fmt.Sprintf("me%d", i), 77)
		req.Meta.ClientSeed = fmt.Sprintf("my-luck-%d", i)
		r, err := e.client.ExecuteLuckyGiftDraw(ctx, req)
		if err != nil || r.RejectReason != "" {
			t.Fatalf("draw: %v %v", r, err)
		}
		mine = append(mine, r.DrawId)
	}
	other, err := e.client.ExecuteLuckyGiftDraw(ctx, drawReq("theirs", 78))
	if err != nil {
		t.Fatal(err)
	}
	if err := getJSON(base+"/api/v1/users/me/lucky-draws/"+other.DrawId, "77", app, &struct{}{}); err == nil ||
		!strings.Contains(err.Error(), "status 404") {
		t.Fatalf("another user's draw: %v, want 404", err)
	}
	// The internal listener serves the commitment, never the /me route.
	internal := "http://" + run.Addrs().Internal
	var c struct{ Commitment string }
	if err := getJSON(internal+"/api/v1/lucky/fairness/"+day+"/commitment?app_code="+app, "", "", &c); err != nil || c.Commitment != commitment {
		t.Fatalf("internal commitment: %+v %v", c, err)
	}
	if err := getJSON(internal+"/api/v1/users/me/lucky-draws/"+mine[0], "77", app, &struct{}{}); err == nil ||
		!strings.Contains(err.Error(), "status 404") {
		t.Fatalf("the /me draw on the internal listener: %v, want 404", err)
	}
	// Before the reveal: no seed anywhere, and the same answer as for a
	// day never stored.
	conn, err := grpc.NewClient(run.Addrs().GRPC, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fc := activityv1.NewLuckyFairnessServiceClient(conn)
	_, errNow := fc.GetSeed(ctx, &activityv1.GetSeedRequest{Day: day})
	_, errNone := fc.GetSeed(ctx, &activityv1.GetSeedRequest{Day: "2001-01-01"})
	if status.Code(errNow) != codes.FailedPrecondition || errNow.Error() != errNone.Error() {
		t.Fatalf("GetSeed before the reveal: %v; for a day never stored: %v", errNow, errNone)
	}
	if _, err := fc.GetSeed(ctx, &activityv1.GetSeedRequest{Day: "someday"}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("GetSeed of a bad day: %v", err)
	}
	if c, err := fc.GetCommitment(ctx, &activityv1.GetCommitmentRequest{Day: day}); err != nil || c.Commitment != commitment || c.Revealed {
		t.Fatalf("GetCommitment: %v %v", c, err)
	}
	if err := getJSON(base+"/api/v1/lucky/fairness/"+day+"/seed", "", app, &struct{}{}); err == nil || !strings.Contains(err.Error(), "status 409") {
		t.Fatalf("seed route before the reveal: %v", err)
	}
	if _, err := userVerify(base, app, "77", day, commitment, mine); err == nil {
		t.Fatal("verified before the reveal")
	}
	if err := e.svc.FairnessStep(ctx, now.Add(25*time.Hour+time.Minute)); err != nil {
		t.Fatal(err)
	}
	n, err := userVerify(base, app, "77", day, commitment, mine)
	if err != nil || n != 4 {
		t.Fatalf("the user's verification: %d draws, %v", n, err)
	}
	if s, err := fc.GetSeed(ctx, &activityv1.GetSeedRequest{Day: day}); err != nil || len(s.Seed) != 64 {
		t.Fatalf("GetSeed after the reveal: %v %v", s, err)
	}
}

// Replicas making the same days concurrently: one INSERT wins each day,
// one LuckyFairnessCommitted per day, and every replica draws with the
// stored seed.
func TestOneFairnessWriterPerDay(t *testing.T) {
	e, _ := commitRevealEnv(t)
	ctx := context.Background()
	now := time.Now()
	replicas := []*luckydraw.Service{e.svc}
	for range 3 {
		s, err := luckydraw.New(luckydraw.Config{AppCode: app, AuditKey: "test-key", Randomness: fairness.ModeCommitReveal,
			FairnessKeys: testKeyring(t)}, e.db)
		if err != nil {
			t.Fatal(err)
		}
		replicas = append(replicas, s)
	}
	var wg sync.WaitGroup
	for _, s := range replicas {
		wg.Go(func() {
			if err := s.FairnessStep(ctx, now); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if n := e.count(t, `SELECT COUNT(*) FROM lucky_outbox WHERE message_type = 'LuckyFairnessCommitted'`); n != 2 {
		t.Fatalf("%d LuckyFairnessCommitted rows for two days", n)
	}
	if n := e.count(t, `SELECT COUNT(*) FROM lucky_fairness_days`); n != 2 {
		t.Fatalf("%d days stored", n)
	}
	for i, s := range replicas[1:] {
		r, err := s.ExecuteLuckyGiftDraw(ctx, drawReq(fmt.Sprintf("rep%d", i), 5))
		if err != nil || r.RejectReason != "" {
			t.Fatalf("replica %d: %v %v", i+1, r, err)
		}
	}
	if err := e.svc.FairnessStep(ctx, now.Add(25*time.Hour+time.Minute)); err != nil {
		t.Fatal(err)
	}
	v, err := luckydraw.VerifyFairnessDay(ctx, e.db, app, fairness.DayStartMs(now.UnixMilli(), 24*time.Hour))
	if err != nil || v.Draws != 3 || len(v.Differences) != 0 {
		t.Fatalf("verify the replicas' draws: %+v %v", v, err)
	}
}
