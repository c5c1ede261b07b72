package luckydraw

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/hyapp/roomflow/schemas/envelope"
)

// The run-time kill switches of LUCKY-14 (lucky_switches.name).
const (
	SwitchGlobal          = "global_lucky_gift_enabled"
	SwitchLargeTier       = "large_tier_enabled"
	SwitchWalletDispatch  = "wallet_credit_dispatch"
	SwitchRoomScopePaused = "room_scope_paused" // per room: scope_id = room_id, enabled = paused
	// Pilot rooms (issue 31): while pilot_mode is on, only the rooms with
	// pilot_room on draw (scope_id = room_id, at most MaxPilotRooms).
	SwitchPilotMode = "pilot_mode"
	SwitchPilotRoom = "pilot_room"
)

// SwitchNames are the switches SetSwitch knows.
var SwitchNames = []string{SwitchGlobal, SwitchLargeTier, SwitchWalletDispatch, SwitchRoomScopePaused, SwitchPilotMode, SwitchPilotRoom}

// SetSwitch stores an operator override of a kill switch for app (the
// admin CLI's `roomflow lucky switch`): v true/false is written and wins
// over the configured start value; v nil deletes the override (back to
// the configuration). For room_scope_paused, scopeID is the room and true
// pauses it; the global switches take an empty scopeID. Draws see the
// change when it returns (the fence), CheckLuckyGift and the outbox
// worker's dispatch within SwitchCacheTTL (at most 1s).
func (a *Admin) SetSwitch(ctx context.Context, app, name, scopeID string, v *bool) (Change, error) {
	switch name {
	case SwitchGlobal, SwitchLargeTier, SwitchWalletDispatch, SwitchPilotMode:
		if scopeID != "" {
			return Change{}, fmt.Errorf("luckydraw: switch %s takes no scope id", name)
		}
	case SwitchRoomScopePaused, SwitchPilotRoom:
		// A draw's room never ends in a space (validate.go): such a row
		// would pause or list no room.
		if scopeID == "" || len(scopeID) > MaxRoomID || envelope.CheckID("room id", scopeID) != nil {
			return Change{}, fmt.Errorf("luckydraw: switch %s needs a room id of 1-%d bytes, not ending in a space", name, MaxRoomID)
		}
	default:
		return Change{}, fmt.Errorf("luckydraw: unknown switch %q", name)
	}
	if len(app) > maxAppCode {
		return Change{}, fmt.Errorf("luckydraw: app_code longer than %d bytes", maxAppCode)
	}
	target := name
	if scopeID != "" {
		target += " " + scopeID
	}
	out, err := a.change(ctx, func(tx *sql.Tx, nowMs int64) ([]Change, error) {
		c := Change{AppCode: app, Command: "switch", Target: target, Old: "default", New: "default"}
		var on bool
		switch err := tx.QueryRowContext(ctx, `SELECT enabled FROM lucky_switches WHERE app_code = ? AND name = ? AND scope_id = ?`,
			app, name, scopeID).Scan(&on); {
		case err == nil:
			c.Old = onOff(on)
		case !errors.Is(err, sql.ErrNoRows):
			return nil, err
		}
		var err error
		if v == nil {
			_, err = tx.ExecContext(ctx, `DELETE FROM lucky_switches WHERE app_code = ? AND name = ? AND scope_id = ?`, app, name, scopeID)
		} else {
			c.New = onOff(*v)
			_, err = tx.ExecContext(ctx, `INSERT INTO lucky_switches (app_code, name, scope_id, enabled, updated_at_ms)
VALUES (?, ?, ?, ?, ?) ON DUPLICATE KEY UPDATE enabled = VALUES(enabled), updated_at_ms = VALUES(updated_at_ms)`,
				app, name, scopeID, *v, nowMs)
		}
		if err == nil {
			err = a.switchEffects(ctx, tx, app, name, v, &c)
		}
		return []Change{c}, err
	})
	if err != nil {
		return Change{}, fmt.Errorf("luckydraw: set switch %s: %w", name, err)
	}
	return out[0], nil
}

