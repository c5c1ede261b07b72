// Package verify reconciles what the pipeline wrote to MySQL with an
// independent oracle of the room event log (`roomflow verify`, and the
// checks of the demo and of loadgen's runs).
package verify

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hyapp/roomflow/internal/config"
	"github.com/hyapp/roomflow/internal/kafkax"
	"github.com/hyapp/roomflow/internal/mysqlx"
	"github.com/hyapp/roomflow/producers/loadgen"
	"github.com/hyapp/roomflow/producers/relay"
	"github.com/hyapp/roomflow/schemas/envelope"
	"github.com/hyapp/roomflow/services/luckydraw"
)

// Options are the flags of `roomflow verify`.
type Options struct {
	// Idle gives up reading a topic when nothing arrived for this long
	// before its committed end.
	Idle time.Duration
	// Timers predicts the closes of the mic timers (wall-clock traffic:
	// loadgen --live, --duration), so every user is compared.
	Timers bool
}

// Run recomputes the facts from the room event log, compares MySQL with
// them, lists the outbox ids the relay gave up on, and prints the report
// to w. It fails when MySQL or Kafka fail, and when any fact differs.
func Run(ctx context.Context, cfg *config.Config, o Options, w io.Writer) error {
	db, err := mysqlx.Open(ctx, cfg.MySQL)
	if err != nil {
		return err
	}
	defer db.Close()
	var pol *loadgen.TimerPolicy
	if o.Timers {
		pol = &loadgen.TimerPolicy{PendingPublishMaxAge: cfg.Mic.PendingPublishMaxAge.D(), PublishingSessionMaxAge: cfg.Mic.PublishingSessionMaxAge.D()}
	}
	rep, oracle, lk, err := All(ctx, cfg, db, o.Idle, pol)
	if err != nil {
		return err
	}
	gaps, err := abandonedGaps(ctx, cfg, o.Idle)
	if err != nil {
		return err
	}
	printGaps(w, gaps)
	PrintOracle(w, oracle)
	if lk.Owned {
		fmt.Fprintf(w, "lucky pools owned by roomflow lucky: reconciled %d lucky gifts with %d draws and %d rejections (%d of them took back the inflow the sink had added) by draw_id, checked %d pools\n",
			lk.Gifts, lk.Draws, lk.Rejections, lk.Reversed, lk.Pools)
	}
	tr, tdiffs, err := Totals(ctx, cfg, db, o.Idle)
	if err != nil {
		return err
	}
	rep.Diffs = append(rep.Diffs, tdiffs...)
	if cfg.Mic.TotalsEnabled {
		fmt.Fprintf(w, "compared the mic totals topics with the facts: %d lifetime totals (%d user_mic_lifetime_stats rows), %d daily totals\n",
			tr.Lifetime, tr.LifetimeRows, tr.Daily)
	}
	fmt.Fprintf(w, "compared %d lifetime, %d daily, %d session, %d pool rows (%d users with open sessions skipped): %d differences\n",
		rep.LifetimeRows, rep.DailyRows, rep.SessionRows, rep.PoolRows, rep.SkippedUsers, len(rep.Diffs))
	for i, d := range rep.Diffs {
		if i == 20 {
			fmt.Fprintf(w, "... %d more\n", len(rep.Diffs)-20)
			break
		}
		fmt.Fprintln(w, "  ", d)
	}
	if !rep.OK() {
		return fmt.Errorf("verify: %d facts differ", len(rep.Diffs))
	}
	return nil
}

// Facts is All without the lucky counts (the demo's check).
func Facts(ctx context.Context, cfg *config.Config, db *sql.DB, idle time.Duration) (loadgen.Report, *loadgen.Oracle, error) {
	rep, o, _, err := All(ctx, cfg, db, idle, nil)
	return rep, o, err
}

