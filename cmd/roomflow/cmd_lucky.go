package main

import (
	"context"
	"crypto/rand"
	"database/sql"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"time"

	"github.com/spf13/cobra"

	"github.com/hyapp/roomflow/internal/app"
	"github.com/hyapp/roomflow/internal/config"
	"github.com/hyapp/roomflow/internal/mysqlx"
	"github.com/hyapp/roomflow/services/luckydraw"
	"github.com/hyapp/roomflow/services/luckydraw/luckyoutbox"
	"github.com/hyapp/roomflow/services/luckydraw/wallet"
	"github.com/hyapp/roomflow/sinks/mysql/luckystats"
)

func init() { extraCommands = append(extraCommands, luckyCmd) }

// luckyCmd is `roomflow lucky`: seed 003's draw service, and under it the
// one-shot admin commands (MySQL only: no listener, no Kafka, no wallet),
// safe to run with the service's --config while it serves.
func luckyCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "lucky",
		Short: "Serve seed 003's lucky gift draw service (gRPC LuckyGiftService) and its reward outbox worker",
		Long: `lucky serves hyapp.activity.v1.LuckyGiftService (CheckLuckyGift,
ExecuteLuckyGiftDraw) on lucky.grpc_addr, with the gRPC health service and
reflection; metrics on metrics.addr. Each draw is one MySQL transaction
(concurrent draws of an app_code are group-committed): idempotent by
command_id, pool rows locked in key order, inflow and payout by seed 003's
formulas, risk caps, crypto/rand selection on the filtered table, audit
material and lucky_outbox rows. After commit the reward is credited
through lucky.wallet_grpc_addr (bounded by lucky.wallet_credit_timeout);
a failure leaves it PENDING for the lucky_outbox worker, which also
publishes the lucky events to kafka.topics.lucky_events at least once.

At its first start it records in MySQL that the draw service owns
lucky_pools (lucky_pool_owner): from then on the sink no longer adds the
inflow of drawn gifts to the balances. It serves with no wallet and with
Kafka down (rewards and events wait in lucky_outbox). lucky.audit_key
(or ROOMFLOW_LUCKY_AUDIT_KEY) is required.

lucky.tls (cert_file, key_file, client_ca_file, allowed_client_names)
serves mutual TLS and admits callers by the DNS or SPIFFE URI names of
their certificates; lucky.wallet_tls dials the wallet over TLS with a
client certificate. Their files are read at start (a bad one: exit 2
naming the key) and re-read when they change. A lucky.grpc_addr other
hosts reach without lucky.tls.client_ca_file is logged as a WARN, or
refused (exit 2) with lucky.require_tls: true.

Admin subcommands: audit, rules, pools fund, switch, rewards retry.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			d, err := g.deps()
			if err != nil {
				return err
			}
			if d.Config.Lucky.GRPCAddr == "" {
				return errors.New("lucky.grpc_addr is empty: nothing to serve")
			}
			if err := checkLucky(d); err != nil {
				return err
			}
			d.Flags = cmd.Flags()
			return app.Run(cmd.Context(), d, []app.Spec{luckySpec()})
		},
	}
	instanceIDFlag(cmd.Flags())
	cmd.AddCommand(luckyAuditCmd(g), luckyRulesCmd(g), luckyPoolsCmd(g), luckySwitchCmd(g), luckyRewardsCmd(g), luckyStatsCmd(g))
	return cmd
}

// luckySpec builds the draw service: ownership recorded before serving,
// the wallet client, the lucky_outbox worker (the draw's synchronous
// dispatcher too), the payout gauges, then the gRPC server on
// lucky.grpc_addr. Neither the wallet nor Kafka is dialled before use, so
// it serves while either is down.
func luckySpec() app.Spec {
	return app.Spec{Name: "lucky", New: func(ctx context.Context, d *app.Deps) (app.Component, error) {
		var svc *luckydraw.Service
		dispatch := func(ctx context.Context, app string) (bool, error) { return svc.DispatchEnabled(ctx, app) }
		instance := instanceOrHost(d.Flag("instance-id"))
		drawCfg, err := luckyDrawConfig(d)
		if err != nil {
			return nil, err
		}
		// The worker id names this process, not the pod: a restarted
		// process (same --instance-id) must not take the rows its previous
		// incarnation claimed for its own before their lease ends.
		outCfg, err := luckyOutboxConfig(d, workerID(instance), dispatch)
		if err != nil {
			return nil, err
		}
		walletCfg, err := luckyWalletConfig(d)
		if err != nil {
			return nil, err
		}
		// The certificates are read here, at start, not by `roomflow
		// config`: a missing or bad file stops the command naming its key
		// (exit 2) before anything is dialled.
		srvTLS, err := luckyServerTLS(d)
		walletTLS, werr := luckyWalletTLS(d)
		if err := errors.Join(err, werr); err != nil {
			return nil, err
		}
		drawCfg.TLS, walletCfg.TLS = srvTLS, walletTLS
		db, err := d.DB(ctx)
		if err != nil {
			return nil, err
		}
		if err := luckydraw.RecordOwnership(ctx, db, instance, time.Now()); err != nil {
			return nil, err
		}
		wc, err := wallet.New(walletCfg)
		if err != nil {
			return nil, err
		}
		worker, err := luckyoutbox.New(outCfg, db, wc)
		if err != nil {
			wc.Close()
			return nil, err
		}
		// From here on a failure closes the worker's Kafka client and the
		// wallet's connection; the running component closes them itself.
		started := false
		defer func() {
			if !started {
				worker.Close(context.Background())
				wc.Close()
			}
		}()
		drawCfg.Dispatcher = worker
		if svc, err = luckydraw.New(drawCfg, db); err != nil {
			return nil, err
		}
		if reg := registerer(d); reg != nil {
			pc, err := luckystats.NewPayoutCollector(luckystats.PayoutCollectorConfig{AppCode: d.Config.AppCode, Logger: d.Log}, db)
			if err != nil {
				return nil, err
			}
			if err := reg.Register(pc); err != nil {
				return nil, err
			}
		}
		ln, err := net.Listen("tcp", d.Config.Lucky.GRPCAddr)
		if err != nil {
			return nil, fmt.Errorf("lucky.grpc_addr: %w", err)
		}
		serve := app.ComponentFunc(func(ctx context.Context) error { return svc.Serve(ctx, ln) })
		work := app.ComponentFunc(func(ctx context.Context) error {
			defer wc.Close()
			defer worker.Close(context.Background())
			return worker.Run(ctx)
		})
		started = true
		return app.Together(serve, work), nil
	}}
}

