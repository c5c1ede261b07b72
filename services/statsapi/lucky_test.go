package statsapi_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/hyapp/roomflow/internal/testenv"
	"github.com/hyapp/roomflow/services/statsapi"
)

// The room route answers the room's hours from since_ms (floored to its
// hour), oldest first, for its app only, with payout_ppm derived by MySQL;
// an unknown room gets an empty list; bad input is 400.
func TestLuckyRoomHourly(t *testing.T) {
	m := testenv.NewMySQL(t)
	h0 := ms("2026-03-01T10:00:00Z")
	for _, r := range []struct {
		app, room    string
		hour         int64
		draws, hits  int64
		in, out      int64
		rej, rejCoin int64
	}{
		{"hyapp", "r1", h0, 10, 2, 1000, 400, 1, 100},
		{"hyapp", "r1", h0 + 3_600_000, 4, 1, 400, 1200, 0, 0},
		{"hyapp", "r1", h0 - 3_600_000, 9, 9, 9, 9, 0, 0}, // before since
		{"hyapp", "r2", h0, 1, 0, 100, 0, 0, 0},
		{"other", "r1", h0, 7, 7, 7, 7, 0, 0},
	} {
		if _, err := m.DB.Exec(`INSERT INTO lucky_room_stats_hourly (app_code, room_id, hour_start_ms, draws, hits, coins_in, coins_out, rejections, rejected_coins)
			VALUES (?,?,?,?,?,?,?,?,?)`, r.app, r.room, r.hour, r.draws, r.hits, r.in, r.out, r.rej, r.rejCoin); err != nil {
			t.Fatal(err)
		}
	}
	srv := httptest.NewServer(newAPI(t, statsapi.Config{DefaultAppCode: "hyapp"}, m.DB).Handler())
	defer srv.Close()
	var got statsapi.LuckyRoomHours
	if code := get(t, srv, fmt.Sprintf("/api/v1/lucky/rooms/r1/hourly?since_ms=%d", h0+25*60_000), &got); code != http.StatusOK {
		t.Fatalf("status %d", code)
	}
	want := statsapi.LuckyRoomHours{RoomID: "r1", Hours: []statsapi.LuckyRoomHour{
		{HourStartMs: h0, Draws: 10, Hits: 2, CoinsIn: 1000, CoinsOut: 400, PayoutPPM: 400_000, Rejections: 1, RejectedCoins: 100},
		{HourStartMs: h0 + 3_600_000, Draws: 4, Hits: 1, CoinsIn: 400, CoinsOut: 1200, PayoutPPM: 3_000_000},
	}}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("got  %+v\nwant %+v", got, want)
	}
	got = statsapi.LuckyRoomHours{}
	if code := get(t, srv, fmt.Sprintf("/api/v1/lucky/rooms/nobody/hourly?since_ms=%d", h0), &got); code != http.StatusOK || got.RoomID != "nobody" || got.Hours == nil || len(got.Hours) != 0 {
		t.Fatalf("unknown room: %d %+v, want 200 and an empty list", code, got)
	}
	// Without since_ms: the last 24 hours, so none of these 2026 rows.
	if code := get(t, srv, "/api/v1/lucky/rooms/r1/hourly", &got); code != http.StatusOK || len(got.Hours) != 0 {
		t.Fatalf("default since: %d %+v", code, got)
	}
	for path, code := range map[string]string{
		"/api/v1/lucky/rooms/" + strings.Repeat("r", 65) + "/hourly":        "invalid_room_id",
		"/api/v1/lucky/rooms/r1/hourly?since_ms=yesterday":                  "invalid_since",
		"/api/v1/lucky/rooms/r1/hourly?since_ms=-5":                         "invalid_since",
		"/api/v1/lucky/rooms/r1/hourly?app_code=" + strings.Repeat("a", 33): "invalid_app_code",
	} {
		var body struct {
			Error struct{ Code string } `json:"error"`
		}
		if st := get(t, srv, path, &body); st != http.StatusBadRequest || body.Error.Code != code {
			t.Errorf("%s: %d %q, want 400 %s", path, st, body.Error.Code, code)
		}
	}
}
