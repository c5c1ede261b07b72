package luckydraw

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/hyapp/roomflow/internal/promreg"
)

// RejectRoomNotInPilot is the answer for a room outside the pilot list
// while pilot_mode is on (CheckLuckyGift; Execute records it like every
// rejection).
const RejectRoomNotInPilot = "room_not_in_pilot"

// MaxPilotRooms bounds the pilot list: the per-room pilot metrics carry a
// room_id label, so the list is what keeps their series few.
const MaxPilotRooms = 50

// ErrPilotFull is a `switch pilot_room on` beyond MaxPilotRooms rooms of
// an app: nothing was changed.
var ErrPilotFull = errors.New("luckydraw: the pilot room list is full")

// switchEffects runs, in a switch change's transaction after its write,
// what a switch needs beyond its row: the pilot list's bound and the
// warnings of pilot mode and large tiers.
func (a *Admin) switchEffects(ctx context.Context, tx *sql.Tx, app, name string, v *bool, c *Change) error {
	switch {
	case name == SwitchLargeTier && v != nil && !*v:
		return a.largeTierSwitchNote(ctx, tx, c)
	case name == SwitchPilotRoom, name == SwitchPilotMode:
		// The fence serializes operator changes, so this count is the
		// list as the change leaves it.
		var rooms, modeRows, modeOn int64
		if err := tx.QueryRowContext(ctx, `SELECT COALESCE(SUM(name = ? AND scope_id <> '' AND enabled), 0),
	COALESCE(SUM(name = ? AND scope_id = ''), 0), COALESCE(SUM(name = ? AND scope_id = '' AND enabled), 0)
FROM lucky_switches WHERE app_code = ?`, SwitchPilotRoom, SwitchPilotMode, SwitchPilotMode, app).Scan(&rooms, &modeRows, &modeOn); err != nil {
			return fmt.Errorf("luckydraw: count pilot rooms: %w", err)
		}
		if name == SwitchPilotRoom && v != nil && *v && rooms > MaxPilotRooms {
			return fmt.Errorf("%w: %s would be room %d of at most %d (switch pilot_room off --room R first)",
				ErrPilotFull, c.Target, rooms, MaxPilotRooms)
		}
		c.Note = fmt.Sprintf("%d pilot rooms", rooms)
		// Without an override the configured start value decides.
		if (modeOn > 0 || modeRows == 0 && a.cfg.PilotMode) && rooms == 0 {
			c.Warning = "pilot_mode is on and the pilot room list is empty: every lucky gift of " + orApp(app) +
				" answers room_not_in_pilot (add rooms with switch pilot_room on --room R)"
		}
	}
	return nil
}

func orApp(app string) string {
	if app == "" {
		return "the default app"
	}
	return "app " + app
}

// pilotMetrics are the per-room series of the pilot rooms, and of no
// other room: a room_id label per arbitrary room would grow without
// bound, the pilot list holds at most MaxPilotRooms per app. They count
// what the draw service committed (the room-level facts of
// lucky_room_stats_hourly, live): draws, hits, the coins the draws took
// in (coin_spent) and paid out, and the recorded rejections.
type pilotMetrics struct {
	draws, hits, coinsIn, coinsOut, rejections *prometheus.CounterVec

	mu    sync.Mutex
	rooms map[string]map[string]bool // app -> rooms with series
}

func newPilotMetrics(reg prometheus.Registerer) *pilotMetrics {
	vec := func(name, help string) *prometheus.CounterVec {
		return promreg.Register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{Name: "roomflow_lucky_pilot_room_" + name,
			Help: help + " Pilot rooms only (switch pilot_room on; at most 50 per app), whether pilot_mode is on or not."},
			[]string{"app_code", "room_id"}))
	}
	return &pilotMetrics{
		draws:      vec("draws_total", "Lucky draws committed in a pilot room."),
		hits:       vec("hits_total", "Lucky draws committed in a pilot room that pay a reward."),
		coinsIn:    vec("coins_in_total", "coin_spent of the lucky draws committed in a pilot room."),
		coinsOut:   vec("coins_out_total", "Reward coins of the lucky draws committed in a pilot room."),
		rejections: vec("rejections_total", "Executes rejected (and recorded, to refund) in a pilot room."),
		rooms:      map[string]map[string]bool{},
	}
}

func (m *pilotMetrics) vecs() []*prometheus.CounterVec {
	return []*prometheus.CounterVec{m.draws, m.hits, m.coinsIn, m.coinsOut, m.rejections}
}

// record counts a committed batch of app: its new outcomes (not the
// stored ones answered again) in the rooms of pilot, the list as the
// batch read it after the fence. It keeps the series to that list: a
// listed room's series exist from the first batch after it joined (at 0,
// so rate() and the alert see it), a room off the list loses them.
func (m *pilotMetrics) record(app string, pilot map[string]bool, reqs []*drawReq, res []drawResult) {
	m.mu.Lock()
	defer m.mu.Unlock()
	seen := m.rooms[app]
	if len(pilot) == 0 && len(seen) == 0 {
		return
	}
	for room := range seen {
		if !pilot[room] {
			for _, v := range m.vecs() {
				v.DeleteLabelValues(app, room)
			}
			delete(seen, room)
		}
	}
	if seen == nil {
		seen = map[string]bool{}
		m.rooms[app] = seen
	}
	for room := range pilot {
		if !seen[room] {
			for _, v := range m.vecs() {
				v.WithLabelValues(app, room)
			}
			seen[room] = true
		}
	}
	for i, r := range reqs {
		if d := res[i]; pilot[r.roomID] && !d.duplicate && d.conflict == nil {
			switch {
			case d.reject != "":
				m.rejections.WithLabelValues(app, r.roomID).Inc()
			default:
				m.draws.WithLabelValues(app, r.roomID).Inc()
				m.coinsIn.WithLabelValues(app, r.roomID).Add(float64(r.coinSpent))
				if d.rewardCoins > 0 {
					m.hits.WithLabelValues(app, r.roomID).Inc()
					m.coinsOut.WithLabelValues(app, r.roomID).Add(float64(d.rewardCoins))
				}
			}
		}
	}
}

// WarnEmptyPilot logs a WARN when pilot_mode is on for the configured
// app_code (override or start value) and the pilot list is empty: every
// lucky gift is then rejected room_not_in_pilot. `roomflow lucky` calls
// it at start, where a start value of pilot_mode: true meets no list.
func (s *Service) WarnEmptyPilot(ctx context.Context) error {
	v, err := s.sw.read(ctx, s.db, s.cfg.AppCode)
	if err != nil {
		return err
	}
	if v.global[SwitchPilotMode] && len(v.pilotRooms) == 0 {
		s.log.Warn("pilot_mode is on and the pilot room list is empty: every lucky gift answers room_not_in_pilot; add rooms with roomflow lucky switch pilot_room on --room R",
			"app_code", s.cfg.AppCode)
	}
	return nil
}
