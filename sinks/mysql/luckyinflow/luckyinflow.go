// Package luckyinflow is the MySQL sink's applier of the lucky pool inflow
// (hyapp.activity.lucky-pool-inflow.v1, activityv1.LuckyPoolInflow): each
// new inflow gets a row in lucky_pool_inflow_consumption, its integer ppm
// amounts are added to the daily inflow facts per scope
// (lucky_pool_inflow_daily), and, unless its draw already did, to the
// platform, room and gift rows of lucky_pools (balance and total_in,
// version + 1), pre-aggregated per row in a batch (BuildPools, BuildDaily).
//
// # Who adds a gift's inflow to lucky_pools
//
// The draw transaction of LUCKY-7 (`roomflow lucky`, services/luckydraw)
// adds a lucky gift's inflow to the pools itself, and the same gift later
// reaches this applier as a LuckyPoolInflow through the room processor. A
// gift's inflow must enter lucky_pools exactly once, whichever comes first,
// also when the gift event lands before its draw commits (a draw timing out
// after the debit, LUCKY-10) and for gifts in flight while the draw service
// takes over. The rule is one primary key: whichever of the draw transaction
// and this applier first inserts the gift's (app_code, draw_id) into
// lucky_pool_inflow_claims (claimed_by 'draw' or 'stream') adds the inflow;
// the other adds nothing. The draw does INSERT IGNORE of its claim and adds
// no inflow when it inserted no row. Per batch, for the inflows seen for the
// first time (Decide, a pure function, says what happens to each):
//
//   - The pool owner is read (lucky_pool_owner, id 1, LOCK IN SHARE MODE):
//     `roomflow lucky` inserts that row at its first start.
//   - Inflows with a draw_id: the existing claims of those draw ids are
//     locked (SELECT ... FOR UPDATE); the unclaimed ones are claimed
//     ('stream', one multi-row INSERT) and added to lucky_pools (status
//     consumed); those the draw claimed add nothing (status drawn); a
//     second gift event naming an already claimed draw adds nothing (status
//     duplicate_draw). This holds owned or not: before the draw service
//     exists nothing claims a draw first, so every inflow is added, as it
//     always was.
//   - Inflows without a draw_id: added while no owner row exists (status
//     consumed); not added once the draw service owns the pools (status
//     no_draw): no draw will ever pay from or reconcile them, and `roomflow
//     verify` reports them as gifts without a draw.
//   - A gift whose Execute the draw service rejected after the debit was
//     claimed 'rejected' by that rejection: nothing is added (status
//     rejected), neither to lucky_pools nor to the daily facts, since its
//     coins are refunded. When this applier had claimed and added it
//     first (a gift written as a pending draw, its retried Execute
//     rejected), the rejection takes the inflow back out of lucky_pools
//     and lucky_pool_inflow_daily in its transaction and marks the claim
//     and the consumption row 'reversed'; a later gift event naming that
//     draw adds nothing either (status rejected).
//   - Every other new inflow, whoever added it to the balances, adds its
//     layer amounts to lucky_pool_inflow_daily (app_code, UTC date of the
//     gift's occurred_at_ms, scope) with gift_count + 1.
//
// The claim races are settled by the claims table's primary key: the sink
// runs at READ COMMITTED, where a locking read of a row that does not
// exist locks nothing. If the draw's uncommitted claim is there before the
// sink's locking read, the read waits for the draw's commit and sees the
// claim; if it comes between the read and the sink's INSERT, the INSERT
// waits and then fails with a duplicate key (1062, mysqlerr.Retryable),
// and the retried batch sees the claim. If the sink's claim is first, the
// draw's INSERT IGNORE waits for the sink's commit and inserts nothing. The owner read orders with `roomflow lucky`'s insert of the
// owner row only once the row exists, so an inflow without a draw_id
// applied by a batch concurrent with that insert may still be added: it
// is then counted in total_in like every other addition (balance = funded
// + total_in - total_out still holds) and added once, never twice.
//
// Locks are taken in one order: the owner row, claims, consumption rows,
// lucky_pools (primary-key order), daily rows (primary-key order). The
// draw transaction should take its claim before its pool rows.
//
// Every inflow adds to the one (platform, global) row whatever its
// partition, so SharedRows is true: the sink applies all inflow partitions
// of a batch in one transaction and writes that row once.
package luckyinflow

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/protobuf/proto"

	"github.com/hyapp/roomflow/schemas/activityv1"
	"github.com/hyapp/roomflow/schemas/envelope"
	mysqlsink "github.com/hyapp/roomflow/sinks/mysql"
)

