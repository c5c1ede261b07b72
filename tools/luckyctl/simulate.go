package luckyctl

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/hyapp/roomflow/domain/lucky"
	"github.com/hyapp/roomflow/internal/cfgerr"
	"github.com/hyapp/roomflow/internal/config"
	"github.com/hyapp/roomflow/services/luckydraw"
	"github.com/hyapp/roomflow/services/luckydraw/simulate"
)

// SimulateOptions are `lucky rules simulate`'s arguments and flags.
type SimulateOptions struct {
	Files   []string // rule files, one per gift
	AppCode string   // "": the configured app_code
	// FromMySQL reads the app's starting pools from lucky_pools (rooms by
	// balance, largest first, onto room-0, room-1, ...); the *Balance and
	// *Floor flags fill the pools it lacks.
	FromMySQL                                 bool
	PlatformBalance, GiftBalance, RoomBalance int64
	PlatformFloor, GiftFloor, RoomFloor       int64
	Rooms, Users                              int
	RoomSkew, UserSkew                        float64
	GiftMix                                   string // "": every gift, gift_count 1, equal weights
	Draws                                     int64
	Rate, Hours                               float64
	RateSet, DrawsSet                         bool // --rate, --draws given (a given 0 is an error, not absent)
	Seed                                      uint64
	Report                                    string // directory of report.md and its charts; "": none
}

// simFlags maps simulate.Config's fields to the flags that set them.
var simFlags = map[string]string{"rules": "FILE", "rooms": "--rooms", "users": "--users", "room_skew": "--room-skew",
	"user_skew": "--user-skew", "hours": "--hours", "draws": "--draws", "rate": "--rate", "gift_mix": "--gift-mix"}

// SimulateConfig checks o against cfg before anything connects and
// returns the simulation without its MySQL pools: every mistake is a
// usage error (exit 2) naming the flag, file or rule field.
func SimulateConfig(cfg *config.Config, o SimulateOptions, nowMs int64) (simulate.Config, error) {
	usage := func(format string, args ...any) (simulate.Config, error) {
		return simulate.Config{}, cfgerr.Usage(fmt.Errorf(format, args...))
	}
	switch {
	case (o.Draws != 0 || o.DrawsSet) && o.RateSet:
		return usage("--draws and --rate: give one of them, not both")
	case o.RateSet && !(o.Rate > 0):
		return usage("--rate must be > 0 draws a second (got %v)", o.Rate)
	case o.Draws < 0 || (o.Draws == 0 && !o.RateSet):
		return usage("--draws must be > 0 (got %d), or give --rate", o.Draws)
	case o.PlatformBalance < 0 || o.GiftBalance < 0 || o.RoomBalance < 0 || o.PlatformFloor < 0 || o.GiftFloor < 0 || o.RoomFloor < 0:
		return usage("--platform-balance, --gift-balance, --room-balance and the --*-floor flags must be >= 0")
	}
	if o.AppCode == "" {
		o.AppCode = cfg.AppCode
	}
	if o.AppCode == "" || len(o.AppCode) > 32 {
		return usage("--app-code must be 1-32 bytes (got %q)", o.AppCode)
	}
	c := simulate.Config{Platform: simulate.Pool{Balance: o.PlatformBalance, ReserveFloor: o.PlatformFloor},
		Gift: simulate.Pool{Balance: o.GiftBalance, ReserveFloor: o.GiftFloor}, Room: simulate.Pool{Balance: o.RoomBalance, ReserveFloor: o.RoomFloor},
		LargeTierMinReward: cfg.Lucky.LargeTierMinReward, LargeTierEnabled: cfg.Lucky.Switches.LargeTierEnabled, Seed: o.Seed,
		Traffic: simulate.Traffic{Rooms: o.Rooms, Users: o.Users, RoomSkew: o.RoomSkew, UserSkew: o.UserSkew, Draws: o.Draws, Rate: o.Rate, Hours: o.Hours}}
	caps, err := luckydraw.CapsFrom(cfg)
	if err != nil {
		return simulate.Config{}, err
	}
	c.Caps = caps
	for _, f := range o.Files {
		raw, err := os.ReadFile(f)
		if err != nil {
			return usage("FILE %s: %w", f, err)
		}
		r, err := lucky.ParseRuleFile(raw, nowMs)
		if err != nil {
			return usage("FILE %s: %w", f, err)
		}
		c.Rules = append(c.Rules, &r)
	}
	if c.Traffic.GiftMix, err = giftMix(o.GiftMix, c.Rules); err != nil {
		return usage("--gift-mix: %w", err)
	}
	if err := c.Check(); err != nil {
		var fe *simulate.FieldError
		if errors.As(err, &fe) {
			return usage("%s: %s", simFlags[fe.Field], fe.Msg)
		}
		return simulate.Config{}, cfgerr.Usage(err)
	}
	return c, nil
}

// giftMix is --gift-mix, or every rule's gift once, gift_count 1.
func giftMix(s string, rules []*lucky.Rule) ([]simulate.GiftShare, error) {
	if strings.TrimSpace(s) != "" {
		return simulate.ParseGiftMix(s)
	}
	var out []simulate.GiftShare
	for _, r := range rules {
		out = append(out, simulate.GiftShare{GiftID: r.GiftID, GiftCount: 1, Weight: 1})
	}
	return out, nil
}

// PoolsFromMySQL sets c's starting pools from app's lucky_pools rows: the
// platform pool, each simulated gift's, and the rooms by balance (largest
// first) onto room-0, room-1, ... An app without a row is a usage error
// naming --app-code.
func PoolsFromMySQL(ctx context.Context, db *sql.DB, app string, c *simulate.Config) error {
	rows, err := db.QueryContext(ctx, `SELECT scope_type, scope_id, balance, reserve_floor FROM lucky_pools WHERE app_code = ?
ORDER BY scope_type, balance DESC, scope_id`, app)
	if err != nil {
		return fmt.Errorf("read lucky_pools: %w", err)
	}
	defer rows.Close()
	n := 0
	c.Gifts = map[string]simulate.Pool{}
	for rows.Next() {
		var scope, id string
		var p simulate.Pool
		if err := rows.Scan(&scope, &id, &p.Balance, &p.ReserveFloor); err != nil {
			return err
		}
		n++
		switch scope {
		case "platform":
			c.Platform = p
		case "gift":
			c.Gifts[id] = p
		case "room":
			c.Rooms = append(c.Rooms, p)
		}
	}
	if err := rows.Err(); err != nil {
		return err
	}
	if n == 0 {
		return cfgerr.Usage(fmt.Errorf("--app-code: unknown app %q: it has no lucky_pools rows to start from", app))
	}
	return nil
}

// Simulate runs c and prints its summary to w, and writes the report
// under o.Report when set.
func Simulate(w io.Writer, c simulate.Config, o SimulateOptions, bandPPM int64) error {
	r, err := simulate.Run(c)
	if err != nil {
		return err
	}
	WriteSimSummary(w, r, bandPPM)
	if o.Report == "" {
		return nil
	}
	var names []string
	for _, g := range r.Gifts {
		names = append(names, g.GiftID+"/"+g.RuleVersion)
	}
	if err := WriteSimReport(o.Report, "Lucky rule simulation: "+strings.Join(names, ", "), r, bandPPM); err != nil {
		return err
	}
	fmt.Fprintf(w, "\nreport: %s/report.md\n", o.Report)
	return nil
}
