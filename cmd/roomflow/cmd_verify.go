package main

import (
	"cmp"
	"context"
	"database/sql"
	"fmt"
	"io"
	"slices"
	"strconv"
	"time"

	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hyapp/roomflow/internal/config"
	"github.com/hyapp/roomflow/internal/mysqlx"
	"github.com/hyapp/roomflow/producers/loadgen"
	"github.com/hyapp/roomflow/producers/relay"
	"github.com/hyapp/roomflow/schemas/envelope"
)

func verifyCmd(g *globals) *cobra.Command {
	var idle time.Duration
	cmd := &cobra.Command{
		Use:   "verify",
		Short: "Recompute facts from the room event log and diff them against MySQL",
		Long: `verify reads the room events topic from the beginning with a
read_committed consumer, recomputes the mic facts (lifetime and UTC daily
per user) and the lucky pool inflow with an independent reference of the
seed rules, and diffs them against user_mic_lifetime_stats,
user_mic_daily_stats and lucky_pools. Users with sessions that never saw a
'down' (open, or closed by the mic timers) are not compared. It also lists
the outbox ids the relay gave up waiting for (gap_abandoned records on the
DLQ topic): rows committed later with those ids were never relayed. It reads
until each topic has been idle for --idle. Exit status 1 when anything differs.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := g.load()
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			db, err := mysqlx.Open(ctx, cfg.MySQL)
			if err != nil {
				return err
			}
			defer db.Close()
			rep, o, err := verifyFacts(ctx, cfg, db, idle)
			if err != nil {
				return err
			}
			gaps, err := abandonedGaps(ctx, cfg, idle)
			if err != nil {
				return err
			}
			printGaps(cmd.OutOrStdout(), gaps)
			printOracle(cmd, o)
			fmt.Fprintf(cmd.OutOrStdout(), "compared %d lifetime, %d daily, %d session, %d pool rows (%d users with open sessions skipped): %d differences\n",
				rep.LifetimeRows, rep.DailyRows, rep.SessionRows, rep.PoolRows, rep.SkippedUsers, len(rep.Diffs))
			for i, d := range rep.Diffs {
				if i == 20 {
					fmt.Fprintf(cmd.OutOrStdout(), "... %d more\n", len(rep.Diffs)-20)
					break
				}
				fmt.Fprintln(cmd.OutOrStdout(), "  ", d)
			}
			if !rep.OK() {
				return fmt.Errorf("verify: %d facts differ", len(rep.Diffs))
			}
			return nil
		},
	}
	cmd.Flags().DurationVar(&idle, "idle", 3*time.Second, "stop reading after the topic was idle this long")
	return cmd
}

// verifyFacts reads every committed room event and compares MySQL with the
// oracle of those events.
func verifyFacts(ctx context.Context, cfg *config.Config, db *sql.DB, idle time.Duration) (loadgen.Report, *loadgen.Oracle, error) {
	rules, err := loadRules(ctx, db)
	if err != nil {
		return loadgen.Report{}, nil, err
	}
	events, err := readAll(ctx, cfg, idle)
	if err != nil {
		return loadgen.Report{}, nil, err
	}
	o := loadgen.BuildOracle(events, rules, cfg.AppCode)
	rep, err := loadgen.Compare(ctx, db, cfg.AppCode, o)
	return rep, o, err
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

// readAll consumes the room events topic from the start (read_committed)
// until no record arrived for idle, returning the values (EventEnvelope
// bytes, read by loadgen.BuildOracle).
func readAll(ctx context.Context, cfg *config.Config, idle time.Duration) ([][]byte, error) {
	var out [][]byte
	err := readTopic(ctx, cfg, cfg.Kafka.Topics.RoomEvents, idle, func(r *kgo.Record) {
		out = append(out, r.Value)
	})
	return out, err
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
		h := func(key string) string { return string(envelope.Header(r, key)) }
		if h(envelope.HeaderErrorReason) != string(relay.DLQGapAbandoned) {
			return
		}
		g := abandonedGap{Reason: h(envelope.HeaderGapReason)}
		g.From, _ = strconv.ParseUint(h(envelope.HeaderSourceIDFrom), 10, 64)
		g.To, _ = strconv.ParseUint(h(envelope.HeaderSourceIDTo), 10, 64)
		g.OpenMs, _ = strconv.ParseInt(h(envelope.HeaderOpenMs), 10, 64)
		out = append(out, g)
	})
	slices.SortFunc(out, func(a, b abandonedGap) int { return cmp.Compare(a.From, b.From) })
	return out, err
}

func printGaps(w io.Writer, gaps []abandonedGap) {
	var ids uint64
	for _, g := range gaps {
		ids += g.To - g.From + 1
	}
	fmt.Fprintf(w, "abandoned outbox ids (the relay gave up waiting; rows committed later with these ids were not relayed): %d ids in %d ranges\n", ids, len(gaps))
	for i, g := range gaps {
		if i == 20 {
			fmt.Fprintf(w, "... %d more ranges\n", len(gaps)-20)
			break
		}
		fmt.Fprintf(w, "   ids %d-%d (%d, %s, waited %s)\n", g.From, g.To, g.To-g.From+1, g.Reason, time.Duration(g.OpenMs)*time.Millisecond)
	}
}

// readTopic consumes topic from the start (read_committed) until no
// record arrived for idle.
func readTopic(ctx context.Context, cfg *config.Config, topic string, idle time.Duration, each func(*kgo.Record)) error {
	cl, err := cfg.Kafka.Cluster(nil, nil).NewClient("verify",
		kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	if err != nil {
		return err
	}
	defer cl.Close()
	for {
		pctx, cancel := context.WithTimeout(ctx, idle)
		fs := cl.PollFetches(pctx)
		cancel()
		if ctx.Err() != nil {
			return ctx.Err()
		}
		for _, fe := range fs.Errors() {
			if fe.Err != context.DeadlineExceeded {
				return fmt.Errorf("verify: fetch %s/%d: %w", fe.Topic, fe.Partition, fe.Err)
			}
		}
		if fs.NumRecords() == 0 {
			return nil
		}
		fs.EachRecord(each)
	}
}

func init() { extraCommands = append(extraCommands, verifyCmd) }