// Lucky pool scopes (LUCKY-4): one platform row, one per room, one per gift.
const (
	ScopePlatform = "platform"
	ScopeRoom     = "room"
	ScopeGift     = "gift"
	GlobalScopeID = "global"
)

// Column widths of the tables the applier writes (schemas/mysql/migrations).
const (
	maxEventID     = 160
	maxSourceID    = 128
	maxRoomID      = 64
	maxGiftID      = 64
	maxRuleVersion = 64
	maxDrawID      = 128
)

// occurred_at_ms must fall in MySQL's DATE range (years 1000 to 9999): the
// daily row's stat_date is its UTC date.
var (
	minOccurredAtMs = time.Date(1000, 1, 1, 0, 0, 0, 0, time.UTC).UnixMilli()
	maxOccurredAtMs = time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC).UnixMilli() - 1
)

// Config configures the applier (New): its topic and default app_code.
type Config = mysqlsink.ApplierConfig

// Applier applies the lucky pool inflow topic; register it with
// mysqlsink.Register.
type Applier struct {
	mysqlsink.Input
}

// New returns the applier of cfg.Topic; it fails on a config that does
// not validate.
func New(cfg Config) (*Applier, error) {
	in, err := mysqlsink.NewInput(cfg)
	if err != nil {
		return nil, err
	}
	return &Applier{in}, nil
}

// SharedRows is true: every partition adds to the platform row.
func (a *Applier) SharedRows() bool { return true }

// Decode parses and validates one inflow record (DecodeRecord).
func (a *Applier) Decode(rec *kgo.Record) (*activityv1.LuckyPoolInflow, error) {
	return DecodeRecord(rec, a.DefaultAppCode())
}

// DecodeRecord parses and validates one inflow record (Decode), plain or
// in the Confluent wire format (envelope.Payload decides per record): the
// sink and the rebuild read the same topic, both formats mixed after a
// switch.
func DecodeRecord(rec *kgo.Record, defaultAppCode string) (*activityv1.LuckyPoolInflow, error) {
	value, err := envelope.Payload(rec)
	if err != nil {
		return nil, mysqlsink.Invalid("decode", "%v", err)
	}
	return Decode(value, defaultAppCode)
}

