package loadgen_test

import (
	"context"
	"database/sql"
	"errors"
	"net"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"

	"github.com/hyapp/roomflow/internal/testenv"
	"github.com/hyapp/roomflow/producers/loadgen"
	"github.com/hyapp/roomflow/schemas/activityv1"
	"github.com/hyapp/roomflow/schemas/roomv1"
	"github.com/hyapp/roomflow/services/luckydraw"
)

// TestDrawLucky sends a scenario's lucky gifts through a real draw service
// and checks that every lucky gift then names the draw the service
// recorded for its command id (draw_id derived from app_code and the event
// id), that plain gifts are untouched, and that the summary's counts equal
// lucky_draw_records.
func TestDrawLucky(t *testing.T) {
	ctx := context.Background()
	m := testenv.NewMySQL(t)
	sc := loadgen.DefaultScenario()
	sc.Sessions, sc.Gifts, sc.EventIDPrefix = 10, 200, "dl"
	if err := loadgen.SeedRule(ctx, m.DB, sc.Rule); err != nil {
		t.Fatal(err)
	}
	events, o := sc.Generate()
	pools := map[[2]string]bool{{"platform", "global"}: true, {"gift", sc.Rule.GiftID}: true}
	for _, e := range events {
		pools[[2]string{"room", e.Envelope.RoomId}] = true
	}
	admin, err := luckydraw.NewAdmin(m.DB, luckydraw.AdminConfig{Operator: "test"})
	if err != nil {
		t.Fatal(err)
	}
	for p := range pools {
		if _, err := admin.FundPool(ctx, sc.AppCode, p[0], p[1], 10_000_000, nil); err != nil {
			t.Fatal(err)
		}
	}
	client := serveDraws(t, m.DB, luckydraw.Config{AppCode: sc.AppCode, AuditKey: "k"})

	before := make([][]byte, len(events))
	for i, e := range events {
		before[i] = e.Payload
	}
	sum, err := loadgen.DrawLucky(ctx, client, events, 16)
	if err != nil {
		t.Fatal(err)
	}
	if sum.Draws != o.LuckyGifts || len(sum.Rejected) != 0 {
		t.Fatalf("draws %d (rejected %v), want one per lucky gift: %d", sum.Draws, sum.Rejected, o.LuckyGifts)
	}
	for i, e := range events {
		var g roomv1.RoomGiftSent
		proto.Unmarshal(e.Envelope.Payload, &g)
		var env roomv1.EventEnvelope
		if err := proto.Unmarshal(e.Payload, &env); err != nil || !proto.Equal(&env, e.Envelope) {
			t.Fatalf("event %d: Payload is not the envelope", i)
		}
		switch {
		case e.Envelope.EventType == "RoomGiftSent" && g.Lucky:
			if want := luckydraw.DrawID(sc.AppCode, e.Envelope.EventId); g.DrawId != want {
				t.Fatalf("%s: draw_id %q, want %q", e.Envelope.EventId, g.DrawId, want)
			}
		default:
			if string(before[i]) != string(e.Payload) {
				t.Fatalf("%s: a non-lucky event changed", e.Envelope.EventId)
			}
		}
	}
	var draws, hits int
	m.DB.QueryRow(`SELECT COUNT(*), COALESCE(SUM(reward_coins > 0), 0) FROM lucky_draw_records`).Scan(&draws, &hits)
	if draws != sum.Draws || hits != sum.Hits || hits == 0 {
		t.Fatalf("records: %d draws, %d hits; summary %d, %d (funded pools must pay some)", draws, hits, sum.Draws, sum.Hits)
	}
}