// All reads every committed room event and compares MySQL with the
// oracle of those events (with pol, the mic timers' closes predicted);
// once roomflow lucky owns the pools, the pools are also reconciled with
// the draws (verifyLucky).
func All(ctx context.Context, cfg *config.Config, db *sql.DB, idle time.Duration, pol *loadgen.TimerPolicy) (loadgen.Report, *loadgen.Oracle, Lucky, error) {
	var lk Lucky
	rules, err := loadRules(ctx, db)
	if err != nil {
		return loadgen.Report{}, nil, lk, err
	}
	ownedAtMs, owned, err := poolOwner(ctx, db)
	if err != nil {
		return loadgen.Report{}, nil, lk, err
	}
	// The oracle folds the log record by record; sessions are compared
	// as they close and only lucky gifts are kept (for verifyLucky).
	b := loadgen.NewOracleBuilder(rules, cfg.AppCode, pol)
	var rejections map[string]string // draw_id -> claimed_by of its inflow
	if owned {
		if rejections, err = luckyRejections(ctx, db, cfg.AppCode); err != nil {
			return loadgen.Report{}, nil, lk, err
		}
		b.Refunded = map[string]bool{}
		for id := range rejections {
			b.Refunded[id] = true
		}
	}
	check := loadgen.NewSessionCheck(db, cfg.AppCode)
	b.OnSession = func(s loadgen.MicSession) { check.Add(ctx, s) }
	var gifts []luckyGift
	if owned {
		b.OnLuckyGift = func(e *envelope.View, g *envelope.GiftSent, in loadgen.Inflow) {
			gifts = append(gifts, luckyGift{EventID: string(e.EventID), RoomID: string(e.RoomID), GiftID: string(g.GiftID),
				RuleVersion: string(g.LuckyRuleVersion), DrawID: string(g.DrawID), OccurredAtMs: e.OccurredAtMs, In: in})
		}
	}
	if err := readTopic(ctx, cfg, cfg.Kafka.Topics.RoomEvents, idle, func(r *kgo.Record) { b.Add(r.Value) }); err != nil {
		return loadgen.Report{}, nil, lk, err
	}
	o := b.Oracle()
	rep, err := loadgen.Compare(ctx, db, cfg.AppCode, o)
	if err == nil {
		err = check.Finish(ctx, o, &rep)
	}
	if err != nil || !owned {
		return rep, o, lk, err
	}
	// Compare checked total_in per pool (each gift's inflow exactly once,
	// whoever added it) and balance = funded + total_in - total_out;
	// verifyLucky reconciles the draws with the gifts.
	lk, diffs, err := verifyLucky(ctx, db, cfg.AppCode, ownedAtMs, gifts, rejections)
	rep.Diffs = append(rep.Diffs, diffs...)
	return rep, o, lk, err
}

// poolOwner reads lucky_pool_owner: whether roomflow lucky owns the pools,
// and since when.
func poolOwner(ctx context.Context, db *sql.DB) (ownedAtMs int64, owned bool, err error) {
	err = db.QueryRowContext(ctx, "SELECT owned_at_ms FROM lucky_pool_owner WHERE id = 1").Scan(&ownedAtMs)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, fmt.Errorf("verify: read lucky_pool_owner: %w", err)
	}
	return ownedAtMs, true, nil
}

// luckyGift is a distinct lucky RoomGiftSent of the log with a known rule
// version (the others never reach a pool: the room processor
// dead-letters them).
type luckyGift struct {
	EventID, RoomID, GiftID, RuleVersion, DrawID string
	OccurredAtMs                                 int64
	In                                           loadgen.Inflow
}

// Lucky counts what verifyLucky compared.
type Lucky struct {
	Owned                           bool
	Gifts, Draws, Rejections, Pools int
	Reversed                        int // rejections that took back a streamed inflow (claim 'reversed')
}