// Decode parses and validates one lucky-pool-inflow record value; errors
// are *mysqlsink.InvalidRecordError. An empty app_code is defaultAppCode
// (mysqlsink.CheckEventKey).
func Decode(value []byte, defaultAppCode string) (*activityv1.LuckyPoolInflow, error) {
	var in activityv1.LuckyPoolInflow
	if err := proto.Unmarshal(value, &in); err != nil {
		return nil, mysqlsink.Invalid("decode", "%v", err)
	}
	k, err := mysqlsink.CheckEventKey(in.EventId, in.AppCode, defaultAppCode)
	if err != nil {
		return nil, err
	}
	in.AppCode = k.AppCode
	if in.RoomId == "" || in.GiftId == "" {
		return nil, mysqlsink.Invalid("missing_scope", "event_id %s: room_id and gift_id are required", in.EventId)
	}
	if in.PlatformIn < 0 || in.RoomIn < 0 || in.GiftIn < 0 || in.PoolIn < 0 {
		return nil, mysqlsink.Invalid("negative_inflow", "event_id %s", in.EventId)
	}
	// Every amount is at most the gift's heat, which is at most the bound.
	if err := mysqlsink.CheckAmounts(in.EventId,
		mysqlsink.Amount{Name: "heat_value", Value: in.HeatValue, Max: envelope.MaxGiftCoins},
		mysqlsink.Amount{Name: "pool_in", Value: in.PoolIn, Max: envelope.MaxGiftCoins},
		mysqlsink.Amount{Name: "platform_in", Value: in.PlatformIn, Max: envelope.MaxGiftCoins},
		mysqlsink.Amount{Name: "room_in", Value: in.RoomIn, Max: envelope.MaxGiftCoins},
		mysqlsink.Amount{Name: "gift_in", Value: in.GiftIn, Max: envelope.MaxGiftCoins},
	); err != nil {
		return nil, err
	}
	if in.OccurredAtMs < minOccurredAtMs || in.OccurredAtMs > maxOccurredAtMs {
		return nil, mysqlsink.Invalid("bad_occurred_at", "event_id %s: occurred_at_ms %d is outside years 1000-9999", in.EventId, in.OccurredAtMs)
	}
	if err := mysqlsink.CheckColumns(
		mysqlsink.Column{Name: "app_code", Value: in.AppCode, Max: mysqlsink.MaxAppCode},
		mysqlsink.Column{Name: "event_id", Value: in.EventId, Max: maxEventID},
		mysqlsink.Column{Name: "source_event_id", Value: in.SourceEventId, Max: maxSourceID},
		mysqlsink.Column{Name: "room_id", Value: in.RoomId, Max: maxRoomID, ID: true},
		mysqlsink.Column{Name: "gift_id", Value: in.GiftId, Max: maxGiftID, ID: true},
		mysqlsink.Column{Name: "rule_version", Value: in.RuleVersion, Max: maxRuleVersion},
		mysqlsink.Column{Name: "draw_id", Value: in.DrawId, Max: maxDrawID, ID: true},
	); err != nil {
		return nil, err
	}
	return &in, nil
}

// Statuses of lucky_pool_inflow_consumption: what the applier did with a
// new inflow (Decide).
const (
	// StatusConsumed: the sink added the inflow to lucky_pools.
	StatusConsumed = "consumed"
	// StatusDrawn: the gift's draw had claimed it and added the inflow.
	StatusDrawn = "drawn"
	// StatusNoDraw: the draw service owns the pools and the gift has no
	// draw_id; nothing was added to lucky_pools.
	StatusNoDraw = "no_draw"
	// StatusDuplicateDraw: another gift event had already claimed the same
	// draw_id (an upstream bug); nothing was added to lucky_pools.
	StatusDuplicateDraw = "duplicate_draw"
	// StatusRejected: the gift's ExecuteLuckyGiftDraw was rejected after
	// the debit (claimed 'rejected' or 'reversed'): its coins are
	// refunded, so nothing is added to lucky_pools nor to
	// lucky_pool_inflow_daily.
	StatusRejected = "rejected"
	// StatusReversed: the sink added the inflow (consumed), then the
	// gift's Execute was rejected and the draw service took it back out
	// of lucky_pools and lucky_pool_inflow_daily (services/luckydraw
	// ClaimedByReversal writes it). The applier never writes it.
	StatusReversed = "reversed"
)

// Claimants of lucky_pool_inflow_claims.claimed_by.
const (
	ClaimedByDraw   = "draw"
	ClaimedByStream = "stream"
	// ClaimedByRejection: the draw service rejected the gift's Execute
	// (services/luckydraw ClaimedByRejection writes it).
	ClaimedByRejection = "rejected"
	// ClaimedByReversal: the stream had claimed and added the inflow, then
	// the gift's Execute was rejected and took it back (services/luckydraw
	// ClaimedByReversal writes it).
	ClaimedByReversal = "reversed"
)