// instanceOrHost is the replica's name for lucky_pool_owner.
func instanceOrHost(id string) string {
	if id != "" {
		return id
	}
	h, _ := os.Hostname()
	return h
}

// workerID is instance plus a random suffix, at most 64 bytes.
func workerID(instance string) string {
	var b [4]byte
	rand.Read(b[:]) //nolint:errcheck // crypto/rand never fails on Linux
	return fmt.Sprintf("%.55s-%x", instance, b)
}

// adminDB opens MySQL for a one-shot admin command.
func adminDB(cmd *cobra.Command, g *globals) (*config.Config, *sql.DB, error) {
	cfg, err := g.load()
	if err != nil {
		return nil, nil, err
	}
	db, err := mysqlx.Open(cmd.Context(), cfg.MySQL)
	if err != nil {
		return nil, nil, err
	}
	return cfg, db, nil
}

func luckyAuditCmd(g *globals) *cobra.Command {
	var (
		drawID string
		since  time.Duration
	)
	cmd := &cobra.Command{
		Use:   "audit",
		Short: "Recompute draws' selected tier, reward and random_digest from their audit material",
		Long: `audit re-reads lucky_draw_records (one --draw-id, or every draw of the last
--since) and recomputes from the stored candidate table and random_value the
selected tier, the reward coins and the HMAC random_digest with
lucky.audit_key (ROOMFLOW_LUCKY_AUDIT_KEY). It prints one line per draw
that differs and a summary; the exit status is 0 when every draw matches,
1 on a mismatch or an unknown draw id.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if (drawID == "") == (since == 0) {
				return errors.New("give exactly one of --draw-id and --since")
			}
			cfg, db, err := adminDB(cmd, g)
			if err != nil {
				return err
			}
			defer db.Close()
			if cfg.Lucky.AuditKey == "" {
				return errors.New("lucky.audit_key: must be set (or ROOMFLOW_LUCKY_AUDIT_KEY)")
			}
			q := luckydraw.AuditQuery{DrawID: drawID}
			if since > 0 {
				q.SinceMs = time.Now().Add(-since).UnixMilli()
			}
			res, err := luckydraw.Audit(cmd.Context(), db, cfg.Lucky.AuditKey, q)
			if err != nil {
				return err
			}
			bad := 0
			for _, r := range res {
				if !r.OK {
					bad++
					fmt.Fprintf(cmd.OutOrStdout(), "MISMATCH %s: %v\n", r.DrawID, r.Mismatches)
				}
			}
			fmt.Fprintf(cmd.OutOrStdout(), "audited %d draws: %d match, %d differ\n", len(res), len(res)-bad, bad)
			if bad > 0 {
				return fmt.Errorf("%d of %d draws do not match their audit material", bad, len(res))
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&drawID, "draw-id", "", "the draw to audit")
	cmd.Flags().DurationVar(&since, "since", 0, "audit every draw of this last span (e.g. 24h)")
	return cmd
}

func luckyRulesCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "rules",
		Short: "Publish lucky rule versions (immutable) and change their status",
	}
	cmd.AddCommand(&cobra.Command{
		Use:   "publish FILE",
		Short: "Validate and publish one rule version with its tiers from YAML",
		Long: `publish reads one rule version (gift_id, rule_version, gift_price,
pool_rate_ppm, platform_weight_ppm, room_weight_ppm, target_payout_rate_ppm,
max_single_payout, max_user_daily_payout, max_room_hourly_payout, status
(default draft), effective_at_ms (default now) and tiers: tier_id,
reward_type none|fixed|multiplier, reward_value, probability_ppm,
min_pool_balance, enabled (default true)), validates it (probabilities sum
to 1,000,000, exactly one none tier, ppm ranges) and inserts the rule and
its tiers in one transaction. Versions are immutable: publishing an
existing version with other content is refused; the same content again
is a no-op. Unknown keys are an error.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			raw, err := os.ReadFile(args[0])
			if err != nil {
				return err
			}
			r, err := parseRuleFile(raw, time.Now().UnixMilli())
			if err != nil {
				return err
			}
			_, db, err := adminDB(cmd, g)
			if err != nil {
				return err
			}
			defer db.Close()
			if err := luckydraw.PublishRule(cmd.Context(), db, r); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "published %s/%s (%s, %d tiers)\n", r.GiftID, r.RuleVersion, r.Status, len(r.Tiers))
			return nil
		},
	}, &cobra.Command{
		Use:   "status GIFT_ID RULE_VERSION draft|active|paused|retired",
		Short: "Change a rule version's status (pause or retire it, or activate it)",
		Args:  cobra.ExactArgs(3),
		RunE: func(cmd *cobra.Command, args []string) error {
			_, db, err := adminDB(cmd, g)
			if err != nil {
				return err
			}
			defer db.Close()
			if err := luckydraw.SetRuleStatus(cmd.Context(), db, args[0], args[1], args[2]); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s/%s is %s\n", args[0], args[1], args[2])
			return nil
		},
	})
	return cmd
}