// serveDraws serves a draw service of cfg on db until the test ends.
func serveDraws(t *testing.T, db *sql.DB, cfg luckydraw.Config, opts ...grpc.DialOption) activityv1.LuckyGiftServiceClient {
	t.Helper()
	svc, err := luckydraw.New(cfg, db)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go svc.Serve(ctx, ln) //nolint:errcheck // stopped by cancel
	conn, err := grpc.NewClient(ln.Addr().String(), append(opts, grpc.WithTransportCredentials(insecure.NewCredentials()))...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return activityv1.NewLuckyGiftServiceClient(conn)
}

// A gift Check rejects is sent as a plain gift; one Execute rejects after
// the debit stays lucky and names its recorded rejection. On replica A the
// room is paused between the Check and the Execute of its first gift
// there (a client interceptor), so at least that gift is rejected at
// Execute; later ones of the room on A are rejected at either call (Check
// reads switches at most 1 s old). Replica B starts after the pause: its
// Check rejects every gift of the room.
func TestDrawLuckyRejections(t *testing.T) {
	ctx := context.Background()
	m := testenv.NewMySQL(t)
	sc := loadgen.DefaultScenario()
	sc.Sessions, sc.Gifts, sc.EventIDPrefix = 4, 120, "dr"
	if err := loadgen.SeedRule(ctx, m.DB, sc.Rule); err != nil {
		t.Fatal(err)
	}
	events, _ := sc.Generate()
	// The room with the most lucky gifts in both halves of the events.
	half := len(events) / 2
	perHalf := map[string]*[2]int{}
	for i := range events {
		if _, ok := loadgen.LuckyGift(&events[i]); ok {
			r := events[i].Envelope.RoomId
			if perHalf[r] == nil {
				perHalf[r] = &[2]int{}
			}
			perHalf[r][min(i/half, 1)]++
		}
	}
	var room string
	for r, n := range perHalf {
		if best := perHalf[room]; room == "" || min(n[0], n[1]) > min(best[0], best[1]) {
			room = r
		}
	}
	if n := perHalf[room]; n == nil || n[0] == 0 || n[1] == 0 {
		t.Fatalf("no room has lucky gifts in both halves: %v", perHalf)
	}
	admin, err := luckydraw.NewAdmin(m.DB, luckydraw.AdminConfig{Operator: "test"})
	if err != nil {
		t.Fatal(err)
	}
	var pause sync.Once
	pauseFirst := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		if r, ok := req.(*activityv1.ExecuteLuckyGiftDrawRequest); ok && r.GetMeta().GetRoomId() == room {
			pause.Do(func() {
				on := true
				if _, err := admin.SetSwitch(ctx, sc.AppCode, luckydraw.SwitchRoomScopePaused, room, &on); err != nil {
					t.Error(err)
				}
			})
		}
		return invoker(ctx, method, req, reply, cc, opts...)
	}
	cfg := luckydraw.Config{AppCode: sc.AppCode, AuditKey: "k"}
	sumA, err := loadgen.DrawLucky(ctx, serveDraws(t, m.DB, cfg, grpc.WithUnaryInterceptor(pauseFirst)), events[:half], 8)
	if err != nil {
		t.Fatal(err)
	}
	sumB, err := loadgen.DrawLucky(ctx, serveDraws(t, m.DB, cfg), events[half:], 8)
	if err != nil {
		t.Fatal(err)
	}
	if sumA.Refunds == 0 || sumB.Refunds != 0 || sumB.Rejected["room_paused"] == 0 {
		t.Fatalf("replica A %+v, replica B %+v: want rejections at Execute on A, only at Check on B", sumA, sumB)
	}
	plain, named := 0, 0
	for i := range events {
		e := &events[i]
		if e.Envelope.EventType != "RoomGiftSent" || e.Envelope.RoomId != room {
			continue
		}
		var g roomv1.RoomGiftSent
		if err := proto.Unmarshal(e.Envelope.Payload, &g); err != nil {
			t.Fatal(err)
		}
		switch {
		case !g.Lucky && g.DrawId == "" && g.LuckyRuleVersion == "":
			plain++
		case g.Lucky && g.DrawId == luckydraw.DrawID(sc.AppCode, e.Envelope.EventId):
			var status, reason string
			if err := m.DB.QueryRow(`SELECT reward_status, reject_reason FROM lucky_draw_records WHERE draw_id = ?`, g.DrawId).Scan(&status, &reason); err != nil ||
				status != "rejected" || reason != "room_paused" {
				t.Fatalf("%s names %s: %s %s (%v), want its recorded rejection", e.Envelope.EventId, g.DrawId, status, reason, err)
			}
			named++
		default:
			t.Fatalf("%s: gift %v after its room was paused", e.Envelope.EventId, &g)
		}
	}
	refunds, checkRejects := sumA.Refunds+sumB.Refunds, sumA.Rejected["room_paused"]+sumB.Rejected["room_paused"]-sumA.Refunds-sumB.Refunds
	if named != refunds || plain < checkRejects {
		t.Fatalf("%d gifts name their rejection (want %d), %d sent plain (want at least the %d Check rejections)", named, refunds, plain, checkRejects)
	}
}

