package luckydraw

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/go-sql-driver/mysql"

	"github.com/hyapp/roomflow/schemas/envelope"
)

// MaxFundID is the width of lucky_pool_funds.fund_id, that of the other
// ids callers choose (lucky_draw_records.command_id).
const MaxFundID = 128

// ErrFundIDReused is a fund whose id was applied with another scope,
// amount or reserve floor: nothing was changed.
var ErrFundIDReused = errors.New("luckydraw: fund id already applied with other parameters")

// poolFund is one `pools fund`: id "" is a fund without an id.
type poolFund struct {
	id, app, scopeType, scopeID string
	amount                      int64
	floor                       *int64
}

func (f poolFund) String() string {
	floor := "reserve floor unchanged"
	if f.floor != nil {
		floor = fmt.Sprintf("reserve floor %d", *f.floor)
	}
	return fmt.Sprintf("%s/%s, amount %d, %s", f.scopeType, f.scopeID, f.amount, floor)
}

// FundPool adds amount coins to a pool's balance and funded in one
// upsert (creating the row), and sets its reserve_floor when reserveFloor
// is not nil. scopeType is platform (scopeID PlatformScopeID), room or gift.
func (a *Admin) FundPool(ctx context.Context, app, scopeType, scopeID string, amount int64, reserveFloor *int64) (Change, error) {
	return a.FundPoolOnce(ctx, "", app, scopeType, scopeID, amount, reserveFloor)
}

// FundPoolOnce is FundPool applied at most once per (app, fundID): the
// fund's lucky_pool_funds row is inserted in the transaction of the
// upsert and the admin trail. A repeat with the same scope, amount and
// reserve floor changes and logs nothing (its Change's Note says when the
// fund was applied); with others it is ErrFundIDReused. fundID "" is
// FundPool: every call adds amount.
func (a *Admin) FundPoolOnce(ctx context.Context, fundID, app, scopeType, scopeID string, amount int64, reserveFloor *int64) (Change, error) {
	f := poolFund{id: fundID, app: app, scopeType: scopeType, scopeID: scopeID, amount: amount, floor: reserveFloor}
	if err := f.check(); err != nil {
		return Change{}, err
	}
	q := `INSERT INTO lucky_pools (app_code, scope_type, scope_id, balance, funded, reserve_floor, updated_at_ms)
VALUES (?, ?, ?, ?, ?, ?, ?) ON DUPLICATE KEY UPDATE balance = balance + VALUES(balance), funded = funded + VALUES(funded),
	updated_at_ms = VALUES(updated_at_ms)`
	floor := int64(0)
	if reserveFloor != nil {
		floor = *reserveFloor
		q += `, reserve_floor = VALUES(reserve_floor)`
	}
	// A repeat returns its Change here, not to logged: it changed nothing,
	// so the trail gets no row.
	var repeat *Change
	out, err := a.logged(ctx, func(tx *sql.Tx, nowMs int64) ([]Change, error) {
		repeat = nil
		c := Change{AppCode: app, Command: "pools fund", Target: scopeType + "/" + scopeID}
		if fundID != "" {
			note, err := a.claimFund(ctx, tx, nowMs, f)
			if err != nil {
				return nil, err
			}
			if note != "" {
				c.Note = note
				c.Old, err = f.pool(ctx, tx, "")
				c.New, repeat = c.Old, &c
				return nil, err
			}
		}
		// The first read locks the row: a snapshot would miss a draw committed
		// before the upsert, and the trail's old value would not be what the
		// amount was added to.
		var err error
		if c.Old, err = f.pool(ctx, tx, ` FOR UPDATE`); err != nil {
			return nil, err
		}
		if _, err := tx.ExecContext(ctx, q, app, scopeType, scopeID, amount, amount, floor, nowMs); err != nil {
			return nil, err
		}
		c.New, err = f.pool(ctx, tx, "")
		if fundID != "" { // the trail names the id a repeat reports
			c.New += ", fund_id " + fundID
		}
		return []Change{c}, err
	})
	switch {
	case err != nil:
		return Change{}, fmt.Errorf("luckydraw: fund pool %s/%s: %w", scopeType, scopeID, err)
	case repeat != nil:
		return *repeat, nil
	}
	return out[0], nil
}