func onOff(on bool) string {
	if on {
		return "on"
	}
	return "off"
}

// switchView is an app's switches at one moment.
type switchView struct {
	global      map[string]bool // the global switches, overrides applied
	pausedRooms map[string]bool
	pilotRooms  map[string]bool
}

// switches reads lucky_switches per app_code, cached for ttl.
type switches struct {
	db       *sql.DB
	ttl      time.Duration
	now      func() time.Time
	defaults map[string]bool

	mu    sync.Mutex
	cache map[string]cachedSwitches
}

type cachedSwitches struct {
	v   *switchView
	exp time.Time
}

func newSwitches(cfg Config, db *sql.DB) *switches {
	return &switches{db: db, ttl: cfg.SwitchCacheTTL, now: cfg.Now, cache: map[string]cachedSwitches{},
		defaults: map[string]bool{
			SwitchGlobal:         !cfg.DisableGlobalLuckyGift,
			SwitchLargeTier:      !cfg.DisableLargeTier,
			SwitchWalletDispatch: !cfg.DisableWalletCreditDispatch,
			SwitchPilotMode:      cfg.PilotMode,
		}}
}

// get returns app's switches, read at most ttl ago (CheckLuckyGift and
// the outbox worker's dispatch switch; draws read them in their
// transaction). A database error is returned (the caller fails the
// request retryably).
func (s *switches) get(ctx context.Context, app string) (*switchView, error) {
	now := s.now()
	s.mu.Lock()
	c, ok := s.cache[app]
	s.mu.Unlock()
	if ok && now.Before(c.exp) {
		return c.v, nil
	}
	v, err := s.read(ctx, s.db, app)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	s.cache[app] = cachedSwitches{v: v, exp: now.Add(s.ttl)}
	s.mu.Unlock()
	return v, nil
}

// read reads app's switches through q, uncached.
func (s *switches) read(ctx context.Context, q querier, app string) (*switchView, error) {
	rows, err := q.QueryContext(ctx, `SELECT name, scope_id, enabled FROM lucky_switches WHERE app_code = ?`, app)
	if err != nil {
		return nil, fmt.Errorf("luckydraw: read switches: %w", err)
	}
	v := s.newView()
	if err := eachRow(rows, func(rows *sql.Rows) error {
		var name, scope string
		var on bool
		err := rows.Scan(&name, &scope, &on)
		v.add(s.defaults, name, scope, on)
		return err
	}); err != nil {
		return nil, fmt.Errorf("luckydraw: read switches: %w", err)
	}
	return v, nil
}

// newView is a switchView holding the configured start values.
func (s *switches) newView() *switchView {
	v := &switchView{global: map[string]bool{}, pausedRooms: map[string]bool{}, pilotRooms: map[string]bool{}}
	for k, d := range s.defaults {
		v.global[k] = d
	}
	return v
}

// add applies one lucky_switches row (an operator override) to v; a
// global switch not in defaults (unknown to this build) is ignored.
func (v *switchView) add(defaults map[string]bool, name, scope string, on bool) {
	switch {
	case name == SwitchRoomScopePaused && scope != "":
		if on {
			v.pausedRooms[scope] = true
		}
	case name == SwitchPilotRoom && scope != "":
		if on {
			v.pilotRooms[scope] = true
		}
	case scope == "":
		if _, known := defaults[name]; known {
			v.global[name] = on
		}
	}
}

// reject is the kill switches' answer for room: "" when a lucky gift may
// be drawn.
func (v *switchView) reject(room string) string {
	switch {
	case !v.global[SwitchGlobal]:
		return RejectGlobalDisabled
	case v.pausedRooms[room]:
		return RejectRoomPaused
	case v.global[SwitchPilotMode] && !v.pilotRooms[room]:
		return RejectRoomNotInPilot
	}
	return ""
}
