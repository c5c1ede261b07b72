package luckydraw

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
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