// check refuses what the upsert must not write.
func (f poolFund) check() error {
	// Every draw adds its inflow to the row after this: an unbounded amount
	// could leave no room in BIGINT for it (docs/design.md, Amount bounds).
	amountErr := envelope.CheckAmount("fund amount", f.amount, envelope.MaxPoolFundCoins)
	switch {
	case f.scopeType != "platform" && f.scopeType != "room" && f.scopeType != "gift":
		return fmt.Errorf("luckydraw: scope type %q is not platform, room or gift", f.scopeType)
	case f.scopeID == "" || len(f.scopeID) > MaxRoomID:
		return fmt.Errorf("luckydraw: scope id must be 1-%d bytes", MaxRoomID)
	case envelope.CheckID("scope id", f.scopeID) != nil: // the draws' pool key refuses it too
		return fmt.Errorf("luckydraw: scope id %q ends in a space", f.scopeID)
	case f.scopeType == "platform" && f.scopeID != PlatformScopeID: // no draw would read the coins
		return fmt.Errorf("luckydraw: the platform pool's scope id is %s, not %q", PlatformScopeID, f.scopeID)
	case amountErr != nil:
		return fmt.Errorf("luckydraw: %w", amountErr)
	case f.floor != nil && *f.floor < 0:
		return fmt.Errorf("luckydraw: reserve floor %d is negative", *f.floor)
	case len(f.app) > maxAppCode:
		return fmt.Errorf("luckydraw: app_code longer than %d bytes", maxAppCode)
	case len(f.id) > MaxFundID:
		return fmt.Errorf("luckydraw: fund id longer than %d bytes", MaxFundID)
	case envelope.CheckID("fund id", f.id) != nil: // utf8mb4_bin pads: "f1 " would be a repeat of "f1"
		return fmt.Errorf("luckydraw: fund id %q ends in a space", f.id)
	}
	return nil
}

// pool describes the pool row as tx reads it (lock: "" or a locking
// clause); "" when there is none.
func (f poolFund) pool(ctx context.Context, tx *sql.Tx, lock string) (string, error) {
	var bal, fl int64
	err := tx.QueryRowContext(ctx, `SELECT balance, reserve_floor FROM lucky_pools WHERE app_code = ? AND scope_type = ? AND scope_id = ?`+lock,
		f.app, f.scopeType, f.scopeID).Scan(&bal, &fl)
	if errors.Is(err, sql.ErrNoRows) {
		return "", nil
	}
	return fmt.Sprintf("balance %d, reserve_floor %d", bal, fl), err
}

// claimFund inserts f's lucky_pool_funds row, before the pool is touched.
// A concurrent run of the same id waits on the uncommitted row: it gets
// the duplicate key once that run commits (and reads its row), or inserts
// its own if that run rolls back, so exactly one applies. It returns ""
// when f is to be applied, the note of a repeat when it was already, and
// ErrFundIDReused when it was with other parameters.
func (a *Admin) claimFund(ctx context.Context, tx *sql.Tx, nowMs int64, f poolFund) (string, error) {
	var floor sql.NullInt64
	if f.floor != nil {
		floor = sql.NullInt64{Int64: *f.floor, Valid: true}
	}
	_, err := tx.ExecContext(ctx, `INSERT INTO lucky_pool_funds (app_code, fund_id, scope_type, scope_id, amount, reserve_floor,
	operator, created_at_ms) VALUES (?, ?, ?, ?, ?, ?, ?, ?)`, f.app, f.id, f.scopeType, f.scopeID, f.amount, floor, a.cfg.Operator, nowMs)
	var me *mysql.MySQLError
	if err == nil || !errors.As(err, &me) || me.Number != 1062 {
		return "", err
	}
	// Handled here, not returned: InTx would retry a duplicate key. A
	// locking read sees the committed row whatever the snapshot.
	prior := poolFund{id: f.id, app: f.app}
	var operator string
	var atMs int64
	if err := tx.QueryRowContext(ctx, `SELECT scope_type, scope_id, amount, reserve_floor, operator, created_at_ms FROM lucky_pool_funds
WHERE app_code = ? AND fund_id = ? LOCK IN SHARE MODE`, f.app, f.id).Scan(&prior.scopeType, &prior.scopeID, &prior.amount, &floor, &operator, &atMs); err != nil {
		return "", err
	}
	if floor.Valid {
		prior.floor = &floor.Int64
	}
	when := "at " + msTime(atMs)
	if operator != "" {
		when += " by " + operator
	}
	if prior.String() != f.String() {
		return "", fmt.Errorf("%w: %q applied %s as %s, not %s; nothing was changed", ErrFundIDReused, f.id, when, prior, f)
	}
	return fmt.Sprintf("fund id %q already applied %s: nothing changed", f.id, when), nil
}
