package luckydraw

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"database/sql"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
)

// Audit material of a draw record (lucky_draw_records):
//
//   - candidate_tiers_json: the filtered table, a JSON array of Candidate
//     in candidate (tier_id) order: {"tier_id", "reward_type",
//     "reward_coins", "base_ppm", "probability_ppm", "disabled"} where
//     disabled is absent for a candidate and else one of the Disabled*
//     reasons (its probability_ppm is then 0).
//   - pool_snapshot_json: PoolSnapshot, the layers before the draw.
//   - risk_snapshot_json: RiskSnapshot, the caps before the draw.
//   - random_value in [0, 1,000,000): the selected tier is the first
//     candidate whose cumulative probability_ppm exceeds it.
//   - random_digest: Digest, hex HMAC-SHA256 with the audit key over
//     fields fixed when the draw is made (never the reward state).
//
// MySQL 8 may re-serialize JSON columns (key order, spaces), so the digest
// is computed over a canonical binary encoding of the parsed values, never
// over column text.

// PoolSnapshot is pool_snapshot_json.
type PoolSnapshot struct {
	Layers             []PoolLayerSnapshot `json:"layers"` // platform, room, gift
	CurrentPoolBalance int64               `json:"current_pool_balance"`
	AvailablePayout    int64               `json:"available_payout"`
	InflowAppliedBy    string              `json:"inflow_applied_by"` // draw | stream
}

// PoolLayerSnapshot is one layer of PoolSnapshot.
type PoolLayerSnapshot struct {
	PoolState
	LayerIn  int64 `json:"layer_in"`
	Capacity int64 `json:"capacity"`
}

// RiskSnapshot is risk_snapshot_json. A cap of 0 is no cap; RiskCapacity
// is -1 when no cap applies.
type RiskSnapshot struct {
	Limits       []RiskLimit `json:"limits"`
	RiskCapacity int64       `json:"risk_capacity"`
	Rejected     []string    `json:"rejected,omitempty"` // scopes that removed a payable tier
}

// DigestInput is what random_digest covers.
type DigestInput struct {
	DrawID, CommandID, AppCode, GiftID, RuleVersion string
	Candidates                                      []Candidate
	RandomValue                                     int64
}

// Digest is hex HMAC-SHA256(key, canonical encoding of in): a version tag,
// then each string as its uvarint length and bytes, each integer as 8
// bytes big-endian, the candidate count, each candidate's fields in
// struct order.
func Digest(key []byte, in DigestInput) string {
	var b []byte
	str := func(s string) { b = binary.AppendUvarint(b, uint64(len(s))); b = append(b, s...) }
	num := func(v int64) { b = binary.BigEndian.AppendUint64(b, uint64(v)) }
	str("roomflow.lucky.digest.v1")
	str(in.DrawID)
	str(in.CommandID)
	str(in.AppCode)
	str(in.GiftID)
	str(in.RuleVersion)
	num(int64(len(in.Candidates)))
	for _, c := range in.Candidates {
		str(c.TierID)
		str(c.RewardType)
		num(c.RewardCoins)
		num(c.BasePPM)
		num(c.ProbabilityPPM)
		str(c.Disabled)
	}
	num(in.RandomValue)
	m := hmac.New(sha256.New, key)
	m.Write(b)
	return hex.EncodeToString(m.Sum(nil))
}

// AuditQuery selects the draws Audit checks: one draw (DrawID set) or
// every draw created at or after SinceMs.
type AuditQuery struct {
	DrawID  string
	SinceMs int64
}

// AuditResult is one draw's check. OK when every recomputed value matches;
// else Mismatches names each difference.
type AuditResult struct {
	DrawID     string
	OK         bool
	Mismatches []string
}

// ErrUnknownDraw is an audited draw id with no record.
var ErrUnknownDraw = errors.New("luckydraw: unknown draw")

// Audit re-reads draw records and recomputes, from the stored candidate
// table and random_value, the selected tier, its reward, the split over
// the layers and random_digest with key. A tampered column (candidate
// table, random value, selected tier, reward, digest) is reported as a
// mismatch. Rejections (reward_status rejected) drew nothing and are
// skipped. An unknown DrawID, or a rejection's, is ErrUnknownDraw; database errors are
// returned as they are. Results are in created_at_ms, draw_id order.
func Audit(ctx context.Context, db *sql.DB, key string, q AuditQuery) ([]AuditResult, error) {
	if key == "" {
		return nil, errors.New("luckydraw: audit needs the audit key")
	}
	query := `SELECT draw_id, command_id, app_code, gift_id, rule_version, candidate_tiers_json, selected_tier_id,
	reward_coins, platform_out, room_out, gift_out, random_value, random_digest FROM lucky_draw_records `
	var args []any
	if q.DrawID != "" {
		query += `WHERE draw_id = ? AND reward_status <> 'rejected'`
		args = append(args, q.DrawID)
	} else {
		query += `WHERE created_at_ms >= ? AND reward_status <> 'rejected' ORDER BY created_at_ms, draw_id`
		args = append(args, q.SinceMs)
	}
	rows, err := db.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, fmt.Errorf("luckydraw: audit: %w", err)
	}
	defer rows.Close()
	var out []AuditResult
	for rows.Next() {
		var (
			in                   DigestInput
			candJSON             []byte
			selected, digest     string
			reward               int64
			platform, room, gift int64
		)
		if err := rows.Scan(&in.DrawID, &in.CommandID, &in.AppCode, &in.GiftID, &in.RuleVersion, &candJSON, &selected,
			&reward, &platform, &room, &gift, &in.RandomValue, &digest); err != nil {
			return nil, fmt.Errorf("luckydraw: audit: %w", err)
		}
		out = append(out, auditOne([]byte(key), in, candJSON, selected, digest, reward, [3]int64{platform, room, gift}))
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("luckydraw: audit: %w", err)
	}
	if q.DrawID != "" && len(out) == 0 {
		return nil, fmt.Errorf("%w: %s", ErrUnknownDraw, q.DrawID)
	}
	return out, nil
}

func auditOne(key []byte, in DigestInput, candJSON []byte, selected, digest string, reward int64, out [3]int64) AuditResult {
	res := AuditResult{DrawID: in.DrawID}
	bad := func(format string, args ...any) {
		res.Mismatches = append(res.Mismatches, fmt.Sprintf(format, args...))
	}
	if err := json.Unmarshal(candJSON, &in.Candidates); err != nil {
		bad("candidate_tiers_json: %v", err)
	} else if i, err := Select(in.Candidates, in.RandomValue); err != nil {
		bad("selection: %v", err)
	} else {
		c := in.Candidates[i]
		if c.TierID != selected {
			bad("selected_tier_id %q, the table selects %q", selected, c.TierID)
		}
		if c.RewardCoins != reward {
			bad("reward_coins %d, the table pays %d", reward, c.RewardCoins)
		}
	}
	if out[0] < 0 || out[1] < 0 || out[2] < 0 || out[0]+out[1]+out[2] != reward {
		bad("platform_out+room_out+gift_out %d+%d+%d != reward_coins %d", out[0], out[1], out[2], reward)
	}
	if want := Digest(key, in); !hmac.Equal([]byte(strings.ToLower(digest)), []byte(want)) {
		bad("random_digest does not match the recorded draw")
	}
	res.OK = len(res.Mismatches) == 0
	return res
}
