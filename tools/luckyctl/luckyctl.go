// Package luckyctl is what the `roomflow lucky` operator commands do
// beyond their flags: it checks their arguments before anything connects
// (a mistake is a usage error, exit 2) and prints what the draw service's
// Admin, audit and stats return, one line per change, draw, version or
// hour. The changes themselves are services/luckydraw's Admin.
package luckyctl

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/hyapp/roomflow/internal/cfgerr"
	"github.com/hyapp/roomflow/schemas/envelope"
	"github.com/hyapp/roomflow/services/luckydraw"
)

// PrintChanges prints one line per change ("[app ]command target: old ->
// new"), then its note and warning.
func PrintChanges(w io.Writer, cs ...luckydraw.Change) {
	for _, c := range cs {
		app := ""
		if c.AppCode != "" {
			app = c.AppCode + " "
		}
		fmt.Fprintf(w, "%s%s %s: %s -> %s\n", app, c.Command, c.Target, orNone(c.Old), orNone(c.New))
		if c.Note != "" {
			fmt.Fprintf(w, "  note: %s\n", c.Note)
		}
		if c.Warning != "" {
			fmt.Fprintf(w, "  WARNING: %s\n", c.Warning)
		}
	}
}

// orNone shows an empty value as "(none)".
func orNone(v string) string {
	if v == "" {
		return "(none)"
	}
	return v
}

// AuditOptions choose the draws `lucky audit` recomputes: one DrawID, or
// every draw of the last Since.
type AuditOptions struct {
	DrawID string
	Since  time.Duration
}

// Check refuses options that choose no draws or both ways, or a --since
// that is not positive (a negative one would audit no draw and pass): a
// usage error.
func (o AuditOptions) Check() error {
	if (o.DrawID == "") == (o.Since == 0) {
		return cfgerr.Usage(errors.New("give exactly one of --draw-id and --since"))
	}
	if o.DrawID == "" {
		return CheckSince(o.Since)
	}
	return nil
}

// Audit recomputes the chosen draws from their audit material with key
// (lucky.audit_key), prints a line per draw that differs and a summary,
// and fails when any differs (exit 1) or the key is not set.
func Audit(ctx context.Context, db *sql.DB, key string, o AuditOptions, now time.Time, w io.Writer) error {
	if key == "" {
		return errors.New("lucky.audit_key: must be set (or ROOMFLOW_LUCKY_AUDIT_KEY)")
	}
	q := luckydraw.AuditQuery{DrawID: o.DrawID}
	if o.Since > 0 {
		q.SinceMs = now.Add(-o.Since).UnixMilli()
	}
	res, err := luckydraw.Audit(ctx, db, key, q)
	if err != nil {
		return err
	}
	bad := 0
	for _, r := range res {
		if !r.OK {
			bad++
			fmt.Fprintf(w, "MISMATCH %s: %v\n", r.DrawID, r.Mismatches)
		}
	}
	fmt.Fprintf(w, "audited %d draws: %d match, %d differ\n", len(res), len(res)-bad, bad)
	if bad > 0 {
		return fmt.Errorf("%d of %d draws do not match their audit material", bad, len(res))
	}
	return nil
}

// CheckRuleStatus refuses a status a rule version cannot have.
func CheckRuleStatus(status string) error {
	if !slices.Contains([]string{"draft", "active", "paused", "retired"}, status) {
		return cfgerr.Usage(fmt.Errorf("status must be draft, active, paused or retired (got %q)", status))
	}
	return nil
}

// PrintRuleVersions prints one line per version: gift/version, status,
// effective time (UTC) and whether it draws, is scheduled, or why not.
func PrintRuleVersions(w io.Writer, vs []luckydraw.VersionState) {
	for _, v := range vs {
		state := "does not draw: " + v.Why
		switch {
		case v.Draws:
			state = "DRAWS"
		case v.Scheduled:
			state = v.Why
		}
		fmt.Fprintf(w, "%s/%s\t%s\teffective %s\t%s\n", v.GiftID, v.Version, v.Status,
			time.UnixMilli(v.EffectiveAtMs).UTC().Format(time.RFC3339), state)
	}
}

