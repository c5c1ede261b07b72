package statsapi

import (
	"context"
	"net/http"
	"strconv"
	"time"
)

// The room-level lucky signals (lucky_room_stats_hourly, written by the
// sink from the lucky events) on the internal listener:
//
//	GET /api/v1/lucky/rooms/{room_id}/hourly?since_ms=...&app_code=...
//
// answers the room's hours that start at or after since_ms (default: the
// last 24 hours), oldest first, at most MaxLuckyRoomHours of them. A room
// without draws gets an empty list, never 404.

// MaxLuckyRoomHours bounds one answer: 31 days of hours.
const MaxLuckyRoomHours = 31 * 24

// maxRoomID is the width of the room_id columns.
const maxRoomID = 64

// hourMs is one hour in milliseconds, the room facts' grain.
const hourMs = int64(time.Hour / time.Millisecond)

// LuckyRoomHour is one lucky_room_stats_hourly row: the draws of the hour
// starting at HourStartMs (UTC), their coins in and out and payout in ppm
// (coins_out per coin in), and the Executes rejected after room-service's
// debit with the coins they were debited.
type LuckyRoomHour struct {
	HourStartMs   int64 `json:"hour_start_ms"`
	Draws         int64 `json:"draws"`
	Hits          int64 `json:"hits"`
	CoinsIn       int64 `json:"coins_in"`
	CoinsOut      int64 `json:"coins_out"`
	PayoutPPM     int64 `json:"payout_ppm"`
	Rejections    int64 `json:"rejections"`
	RejectedCoins int64 `json:"rejected_coins"`
}

// LuckyRoomHours is the hourly route's answer.
type LuckyRoomHours struct {
	RoomID string          `json:"room_id"`
	Hours  []LuckyRoomHour `json:"hours"`
}

// LuckyRoomHours returns the room's hours starting at or after sinceMs,
// oldest first, at most limit of them.
func (s *Store) LuckyRoomHours(ctx context.Context, app, room string, sinceMs int64, limit int) ([]LuckyRoomHour, error) {
	rows, err := s.db.QueryContext(ctx, "SELECT hour_start_ms, draws, hits, coins_in, coins_out, payout_ppm, rejections, rejected_coins "+
		"FROM lucky_room_stats_hourly WHERE app_code = ? AND room_id = ? AND hour_start_ms >= ? ORDER BY hour_start_ms LIMIT ?",
		app, room, sinceMs, limit)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := []LuckyRoomHour{}
	for rows.Next() {
		var h LuckyRoomHour
		if err := rows.Scan(&h.HourStartMs, &h.Draws, &h.Hits, &h.CoinsIn, &h.CoinsOut, &h.PayoutPPM, &h.Rejections, &h.RejectedCoins); err != nil {
			return nil, err
		}
		out = append(out, h)
	}
	return out, rows.Err()
}

// ValidRoomID reports why room is not a room id the facts can hold ("" when
// it is one).
func ValidRoomID(room string) string {
	if room == "" || len(room) > maxRoomID {
		return "room_id must be 1 to " + strconv.Itoa(maxRoomID) + " bytes"
	}
	return ""
}

// roomIdentity is the lucky room routes' identity: {room_id} and
// ?app_code.
func (a *API) roomIdentity(r *http.Request) (subject, error) {
	room := r.PathValue("room_id")
	if why := ValidRoomID(room); why != "" {
		return subject{}, bad("invalid_room_id", "%s", why)
	}
	app, err := a.appCode(r.URL.Query().Get("app_code"))
	if err != nil {
		return subject{}, bad("invalid_app_code", "%v", err)
	}
	return subject{app: app, room: room}, nil
}

func (a *API) luckyRoomHourly(ctx context.Context, r *http.Request, who subject) (any, error) {
	since := time.Now().UnixMilli() - 24*hourMs
	if s := r.URL.Query().Get("since_ms"); s != "" {
		v, err := strconv.ParseInt(s, 10, 64)
		if err != nil || v < 0 {
			return nil, bad("invalid_since", "since_ms must be a non-negative integer of epoch milliseconds")
		}
		since = v
	}
	since -= since % hourMs // the hour it falls in counts
	hours, err := a.store.LuckyRoomHours(ctx, who.app, who.room, since, MaxLuckyRoomHours)
	if err != nil {
		return nil, err
	}
	return LuckyRoomHours{RoomID: who.room, Hours: hours}, nil
}