// WriteOutboxLiveWith calls its BeforeWrite hook with each transaction's
// rows before inserting them, and writes what the hook changed: a lucky
// gift named its draw there (SetDraw) carries it in room_outbox.
func TestWriteOutboxLiveWithNamesDraws(t *testing.T) {
	m := testenv.NewMySQL(t)
	sc := loadgen.DefaultScenario()
	sc.Sessions, sc.Gifts, sc.Users = 10, 60, 20
	sc.Start, sc.Span, sc.MaxSessionLength = time.Now(), time.Second, 500*time.Millisecond
	sc.Timers = &loadgen.TimerPolicy{PendingPublishMaxAge: 3 * time.Second, PublishingSessionMaxAge: 3 * time.Second}
	evs, o := sc.Generate()
	calls, named := 0, 0
	before := func(_ context.Context, batch []loadgen.Event) error {
		calls++
		for i := range batch {
			if g, ok := loadgen.LuckyGift(&batch[i]); ok {
				named++
				if err := loadgen.SetDraw(&batch[i], g, "draw-of-"+batch[i].Envelope.EventId, g.LuckyRuleVersion); err != nil {
					return err
				}
			}
		}
		return nil
	}
	n, _, err := loadgen.WriteOutboxLiveWith(context.Background(), m.DB, evs, 5, before)
	if err != nil || n != len(evs) || calls == 0 || named != o.LuckyGifts || named == 0 {
		t.Fatalf("wrote %d of %d (%v); hook called %d times, named %d of %d lucky gifts", n, len(evs), err, calls, named, o.LuckyGifts)
	}
	rows, err := m.DB.Query(`SELECT event_id, payload FROM room_outbox WHERE event_type = 'RoomGiftSent'`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	stored := 0
	for rows.Next() {
		var id string
		e := loadgen.Event{Envelope: &roomv1.EventEnvelope{}}
		if err := rows.Scan(&id, &e.Payload); err != nil {
			t.Fatal(err)
		}
		if err := proto.Unmarshal(e.Payload, e.Envelope); err != nil {
			t.Fatal(err)
		}
		if g, ok := loadgen.LuckyGift(&e); ok {
			stored++
			if g.DrawId != "draw-of-"+id {
				t.Fatalf("%s stored with draw_id %q", id, g.DrawId)
			}
		}
	}
	if err := rows.Err(); err != nil || stored != named {
		t.Fatalf("%d lucky gift rows carry their draw, want %d (%v)", stored, named, err)
	}

	// An error of the hook stops the writer before the rows are written.
	m2 := testenv.NewMySQL(t)
	stop := errors.New("no draw service")
	if n, _, err := loadgen.WriteOutboxLiveWith(context.Background(), m2.DB, evs, 5, func(context.Context, []loadgen.Event) error { return stop }); !errors.Is(err, stop) || n != 0 {
		t.Fatalf("hook error: wrote %d, %v", n, err)
	}
}