// CheckFund refuses a pool scope or amounts `lucky pools fund` cannot
// write.
func CheckFund(scopeType, scopeID string, amount, floor int64) error {
	switch {
	case !slices.Contains([]string{"platform", "room", "gift"}, scopeType):
		return cfgerr.Usage(fmt.Errorf("--scope-type must be platform, room or gift (got %q)", scopeType))
	case scopeID == "" || len(scopeID) > luckydraw.MaxRoomID || envelope.CheckID("--scope-id", scopeID) != nil:
		return cfgerr.Usage(fmt.Errorf("--scope-id must be 1-%d bytes, not ending in a space (got %q)", luckydraw.MaxRoomID, scopeID))
	case scopeType == "platform" && scopeID != luckydraw.PlatformScopeID:
		return cfgerr.Usage(fmt.Errorf("--scope-id of the platform pool is %s (got %q): no draw reads another", luckydraw.PlatformScopeID, scopeID))
	case amount < 0 || floor < 0:
		return cfgerr.Usage(fmt.Errorf("--amount and --reserve-floor must be >= 0"))
	case amount > envelope.MaxPoolFundCoins:
		return cfgerr.Usage(fmt.Errorf("--amount must be at most %d coins a fund (got %d)", int64(envelope.MaxPoolFundCoins), amount))
	}
	return nil
}

// CheckFundID refuses a `lucky pools fund --fund-id` lucky_pool_funds
// cannot key: over its width, ending in a space (utf8mb4_bin pads, so
// "f1 " would be a repeat of "f1"), or given empty (a script's unset
// variable would fund on every retry).
func CheckFundID(id string, given bool) error {
	if given && (id == "" || len(id) > luckydraw.MaxFundID || envelope.CheckID("--fund-id", id) != nil) {
		return cfgerr.Usage(fmt.Errorf("--fund-id must be 1-%d bytes, not ending in a space (got %q)", luckydraw.MaxFundID, envelope.Clip(id, 64)))
	}
	return nil
}

// ParseSwitch checks `lucky switch NAME VALUE [--room ROOM]` and returns
// the override to store: on or off, nil for default (remove it). A room
// goes with the per-room switches and only with them.
func ParseSwitch(name, value, room string) (*bool, error) {
	var v *bool
	switch value {
	case "on", "off":
		b := value == "on"
		v = &b
	case "default":
	default:
		return nil, cfgerr.Usage(fmt.Errorf("switch value must be on, off or default (got %q)", value))
	}
	if !slices.Contains(luckydraw.SwitchNames, name) {
		return nil, cfgerr.Usage(fmt.Errorf("unknown switch %q (one of %s)", name, strings.Join(luckydraw.SwitchNames, ", ")))
	}
	perRoom := name == luckydraw.SwitchRoomScopePaused || name == luckydraw.SwitchPilotRoom
	if perRoom != (room != "") || len(room) > luckydraw.MaxRoomID || envelope.CheckID("--room", room) != nil {
		return nil, cfgerr.Usage(fmt.Errorf("--room: a room id of 1-%d bytes, not ending in a space, with %s or %s, and only with them", luckydraw.MaxRoomID,
			luckydraw.SwitchRoomScopePaused, luckydraw.SwitchPilotRoom))
	}
	return v, nil
}

// CheckTierArgs refuses a GIFT_ID, RULE_VERSION or TIER_ID that is empty
// or longer than its column (64 bytes).
func CheckTierArgs(gift, version, tier string) error {
	for i, arg := range []string{gift, version, tier} {
		if arg == "" || len(arg) > 64 {
			return cfgerr.Usage(fmt.Errorf("%s must be 1-64 bytes (got %q)", []string{"GIFT_ID", "RULE_VERSION", "TIER_ID"}[i], arg))
		}
	}
	return nil
}

// CheckSince refuses a --since that is not a positive duration.
func CheckSince(since time.Duration) error {
	if since <= 0 {
		return cfgerr.Usage(fmt.Errorf("--since must be a positive duration (got %s)", since))
	}
	return nil
}

// PrintAdminLog prints one line per logged change (time, operator@host,
// app, command, target, old -> new) and how many there were in the last
// since.
func PrintAdminLog(w io.Writer, es []luckydraw.LogEntry, since time.Duration) {
	for _, e := range es {
		fmt.Fprintf(w, "%s\t%s@%s\t%s\t%s\t%s\t%s -> %s\n", time.UnixMilli(e.AtMs).UTC().Format(time.RFC3339Nano),
			e.Operator, e.Host, orNone(e.AppCode), e.Command, e.Target, orNone(e.Old), orNone(e.New))
	}
	fmt.Fprintf(w, "%d changes in the last %s\n", len(es), since)
}
