package luckydraw

import (
	"time"

	"github.com/hyapp/roomflow/domain/lucky"
)

// The risk windows and caps of a draw, pure: the draw transaction
// (counterRows, riskLimits) and the rule simulator
// (services/luckydraw/simulate) both decide with them, so a simulated
// draw is capped exactly as a live one.

// Caps are the risk caps the config holds (the rule row holds
// max_single_payout, max_user_daily_payout and max_room_hourly_payout);
// 0 = no cap. Config's fields of the same names.
type Caps struct {
	MaxDeviceDailyPayout  int64
	MaxAnchorDailyPayout  int64
	ActivityPeriodPayout  int64
	ActivityPeriodStartMs int64
	ActivityPeriodEndMs   int64
}

// caps are c's risk caps.
func (c *Config) caps() Caps {
	return Caps{MaxDeviceDailyPayout: c.MaxDeviceDailyPayout, MaxAnchorDailyPayout: c.MaxAnchorDailyPayout,
		ActivityPeriodPayout: c.ActivityPeriodPayout, ActivityPeriodStartMs: c.ActivityPeriodStartMs, ActivityPeriodEndMs: c.ActivityPeriodEndMs}
}

// Cap is the cap of a risk counter scope under rule; 0 = no cap.
func (c Caps) Cap(rule *lucky.Rule, scope string) int64 {
	switch scope {
	case "user":
		return rule.MaxUserDailyPayout
	case "room":
		return rule.MaxRoomHourlyPayout
	case "device":
		return c.MaxDeviceDailyPayout
	case "anchor":
		return c.MaxAnchorDailyPayout
	case "activity":
		return c.ActivityPeriodPayout
	}
	return 0
}

// activityOn is whether nowMs falls in the activity period.
func (c Caps) activityOn(nowMs int64) bool {
	return c.ActivityPeriodEndMs > c.ActivityPeriodStartMs && nowMs >= c.ActivityPeriodStartMs && nowMs < c.ActivityPeriodEndMs
}

// Party is who a draw counts against: its sender, device ("" unknown),
// room and target ("" none: a gift to the room), as the counters'
// scope_id.
type Party struct {
	Sender, Device, Room, Target string
}

// Window is one risk counter window a draw touches.
type Window struct {
	Scope, ScopeID, Window string
	Start, End             int64
}

const (
	hourMs = int64(time.Hour / time.Millisecond)
	dayMs  = 24 * hourMs
)

func dayStart(ms int64) int64 { return ms - ms%dayMs }

func hourStart(ms int64) int64 { return ms - ms%hourMs }

// Windows appends to dst the risk counter windows a draw of p at nowMs
// touches (UTC windows): the sender's day, the device's day (a known
// device only: AppendRiskLimits caps an unknown one), the room's hour, the
// target's day and the activity period while it runs.
func (c Caps) Windows(dst []Window, p Party, nowMs int64) []Window {
	day, hour := dayStart(nowMs), hourStart(nowMs)
	dst = append(dst, Window{"user", p.Sender, "daily", day, day + dayMs})
	if p.Device != "" {
		dst = append(dst, Window{"device", p.Device, "daily", day, day + dayMs})
	}
	dst = append(dst, Window{"room", p.Room, "hourly", hour, hour + hourMs})
	if p.Target != "" {
		dst = append(dst, Window{"anchor", p.Target, "daily", day, day + dayMs})
	}
	if c.activityOn(nowMs) {
		dst = append(dst, Window{"activity", "period", "period", c.ActivityPeriodStartMs, c.ActivityPeriodEndMs})
	}
	return dst
}

// AppendRiskLimits appends a draw's caps to dst: max_single_payout, then
// one per window of ws with a cap, used(i) being what ws[i]'s window has
// paid before this draw. A window without a cap has no quota to check.
// A draw without a device (no device window in ws) under a device cap
// gets that cap used up: an unknown device has nothing left (LUCKY-11),
// else leaving device_id out would escape the cap. No counter row stands
// for it. No target is not so capped: a gift to the room is legitimate.
func (c Caps) AppendRiskLimits(dst []RiskLimit, rule *lucky.Rule, ws []Window, used func(i int) int64) []RiskLimit {
	dst = append(dst, RiskLimit{Scope: "single", Window: "draw", Cap: rule.MaxSinglePayout})
	device := false
	for i, w := range ws {
		device = device || w.Scope == "device"
		if cp := c.Cap(rule, w.Scope); cp > 0 {
			dst = append(dst, RiskLimit{Scope: w.Scope, ScopeID: w.ScopeID, Window: w.Window, Cap: cp, Used: used(i)})
		}
	}
	if cp := c.MaxDeviceDailyPayout; cp > 0 && !device {
		dst = append(dst, RiskLimit{Scope: "device", Window: "daily", Cap: cp, Used: cp})
	}
	return dst
}