// verifyLucky reconciles gifts (those since ownedAtMs; earlier ones had no
// draw service) with the outcomes of lucky_draw_records by draw_id, each
// gift to exactly one draw or one rejection (an Execute rejected after the
// debit: room-service writes the gift naming it, and its inflow must be in
// no pool), and checks the pool invariants of appCode (see verify's help).
func verifyLucky(ctx context.Context, db *sql.DB, appCode string, ownedAtMs int64, gifts []luckyGift, rejections map[string]string) (Lucky, []loadgen.Diff, error) {
	rep := Lucky{Owned: true}
	var diffs []loadgen.Diff
	diff := func(table, key, want, got string) {
		diffs = append(diffs, loadgen.Diff{Table: table, Key: key, Want: want, Got: got})
	}
	byDraw := map[string]luckyGift{}
	for _, g := range gifts {
		if g.DrawID != "" {
			byDraw[g.DrawID] = g
		}
		if g.OccurredAtMs < ownedAtMs {
			continue
		}
		rep.Gifts++
		if g.DrawID == "" {
			diff("lucky gift without a draw", g.EventID, "a draw_id", "none (its inflow is in no pool)")
		}
	}
	type drawRec struct {
		RoomID, GiftID, RuleVersion string
		In                          loadgen.Inflow
	}
	drawn := map[string]bool{}
	var rewards int64
	if err := loadgen.ScanRows(ctx, db, "SELECT draw_id, room_id, gift_id, rule_version, pool_in, platform_in, room_in, gift_in, reward_coins FROM lucky_draw_records WHERE app_code = ? AND reward_status <> 'rejected' ORDER BY draw_id", appCode, func(rows *sql.Rows) error {
		var id string
		var d drawRec
		var reward int64
		if err := rows.Scan(&id, &d.RoomID, &d.GiftID, &d.RuleVersion, &d.In.Pool, &d.In.Platform, &d.In.Room, &d.In.Gift, &reward); err != nil {
			return err
		}
		rep.Draws++
		rewards += reward
		drawn[id] = true
		g, ok := byDraw[id]
		if !ok {
			diff("lucky draw without a gift event", id, "a lucky RoomGiftSent with this draw_id", "none")
			return nil
		}
		if want := (drawRec{g.RoomID, g.GiftID, g.RuleVersion, g.In}); want != d {
			diff("lucky_draw_records", id, fmt.Sprintf("%+v (gift %s)", want, g.EventID), fmt.Sprintf("%+v", d))
		}
		return nil
	}); err != nil {
		return rep, nil, fmt.Errorf("verify: read lucky_draw_records: %w", err)
	}
	rep.Rejections = len(rejections)
	for _, id := range slices.Sorted(maps.Keys(rejections)) {
		if _, ok := byDraw[id]; !ok {
			diff("lucky rejection without a gift event", id, "a lucky RoomGiftSent with this draw_id", "none")
		}
		// The rejection claimed the inflow first, or took back what the
		// sink had added (docs/reliability.md finding 8).
		switch by := rejections[id]; by {
		case luckydraw.ClaimedByRejection:
		case luckydraw.ClaimedByReversal:
			rep.Reversed++
		default:
			diff("lucky rejection's inflow claim", id, luckydraw.ClaimedByRejection+" or "+luckydraw.ClaimedByReversal+
				" (its coins are refunded: no pool inflow)", cmp.Or(by, "none"))
		}
	}
	for _, g := range gifts {
		_, rejected := rejections[g.DrawID]
		if g.DrawID != "" && g.OccurredAtMs >= ownedAtMs && !drawn[g.DrawID] && !rejected {
			diff("lucky gift without its draw or rejection", g.EventID, "lucky_draw_records row "+g.DrawID, "none")
		}
	}
	var totalOut int64
	if err := loadgen.ScanRows(ctx, db, "SELECT scope_type, scope_id, balance, total_out, reserve_floor FROM lucky_pools WHERE app_code = ? ORDER BY scope_type, scope_id", appCode, func(rows *sql.Rows) error {
		var st, id string
		var balance, floor, out int64
		if err := rows.Scan(&st, &id, &balance, &out, &floor); err != nil {
			return err
		}
		rep.Pools++
		totalOut += out
		key := st + "/" + id
		if balance < floor {
			diff("lucky_pools.balance below reserve_floor", key, fmt.Sprintf(">= %d", floor), fmt.Sprint(balance))
		}
		return nil
	}); err != nil {
		return rep, nil, fmt.Errorf("verify: read lucky_pools: %w", err)
	}
	if totalOut != rewards {
		diff("sum(lucky_pools.total_out) = sum(lucky_draw_records.reward_coins)", appCode, fmt.Sprint(rewards), fmt.Sprint(totalOut))
	}
	return rep, diffs, nil
}