// Consumption is lucky_pool_inflow_consumption. Rows are inserted as
// StatusConsumed; Apply then rewrites the status of the inflows Decide
// did not add.
var Consumption = mysqlsink.Consumption[*activityv1.LuckyPoolInflow]{
	Table: "lucky_pool_inflow_consumption",
	Key: func(in *activityv1.LuckyPoolInflow) mysqlsink.EventKey {
		return mysqlsink.EventKey{AppCode: in.AppCode, EventID: in.EventId}
	},
	Head: "INSERT INTO lucky_pool_inflow_consumption (app_code, event_id, source_event_id, room_id, gift_id, rule_version, draw_id, pool_in, platform_in, room_in, gift_in, status, occurred_at_ms, created_at_ms) VALUES ",
	Row:  "(?,?,?,?,?,?,?,?,?,?,?,'" + StatusConsumed + "',?,?)",
	Args: func(a []any, in *activityv1.LuckyPoolInflow, nowMs int64) []any {
		return append(a, in.AppCode, in.EventId, in.SourceEventId, in.RoomId, in.GiftId, in.RuleVersion, in.DrawId, in.PoolIn, in.PlatformIn, in.RoomIn, in.GiftIn, in.OccurredAtMs, nowMs)
	},
}

const (
	// PoolsTable is the table the sink adds the inflow to; a rebuild
	// (sinks/mysql/rebuild) fills a fresh copy with WritePools.
	PoolsTable = "lucky_pools"
	poolCols   = " (app_code, scope_type, scope_id, balance, total_in, version, updated_at_ms) VALUES "
	poolRow    = "(?,?,?,?,?,1,?)"
	poolTail   = " ON DUPLICATE KEY UPDATE balance = balance + VALUES(balance), total_in = total_in + VALUES(total_in), version = version + 1, updated_at_ms = GREATEST(updated_at_ms, VALUES(updated_at_ms))"

	dailyHead = "INSERT INTO lucky_pool_inflow_daily (app_code, stat_date, scope_type, scope_id, inflow, gift_count, updated_at_ms) VALUES "
	dailyRow  = "(?,?,?,?,?,?,?)"
	dailyTail = " ON DUPLICATE KEY UPDATE inflow = inflow + VALUES(inflow), gift_count = gift_count + VALUES(gift_count), updated_at_ms = GREATEST(updated_at_ms, VALUES(updated_at_ms))"

	claimHead = "INSERT INTO lucky_pool_inflow_claims (app_code, draw_id, claimed_by, created_at_ms) VALUES "
	claimRow  = "(?,?,'" + ClaimedByStream + "',?)"

	// statusHead rewrites the status of consumption rows this transaction
	// just inserted (every key exists, so each row is an update).
	statusHead = "INSERT INTO lucky_pool_inflow_consumption (app_code, event_id, status) VALUES "
	statusRow  = "(?,?,?)"
	statusTail = " ON DUPLICATE KEY UPDATE status = VALUES(status)"
)

