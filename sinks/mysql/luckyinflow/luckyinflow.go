// Package luckyinflow is the MySQL sink's applier of the lucky pool inflow
// (hyapp.activity.lucky-pool-inflow.v1, activityv1.LuckyPoolInflow): each
// new inflow gets a row in lucky_pool_inflow_consumption, and its integer
// ppm amounts are added to the platform, room and gift rows of lucky_pools
// (balance and total_in, version + 1), pre-aggregated per row in a batch
// (BuildPools).
//
// Every inflow adds to the one (platform, global) row whatever its
// partition, so SharedRows is true: the sink applies all inflow partitions
// of a batch in one transaction and writes that row once.
package luckyinflow

import (
	"cmp"
	"context"
	"fmt"
	"slices"

	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/protobuf/proto"

	"github.com/hyapp/roomflow/schemas/activityv1"
	mysqlsink "github.com/hyapp/roomflow/sinks/mysql"
)

// Lucky pool scopes (seed 003): one platform row, one per room, one per gift.
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
)

// Config configures the applier (New): its topic and default app_code.
type Config = mysqlsink.ApplierConfig

// Applier applies the lucky pool inflow topic; register it with
// mysqlsink.Register.
type Applier struct {
	topic          string
	defaultAppCode string
}

// New returns the applier of cfg.Topic; it fails on a config that does
// not validate.
func New(cfg Config) (*Applier, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Applier{topic: cfg.Topic, defaultAppCode: cfg.DefaultAppCode}, nil
}

// Topic is the lucky pool inflow topic.
func (a *Applier) Topic() string { return a.topic }

// SharedRows is true: every partition adds to the platform row.
func (a *Applier) SharedRows() bool { return true }

// Decode parses and validates one inflow record (Decode).
func (a *Applier) Decode(rec *kgo.Record) (*activityv1.LuckyPoolInflow, error) {
	return Decode(rec.Value, a.defaultAppCode)
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
	if err := mysqlsink.CheckColumns(
		mysqlsink.Column{Name: "app_code", Value: in.AppCode, Max: mysqlsink.MaxAppCode},
		mysqlsink.Column{Name: "event_id", Value: in.EventId, Max: maxEventID},
		mysqlsink.Column{Name: "source_event_id", Value: in.SourceEventId, Max: maxSourceID},
		mysqlsink.Column{Name: "room_id", Value: in.RoomId, Max: maxRoomID},
		mysqlsink.Column{Name: "gift_id", Value: in.GiftId, Max: maxGiftID},
		mysqlsink.Column{Name: "rule_version", Value: in.RuleVersion, Max: maxRuleVersion},
	); err != nil {
		return nil, err
	}
	return &in, nil
}

// Consumption is lucky_pool_inflow_consumption.
var Consumption = mysqlsink.Consumption[*activityv1.LuckyPoolInflow]{
	Table: "lucky_pool_inflow_consumption",
	Key: func(in *activityv1.LuckyPoolInflow) mysqlsink.EventKey {
		return mysqlsink.EventKey{AppCode: in.AppCode, EventID: in.EventId}
	},
	Head: "INSERT INTO lucky_pool_inflow_consumption (app_code, event_id, source_event_id, room_id, gift_id, rule_version, pool_in, platform_in, room_in, gift_in, status, occurred_at_ms, created_at_ms) VALUES ",
	Row:  "(?,?,?,?,?,?,?,?,?,?,'consumed',?,?)",
	Args: func(a []any, in *activityv1.LuckyPoolInflow, nowMs int64) []any {
		return append(a, in.AppCode, in.EventId, in.SourceEventId, in.RoomId, in.GiftId, in.RuleVersion, in.PoolIn, in.PlatformIn, in.RoomIn, in.GiftIn, in.OccurredAtMs, nowMs)
	},
}

const (
	poolHead = "INSERT INTO lucky_pools (app_code, scope_type, scope_id, balance, total_in, version, updated_at_ms) VALUES "
	poolRow  = "(?,?,?,?,?,1,?)"
	poolTail = " ON DUPLICATE KEY UPDATE balance = balance + VALUES(balance), total_in = total_in + VALUES(total_in), version = version + 1, updated_at_ms = GREATEST(updated_at_ms, VALUES(updated_at_ms))"
)

// Apply records the inflows in lucky_pool_inflow_consumption and adds the
// new ones to lucky_pools.
func (a *Applier) Apply(ctx context.Context, tx *mysqlsink.Tx, in []*activityv1.LuckyPoolInflow) (mysqlsink.Applied, error) {
	fresh, consumed, err := Consumption.Consume(ctx, tx, in)
	if err != nil {
		return mysqlsink.Applied{}, err
	}
	pools := BuildPools(fresh)
	if err := tx.ExecRows(ctx, poolHead, poolRow, poolTail, len(pools), func(i int, a []any) []any {
		r := pools[i]
		return append(a, r.AppCode, r.ScopeType, r.ScopeID, r.In, r.In, r.UpdatedAtMs)
	}); err != nil {
		return mysqlsink.Applied{}, fmt.Errorf("upsert lucky_pools: %w", err)
	}
	return mysqlsink.Applied{Consumed: consumed, FactRows: map[string]int{"lucky_pools": len(pools)}}, nil
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

// BuildPools sums the inflows known to be new per lucky_pools row, sorted
// by primary key so each row is written once per batch and concurrent
// sinks lock rows in the same order.
func BuildPools(inflows []*activityv1.LuckyPoolInflow) []PoolRow {
	pools := map[PoolKey]*PoolRow{}
	add := func(k PoolKey, in, at int64) {
		r := pools[k]
		if r == nil {
			r = &PoolRow{PoolKey: k}
			pools[k] = r
		}
		r.In += in
		r.UpdatedAtMs = max(r.UpdatedAtMs, at)
	}
	for _, in := range inflows {
		add(PoolKey{in.AppCode, ScopePlatform, GlobalScopeID}, in.PlatformIn, in.OccurredAtMs)
		add(PoolKey{in.AppCode, ScopeRoom, in.RoomId}, in.RoomIn, in.OccurredAtMs)
		add(PoolKey{in.AppCode, ScopeGift, in.GiftId}, in.GiftIn, in.OccurredAtMs)
	}
	out := make([]PoolRow, 0, len(pools))
	for _, r := range pools {
		out = append(out, *r)
	}
	slices.SortFunc(out, func(a, b PoolRow) int {
		return cmp.Or(cmp.Compare(a.AppCode, b.AppCode), cmp.Compare(a.ScopeType, b.ScopeType), cmp.Compare(a.ScopeID, b.ScopeID))
	})
	return out
}