// luckyRejections reads appCode's rejections (Executes rejected after the
// debit) with the claimed_by of their gift's inflow claim ("" for none).
func luckyRejections(ctx context.Context, db *sql.DB, appCode string) (map[string]string, error) {
	out := map[string]string{}
	err := loadgen.ScanRows(ctx, db, `SELECT r.draw_id, COALESCE(c.claimed_by, '') FROM lucky_draw_records r
	LEFT JOIN lucky_pool_inflow_claims c ON c.app_code = r.app_code AND c.draw_id = r.draw_id
	WHERE r.app_code = ? AND r.reward_status = 'rejected'`, appCode, func(rows *sql.Rows) error {
		var id, by string
		if err := rows.Scan(&id, &by); err != nil {
			return err
		}
		out[id] = by
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("verify: read the rejections: %w", err)
	}
	return out, nil
}

func loadRules(ctx context.Context, db *sql.DB) (map[loadgen.RuleKey]loadgen.LuckyRule, error) {
	rows, err := db.QueryContext(ctx, `SELECT gift_id, rule_version, pool_rate_ppm, platform_weight_ppm, room_weight_ppm FROM lucky_gift_rules`)
	if err != nil {
		return nil, fmt.Errorf("verify: read lucky_gift_rules: %w", err)
	}
	defer rows.Close()
	out := map[loadgen.RuleKey]loadgen.LuckyRule{}
	for rows.Next() {
		var r loadgen.LuckyRule
		if err := rows.Scan(&r.GiftID, &r.RuleVersion, &r.PoolRatePPM, &r.PlatformWeightPPM, &r.RoomWeightPPM); err != nil {
			return nil, err
		}
		out[loadgen.RuleKey{GiftID: r.GiftID, RuleVersion: r.RuleVersion}] = r
	}
	return out, rows.Err()
}

// abandonedGap is one gap_abandoned record of the relay (see
// relay.Router.GapRecord): outbox ids From..To given up.
type abandonedGap struct {
	From, To uint64
	Reason   string // max_age or max_open_gaps
	OpenMs   int64
}

// abandonedGaps reads the relay's gap_abandoned records from the DLQ topic.
func abandonedGaps(ctx context.Context, cfg *config.Config, idle time.Duration) ([]abandonedGap, error) {
	var out []abandonedGap
	err := readTopic(ctx, cfg, cfg.Kafka.Topics.DLQ, idle, func(r *kgo.Record) {
		l, err := envelope.ParseDeadLetter(r)
		if err != nil || l.Reason != string(relay.DLQGapAbandoned) {
			return
		}
		h := func(key string) string { return string(l.ExtraValue(key)) }
		g := abandonedGap{Reason: h(envelope.HeaderGapReason)}
		g.From, _ = strconv.ParseUint(h(envelope.HeaderSourceIDFrom), 10, 64)
		g.To, _ = strconv.ParseUint(h(envelope.HeaderSourceIDTo), 10, 64)
		g.OpenMs, _ = strconv.ParseInt(h(envelope.HeaderOpenMs), 10, 64)
		out = append(out, g)
	})
	slices.SortFunc(out, func(a, b abandonedGap) int { return cmp.Compare(a.From, b.From) })
	return out, err
}

// PrintOracle prints what the oracle expects, in one line.
func PrintOracle(w io.Writer, o *loadgen.Oracle) {
	fmt.Fprintf(w, "expected: %d events, %d IM messages, %d closed mic sessions (%d open), %d users, %d user-days, %d lucky gifts (%d to DLQ), %d pool rows\n",
		o.Events, o.IMMessages, o.ClosedSessions, len(o.OpenSessions), len(o.Lifetime), len(o.Daily), o.LuckyGifts, o.Rejected, len(o.Pools))
}

func printGaps(w io.Writer, gaps []abandonedGap) {
	var ids uint64
	for _, g := range gaps {
		ids += g.To - g.From + 1
	}
	fmt.Fprintf(w, "abandoned outbox ids (the relay gave up waiting; a row committed later with one of these ids is relayed only in binlog mode on MariaDB: look its event_id up): %d ids in %d ranges\n", ids, len(gaps))
	for i, g := range gaps {
		if i == 20 {
			fmt.Fprintf(w, "... %d more ranges\n", len(gaps)-20)
			break
		}
		fmt.Fprintf(w, "   ids %d-%d (%d, %s, waited %s)\n", g.From, g.To, g.To-g.From+1, g.Reason, time.Duration(g.OpenMs)*time.Millisecond)
	}
}

// readTopic reads topic read_committed from its start to its committed
// end (or until nothing arrived for idle before the end).
func readTopic(ctx context.Context, cfg *config.Config, topic string, idle time.Duration, each func(*kgo.Record)) error {
	newClient := func(opts ...kgo.Opt) (*kgo.Client, error) {
		return cfg.Kafka.Cluster(nil, nil).NewClient("verify", opts...)
	}
	err := kafkax.ReadCommitted(ctx, newClient, nil, idle, kafkax.DataRecords(func(r *kgo.Record) (bool, error) { each(r); return false, nil }), topic)
	if err != nil && ctx.Err() == nil {
		return fmt.Errorf("verify: %w", err)
	}
	return err
}