// Apply records the inflows in lucky_pool_inflow_consumption, claims the
// draws of the new ones and adds those it may to lucky_pools (see the
// package doc), and adds every new one to lucky_pool_inflow_daily.
func (a *Applier) Apply(ctx context.Context, tx *mysqlsink.Tx, in []*activityv1.LuckyPoolInflow) (mysqlsink.Applied, error) {
	// The owner row and the claims are locked before the consumption rows,
	// in the package's lock order.
	owned, err := poolsOwned(ctx, tx)
	if err != nil {
		return mysqlsink.Applied{}, err
	}
	claims, err := lockClaims(ctx, tx, in)
	if err != nil {
		return mysqlsink.Applied{}, err
	}
	fresh, consumed, err := Consumption.Consume(ctx, tx, in)
	if err != nil {
		return mysqlsink.Applied{}, err
	}
	status := Decide(fresh, owned, claims)
	var added, newClaims []*activityv1.LuckyPoolInflow
	var other []int // indexes into fresh of the inflows not added
	for i, s := range status {
		if s != StatusConsumed {
			other = append(other, i)
			continue
		}
		added = append(added, fresh[i])
		if fresh[i].DrawId != "" {
			newClaims = append(newClaims, fresh[i])
		}
	}
	if err := tx.ExecRows(ctx, statusHead, statusRow, statusTail, len(other), func(i int, a []any) []any {
		in := fresh[other[i]]
		return append(a, in.AppCode, in.EventId, status[other[i]])
	}); err != nil {
		return mysqlsink.Applied{}, fmt.Errorf("lucky_pool_inflow_consumption status: %w", err)
	}
	// A draw claiming one of these since lockClaims makes the INSERT wait
	// and then fail with 1062: the batch is retried whole.
	if err := tx.ExecRows(ctx, claimHead, claimRow, "", len(newClaims), func(i int, a []any) []any {
		return append(a, newClaims[i].AppCode, newClaims[i].DrawId, tx.NowMs())
	}); err != nil {
		return mysqlsink.Applied{}, fmt.Errorf("insert lucky_pool_inflow_claims: %w", err)
	}
	pools, err := BuildPools(added)
	if err != nil {
		return mysqlsink.Applied{}, err
	}
	if err := WritePools(ctx, tx, pools, PoolsTable); err != nil {
		return mysqlsink.Applied{}, err
	}
	// A refunded gift's coins entered no pool: it has no daily inflow.
	var kept []*activityv1.LuckyPoolInflow
	for i, in := range fresh {
		if status[i] != StatusRejected {
			kept = append(kept, in)
		}
	}
	daily, err := BuildDaily(kept)
	if err != nil {
		return mysqlsink.Applied{}, err
	}
	if err := tx.ExecRows(ctx, dailyHead, dailyRow, dailyTail, len(daily), func(i int, a []any) []any {
		r := daily[i]
		return append(a, r.AppCode, r.StatDate, r.ScopeType, r.ScopeID, r.In, r.Gifts, r.UpdatedAtMs)
	}); err != nil {
		return mysqlsink.Applied{}, fmt.Errorf("upsert lucky_pool_inflow_daily: %w", err)
	}
	return mysqlsink.Applied{Consumed: consumed, FactRows: map[string]int{
		"lucky_pools":              len(pools),
		"lucky_pool_inflow_claims": len(newClaims),
		"lucky_pool_inflow_daily":  len(daily),
	}}, nil
}

// WritePools adds pools (BuildPools of the inflows Decide consumed) to
// table's balance and total_in (version + 1) with the sink's statement:
// PoolsTable, or a rebuild's fresh copy of it.
func WritePools(ctx context.Context, tx *mysqlsink.Tx, pools []PoolRow, table string) error {
	if err := tx.ExecRows(ctx, "INSERT INTO "+table+poolCols, poolRow, poolTail, len(pools), func(i int, a []any) []any {
		r := pools[i]
		return append(a, r.AppCode, r.ScopeType, r.ScopeID, r.In, r.In, r.UpdatedAtMs)
	}); err != nil {
		return fmt.Errorf("upsert %s: %w", table, err)
	}
	return nil
}

// Owned reports whether `roomflow lucky` has recorded its ownership of
// lucky_pools (lucky_pool_owner has its row): from then on the draws pay
// out of the pools, and the inflow stream alone no longer determines them.
func Owned(ctx context.Context, db *sql.DB) (bool, error) {
	var n int
	if err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM lucky_pool_owner WHERE id = 1").Scan(&n); err != nil {
		return false, fmt.Errorf("read lucky_pool_owner: %w", err)
	}
	return n > 0, nil
}