func luckyPoolsCmd(g *globals) *cobra.Command {
	var (
		scopeType, scopeID, appCode string
		amount, floor               int64
	)
	fund := &cobra.Command{
		Use:   "fund",
		Short: "Add coins to a pool's balance (and funded) and optionally set its reserve_floor",
		Long: `fund adds --amount coins to one lucky_pools row's balance and funded in
one statement (creating the row), so balance = funded + total_in -
total_out keeps holding; --reserve-floor sets the floor the draw never
pays below. The draw reads balance as stored, also on rows seeded by SQL.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, db, err := adminDB(cmd, g)
			if err != nil {
				return err
			}
			defer db.Close()
			if appCode == "" {
				appCode = cfg.AppCode
			}
			var fl *int64
			if cmd.Flags().Changed("reserve-floor") {
				fl = &floor
			}
			if err := luckydraw.FundPool(cmd.Context(), db, appCode, scopeType, scopeID, amount, fl); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "funded %s %s/%s with %d\n", appCode, scopeType, scopeID, amount)
			return nil
		},
	}
	fund.Flags().StringVar(&scopeType, "scope-type", "platform", "platform, room or gift")
	fund.Flags().StringVar(&scopeID, "scope-id", "global", "global, the room_id or the gift_id")
	fund.Flags().StringVar(&appCode, "app-code", "", "app_code of the pool (default: the configured app_code)")
	fund.Flags().Int64Var(&amount, "amount", 0, "coins to add (>= 0)")
	fund.Flags().Int64Var(&floor, "reserve-floor", 0, "set the pool's reserve_floor")
	cmd := &cobra.Command{Use: "pools", Short: "Operate the lucky pools"}
	cmd.AddCommand(fund)
	return cmd
}

func luckySwitchCmd(g *globals) *cobra.Command {
	var room, appCode string
	cmd := &cobra.Command{
		Use:   "switch NAME on|off|default",
		Short: "Override a kill switch at run time (every replica sees it within 1s)",
		Long: `switch stores an operator override of one of seed 003's kill switches
in MySQL (lucky_switches); it wins over the configured start value
(lucky.switches.*) until 'switch NAME default' removes it. Names:
global_lucky_gift_enabled, large_tier_enabled, wallet_credit_dispatch,
and room_scope_paused with --room (on pauses the room's lucky draws).`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			var v *bool
			switch args[1] {
			case "on", "off":
				b := args[1] == "on"
				v = &b
			case "default":
			default:
				return fmt.Errorf("switch value must be on, off or default (got %q)", args[1])
			}
			cfg, db, err := adminDB(cmd, g)
			if err != nil {
				return err
			}
			defer db.Close()
			if appCode == "" {
				appCode = cfg.AppCode
			}
			if err := luckydraw.SetSwitch(cmd.Context(), db, appCode, args[0], room, v); err != nil {
				return err
			}
			what := args[0]
			if room != "" {
				what += " " + strconv.Quote(room)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s %s: %s\n", appCode, what, args[1])
			return nil
		},
	}
	cmd.Flags().StringVar(&room, "room", "", "the room of room_scope_paused")
	cmd.Flags().StringVar(&appCode, "app-code", "", "app_code (default: the configured app_code)")
	return cmd
}

// checkLucky validates every part of `roomflow lucky` before anything
// connects.
func checkLucky(d *app.Deps) error {
	_, err1 := luckyDrawConfig(d)
	_, err2 := luckyOutboxConfig(d, "", nil)
	_, err3 := luckyWalletConfig(d)
	return errors.Join(err1, err2, err3, checkLuckyTLS(d))
}

func luckyRewardsCmd(g *globals) *cobra.Command {
	var appCode string
	retry := &cobra.Command{
		Use:   "retry",
		Short: "Re-drive failed rewards: back to pending, retried by the running service's outbox worker",
		Long: `retry puts every reward whose retries were exhausted (lucky_outbox row and
draw reward_status failed) back to pending with its attempts reset, due
now; the lucky_outbox worker of a running 'roomflow lucky' credits it
(the wallet dedupes by reward_id, so a reward credited before its answer
was lost is not paid twice). --app-code limits it to one app.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			_, db, err := adminDB(cmd, g)
			if err != nil {
				return err
			}
			defer db.Close()
			n, err := luckyoutbox.RetryFailed(cmd.Context(), db, appCode)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%d failed rewards re-driven\n", n)
			return nil
		},
	}
	retry.Flags().StringVar(&appCode, "app-code", "", "only this app_code (default: every app)")
	cmd := &cobra.Command{Use: "rewards", Short: "Operate lucky rewards"}
	cmd.AddCommand(retry)
	return cmd
}