// poolsOwned reads whether `roomflow lucky` has recorded its ownership of
// lucky_pools (share-locking the row when it exists).
func poolsOwned(ctx context.Context, tx *mysqlsink.Tx) (bool, error) {
	rows, err := tx.QueryContext(ctx, "SELECT owner FROM lucky_pool_owner WHERE id = 1 LOCK IN SHARE MODE")
	if err != nil {
		return false, fmt.Errorf("read lucky_pool_owner: %w", err)
	}
	owned := rows.Next()
	if err := errors.Join(rows.Err(), rows.Close()); err != nil {
		return false, fmt.Errorf("read lucky_pool_owner: %w", err)
	}
	return owned, nil
}

// DrawKey is the primary key of lucky_pool_inflow_claims.
type DrawKey struct {
	AppCode string
	DrawID  string
}

// lockClaims locks the existing claims of the draw ids of ins (FOR
// UPDATE) and returns their claimed_by. Replayed inflows are looked up
// too: their draw ids are claimed already, so it changes nothing, and
// Consume, which tells new from replayed, runs after this in lock order.
func lockClaims(ctx context.Context, tx *mysqlsink.Tx, ins []*activityv1.LuckyPoolInflow) (map[DrawKey]string, error) {
	byApp := map[string][]string{}
	seen := map[DrawKey]bool{}
	for _, in := range ins {
		k := DrawKey{in.AppCode, in.DrawId}
		if k.DrawID == "" || seen[k] {
			continue
		}
		seen[k] = true
		byApp[k.AppCode] = append(byApp[k.AppCode], k.DrawID)
	}
	out := map[DrawKey]string{}
	err := tx.QueryIn(ctx, byApp, func(in string) string {
		return "SELECT draw_id, claimed_by FROM lucky_pool_inflow_claims WHERE app_code = ? AND draw_id IN (" + in + ") ORDER BY draw_id FOR UPDATE"
	}, func(app string, rows *sql.Rows) error {
		var id, by string
		if err := rows.Scan(&id, &by); err != nil {
			return err
		}
		out[DrawKey{app, id}] = by
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("lock lucky_pool_inflow_claims: %w", err)
	}
	return out, nil
}

// Decide returns the consumption status of each new inflow of fresh (in
// order), given whether the draw service owns the pools and the claimed_by
// of the claims that exist (by draw): StatusConsumed for those the sink
// adds to lucky_pools (claiming their draw ids), else why not (see the
// package doc). Only the first inflow of a batch naming a draw id claims
// it.
func Decide(fresh []*activityv1.LuckyPoolInflow, owned bool, claims map[DrawKey]string) []string {
	out := make([]string, len(fresh))
	claimed := map[DrawKey]bool{}
	for i, in := range fresh {
		k := DrawKey{in.AppCode, in.DrawId}
		switch by, ok := claims[k]; {
		case k.DrawID == "" && owned:
			out[i] = StatusNoDraw
		case k.DrawID == "":
			out[i] = StatusConsumed
		case ok && by == ClaimedByDraw:
			out[i] = StatusDrawn
		case ok && (by == ClaimedByRejection || by == ClaimedByReversal):
			out[i] = StatusRejected
		case ok || claimed[k]:
			out[i] = StatusDuplicateDraw
		default:
			out[i] = StatusConsumed
			claimed[k] = true
		}
	}
	return out
}

// PoolKey is the primary key of lucky_pools.
type PoolKey struct {
	AppCode   string
	ScopeType string
	ScopeID   string
}

// PoolRow is the summed inflow of one lucky_pools row in a batch.
type PoolRow struct {
	PoolKey
	In          int64
	UpdatedAtMs int64 // newest occurred_at_ms that touched the row
}

// layer is an inflow's amount for one lucky_pools row.
type layer struct {
	PoolKey
	In int64
}

// layers are the three lucky_pools rows an inflow adds to.
func layers(in *activityv1.LuckyPoolInflow) [3]layer {
	return [3]layer{
		{PoolKey{in.AppCode, ScopePlatform, GlobalScopeID}, in.PlatformIn},
		{PoolKey{in.AppCode, ScopeRoom, in.RoomId}, in.RoomIn},
		{PoolKey{in.AppCode, ScopeGift, in.GiftId}, in.GiftIn},
	}
}

func comparePoolKeys(a, b PoolKey) int {
	return cmp.Or(cmp.Compare(a.AppCode, b.AppCode), cmp.Compare(a.ScopeType, b.ScopeType), cmp.Compare(a.ScopeID, b.ScopeID))
}

// BuildPools sums the inflows to add per lucky_pools row, sorted by
// primary key so each row is written once per batch and concurrent sinks
// lock rows in the same order. A sum past int64 is a
// *mysqlsink.OverflowError.
func BuildPools(inflows []*activityv1.LuckyPoolInflow) ([]PoolRow, error) {
	pools := map[PoolKey]*PoolRow{}
	var sums mysqlsink.Sums
	for _, in := range inflows {
		for _, l := range layers(in) {
			r := pools[l.PoolKey]
			if r == nil {
				r = &PoolRow{PoolKey: l.PoolKey}
				pools[l.PoolKey] = r
			}
			sums.Add("lucky_pools.total_in", &r.In, l.In)
			r.UpdatedAtMs = max(r.UpdatedAtMs, in.OccurredAtMs)
		}
	}
	if err := sums.Err(); err != nil {
		return nil, err
	}
	out := make([]PoolRow, 0, len(pools))
	for _, r := range pools {
		out = append(out, *r)
	}
	slices.SortFunc(out, func(a, b PoolRow) int { return comparePoolKeys(a.PoolKey, b.PoolKey) })
	return out, nil
}

// DailyKey is the primary key of lucky_pool_inflow_daily.
type DailyKey struct {
	AppCode   string
	StatDate  string // YYYY-MM-DD, the UTC date of the gift's occurred_at_ms
	ScopeType string
	ScopeID   string
}

// DailyRow is the summed inflow of one lucky_pool_inflow_daily row in a
// batch.
type DailyRow struct {
	DailyKey
	In          int64
	Gifts       int64 // inflows (gift events) adding to the row
	UpdatedAtMs int64 // newest occurred_at_ms that touched the row
}

// BuildDaily sums the inflows per lucky_pool_inflow_daily row (every
// layer of every inflow, a gift counted once per row), sorted by primary
// key. A sum past int64 is a *mysqlsink.OverflowError.
func BuildDaily(inflows []*activityv1.LuckyPoolInflow) ([]DailyRow, error) {
	daily := map[DailyKey]*DailyRow{}
	var sums mysqlsink.Sums
	for _, in := range inflows {
		date := time.UnixMilli(in.OccurredAtMs).UTC().Format(time.DateOnly)
		for _, l := range layers(in) {
			k := DailyKey{l.AppCode, date, l.ScopeType, l.ScopeID}
			r := daily[k]
			if r == nil {
				r = &DailyRow{DailyKey: k}
				daily[k] = r
			}
			sums.Add("lucky_pool_inflow_daily.inflow", &r.In, l.In)
			r.Gifts++
			r.UpdatedAtMs = max(r.UpdatedAtMs, in.OccurredAtMs)
		}
	}
	if err := sums.Err(); err != nil {
		return nil, err
	}
	out := make([]DailyRow, 0, len(daily))
	for _, r := range daily {
		out = append(out, *r)
	}
	slices.SortFunc(out, func(a, b DailyRow) int {
		return cmp.Or(cmp.Compare(a.AppCode, b.AppCode), cmp.Compare(a.StatDate, b.StatDate), cmp.Compare(a.ScopeType, b.ScopeType), cmp.Compare(a.ScopeID, b.ScopeID))
	})
	return out, nil
}
