package command

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/hyapp/roomflow/domain/lucky"
	"github.com/hyapp/roomflow/internal/app"
	"github.com/hyapp/roomflow/internal/cfgerr"
	"github.com/hyapp/roomflow/internal/config"
	"github.com/hyapp/roomflow/internal/mysqlx"
	"github.com/hyapp/roomflow/services/luckydraw"
	"github.com/hyapp/roomflow/services/luckydraw/wallet"
	"github.com/hyapp/roomflow/sinks/mysql/luckystats"
	"github.com/hyapp/roomflow/tools/luckyctl"
)

// luckyCmd is `roomflow lucky`, the draw service (docs/requirements.md
// LUCKY-*), and under it the one-shot admin commands (MySQL only: no
// listener, no Kafka, no wallet), safe to run beside it with its --config.
func luckyCmd(g *globals) *cobra.Command {
	cmd := newCmd("lucky", "Serve the lucky gift draw service (gRPC LuckyGiftService) and its reward outbox worker", help("lucky"), cobra.NoArgs,
		g.withDeps(func(cmd *cobra.Command, args []string, d *app.Deps) error {
			if d.Config.Lucky.GRPCAddr == "" {
				return &cfgerr.FieldError{Key: "lucky.grpc_addr", Msg: "is empty: nothing to serve"}
			}
			if err := CheckLucky(d); err != nil {
				return err
			}
			d.Flags = cmd.Flags()
			return app.Run(cmd.Context(), d, []app.Spec{luckySpec()})
		}))
	instanceIDFlag(cmd.Flags())
	cmd.AddCommand(luckyAuditCmd(g), luckyRulesCmd(g), luckyPoolsCmd(g), luckySwitchCmd(g), luckyRewardsCmd(g), luckyStatsCmd(g), luckyAdminLogCmd(g), luckyTierCmd(g), luckyFairnessCmd(g))
	return cmd
}

// luckySpec builds the draw service: every config checked and the
// certificates read first, then luckydraw's server over MySQL (ownership,
// rule statuses, the wallet client, the lucky_outbox worker), the payout
// gauges, and the gRPC listener on lucky.grpc_addr, which serves on for
// shutdown.drain_delay after a stop.
func luckySpec() app.Spec {
	return app.Spec{Name: "lucky", New: func(ctx context.Context, d *app.Deps) (app.Component, error) {
		c, err := luckyServerConfig(d)
		if err != nil {
			return nil, err
		}
		// The certificates are read here, at start, not by `roomflow
		// config`: a missing or bad file stops the command naming its key
		// (exit 2) before anything is dialled.
		// So is lucky.fairness.key.
		srvTLS, err := luckydraw.ServerTLSFrom(d.Config, d.Log)
		walletTLS, werr := wallet.TLSFrom(d.Config, d.Log)
		keys, kerr := luckydraw.FairnessKeysFrom(d.Config)
		if err := errors.Join(err, werr, kerr, checkWireFormat(d)); err != nil {
			return nil, err
		}
		c.Draw.TLS, c.Wallet.TLS, c.Draw.FairnessKeys, c.Instance = srvTLS, walletTLS, keys, d.Flag("instance-id")
		if c.Outbox.Frames, err = publicFrames(ctx, d, "lucky-outbox", "lucky_events"); err != nil {
			return nil, err
		}
		db, err := d.DB(ctx)
		if err != nil {
			return nil, err
		}
		srv, err := luckydraw.NewServer(ctx, db, c)
		if err != nil {
			return nil, err
		}
		ln, err := payoutGaugesAndListener(d, db)
		if err != nil {
			srv.Close()
			return nil, err
		}
		return d.Serving(app.ComponentFunc(func(ctx context.Context) error { return srv.Run(ctx, ln) })), nil
	}}
}

// payoutGaugesAndListener registers the payout gauges of app_code's draws
// (with a registry) and listens on lucky.grpc_addr.
func payoutGaugesAndListener(d *app.Deps, db *sql.DB) (net.Listener, error) {
	if err := luckystats.RegisterPayoutCollector(registerer(d), luckystats.PayoutCollectorConfig{AppCode: d.Config.AppCode, Logger: d.Log}, db); err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", d.Config.Lucky.GRPCAddr)
	if err != nil {
		return nil, fmt.Errorf("lucky.grpc_addr: %w", err)
	}
	return ln, nil
}

// withDB runs a one-shot admin command's work with the config and MySQL,
// closed after it.
func withDB(cmd *cobra.Command, g *globals, run func(*config.Config, *sql.DB) error) error {
	return g.withConfig(func(cmd *cobra.Command, _ []string, cfg *config.Config) error {
		db, err := mysqlx.Open(cmd.Context(), cfg.MySQL)
		if err != nil {
			return err
		}
		defer db.Close()
		return run(cfg, db)
	})(cmd, nil)
}

// withAdmin runs an operator command's work with the config and the change
// maker over MySQL, closed after it; a bad lucky.replaced_version_grace,
// --wait or --operator is a usage error naming it, found before anything
// is written.
func withAdmin(cmd *cobra.Command, g *globals, run func(*config.Config, *luckydraw.Admin) error) error {
	cfg, err := g.load()
	if err != nil {
		return err
	}
	var own luckydraw.AdminConfig
	if f := cmd.Flags().Lookup("wait"); f != nil {
		own.Wait, _ = cmd.Flags().GetDuration("wait")
		own.Operator, _ = cmd.Flags().GetString("operator")
	}
	db, a, err := luckyctl.OpenAdmin(cmd.Context(), cfg, own)
	if err != nil {
		return err
	}
	defer db.Close()
	return run(cfg, a)
}

// printChange prints the change an operator command made.
func printChange(cmd *cobra.Command) func(luckydraw.Change, error) error {
	return func(c luckydraw.Change, err error) error {
		if err == nil {
			luckyctl.PrintChanges(cmd.OutOrStdout(), c)
		}
		return err
	}
}

// operatorFlags adds --wait and --operator to an operator command.
func operatorFlags(cmd *cobra.Command) *cobra.Command {
	cmd.Flags().Duration("wait", luckydraw.DefaultAdminWait, "give up (exit 1, nothing changed) after waiting this long for running draws or another change (1s-1h, whole seconds)")
	cmd.Flags().String("operator", "", "who makes the change, for lucky_admin_log (default $USER)")
	return cmd
}

func luckyAuditCmd(g *globals) *cobra.Command {
	var o luckyctl.AuditOptions
	cmd := newCmd("audit", "Recompute draws' selected tier, reward and random_digest from their audit material", help("lucky-audit"), cobra.NoArgs,
		func(cmd *cobra.Command, _ []string) error {
			if err := o.Check(); err != nil {
				return err
			}
			return withDB(cmd, g, func(cfg *config.Config, db *sql.DB) error {
				return luckyctl.Audit(cmd.Context(), db, cfg.Lucky.AuditKey, o, time.Now(), cmd.OutOrStdout())
			})
		})
	cmd.Flags().StringVar(&o.DrawID, "draw-id", "", "the draw to audit")
	cmd.Flags().DurationVar(&o.Since, "since", 0, "audit every draw of this last span (e.g. 24h)")
	return cmd
}

func luckyRulesCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "rules",
		Short: "Publish lucky rule versions (immutable) and change their status",
	}
	var force bool
	publish := newCmd("publish FILE", "Validate and publish one rule version with its tiers from YAML", help("lucky-rules-publish"), cobra.ExactArgs(1),
		func(cmd *cobra.Command, args []string) error {
			raw, err := os.ReadFile(args[0])
			if err != nil {
				return err
			}
			r, err := lucky.ParseRuleFile(raw, time.Now().UnixMilli())
			if err != nil {
				return err
			}
			// The rule and its payout band are checked before MySQL is
			// opened (lucky.publish_payout_band_ppm itself first).
			cfg, err := g.load()
			if err != nil {
				return err
			}
			if _, err := luckydraw.AdminConfigFrom(cfg, luckydraw.AdminConfig{}); err != nil {
				return err
			}
			if err := luckyctl.CheckPublish(cmd.OutOrStdout(), &r, cfg.Lucky.PublishPayoutBandPPM, force); err != nil {
				return err
			}
			return withAdmin(cmd, g, func(_ *config.Config, admin *luckydraw.Admin) error {
				cs, err := admin.PublishRule(cmd.Context(), r)
				if err != nil {
					return err
				}
				luckyctl.PrintChanges(cmd.OutOrStdout(), cs...)
				return nil
			})
		})
	status := newCmd("status GIFT_ID RULE_VERSION draft|active|paused|retired", "Change a rule version's status (pause or retire it, or activate it)",
		help("lucky-rules-status"), cobra.ExactArgs(3), func(cmd *cobra.Command, args []string) error {
			if err := luckyctl.CheckRuleStatus(args[2]); err != nil {
				return err
			}
			return withAdmin(cmd, g, func(_ *config.Config, admin *luckydraw.Admin) error {
				return printChange(cmd)(admin.SetRuleStatus(cmd.Context(), args[0], args[1], args[2]))
			})
		})
	publish.Flags().BoolVar(&force, "force", false, "publish even when the table's analytic payout rate lies outside lucky.publish_payout_band_ppm of its target")
	cmd.AddCommand(operatorFlags(publish), operatorFlags(status), luckyRulesShowCmd(g), luckyRulesSimulateCmd(g))
	return cmd
}

func luckyRulesShowCmd(g *globals) *cobra.Command {
	return newCmd("show [GIFT_ID]", "Show which rule version of each gift draws now, which are scheduled, and why the others do not draw", "", cobra.MaximumNArgs(1),
		func(cmd *cobra.Command, args []string) error {
			return withAdmin(cmd, g, func(_ *config.Config, admin *luckydraw.Admin) error {
				gift := ""
				if len(args) == 1 {
					gift = args[0]
				}
				vs, err := admin.RuleVersions(cmd.Context(), gift)
				if err != nil {
					return err
				}
				luckyctl.PrintRuleVersions(cmd.OutOrStdout(), vs)
				return nil
			})
		})
}

func luckyPoolsCmd(g *globals) *cobra.Command {
	var (
		scopeType, scopeID, appCode, fundID string
		amount, floor                       int64
	)
	fund := newCmd("fund", "Add coins to a pool's balance (and funded) and optionally set its reserve_floor", help("lucky-pools-fund"), cobra.NoArgs,
		func(cmd *cobra.Command, _ []string) error {
			if err := luckyctl.CheckFund(scopeType, scopeID, amount, floor); err != nil {
				return err
			}
			if err := luckyctl.CheckFundID(fundID, cmd.Flags().Changed("fund-id")); err != nil {
				return err
			}
			return withAdmin(cmd, g, func(cfg *config.Config, admin *luckydraw.Admin) error {
				if appCode == "" {
					appCode = cfg.AppCode
				}
				var fl *int64
				if cmd.Flags().Changed("reserve-floor") {
					fl = &floor
				}
				c, err := admin.FundPoolOnce(cmd.Context(), fundID, appCode, scopeType, scopeID, amount, fl)
				if errors.Is(err, luckydraw.ErrFundIDReused) {
					err = fmt.Errorf("--fund-id: %w", err)
				}
				return printChange(cmd)(c, err)
			})
		})
	operatorFlags(fund)
	fund.Flags().StringVar(&scopeType, "scope-type", "platform", "platform, room or gift")
	fund.Flags().StringVar(&scopeID, "scope-id", "global", "global, the room_id or the gift_id")
	fund.Flags().StringVar(&appCode, "app-code", "", "app_code of the pool (default: the configured app_code)")
	fund.Flags().Int64Var(&amount, "amount", 0, "coins to add (>= 0)")
	fund.Flags().Int64Var(&floor, "reserve-floor", 0, "set the pool's reserve_floor")
	fund.Flags().StringVar(&fundID, "fund-id", "", "apply this fund at most once: a retry with the same id and flags changes nothing (scripts and Jobs should pass one)")
	cmd := &cobra.Command{Use: "pools", Short: "Operate the lucky pools"}
	cmd.AddCommand(fund)
	return cmd
}

func luckySwitchCmd(g *globals) *cobra.Command {
	var room, appCode string
	cmd := newCmd("switch NAME on|off|default", "Override a kill switch at run time (draws see it when the command returns)", help("lucky-switch"), cobra.ExactArgs(2),
		func(cmd *cobra.Command, args []string) error {
			v, err := luckyctl.ParseSwitch(args[0], args[1], room)
			if err != nil {
				return err
			}
			return withAdmin(cmd, g, func(cfg *config.Config, admin *luckydraw.Admin) error {
				if appCode == "" {
					appCode = cfg.AppCode
				}
				return printChange(cmd)(admin.SetSwitch(cmd.Context(), appCode, args[0], room, v))
			})
		})
	operatorFlags(cmd)
	cmd.Flags().StringVar(&room, "room", "", "the room of room_scope_paused or pilot_room")
	cmd.Flags().StringVar(&appCode, "app-code", "", "app_code (default: the configured app_code)")
	return cmd
}

func luckyRewardsCmd(g *globals) *cobra.Command {
	var appCode string
	retry := newCmd("retry", "Re-drive failed rewards: back to pending, retried by the running service's outbox worker", help("lucky-rewards-retry"), cobra.NoArgs,
		func(cmd *cobra.Command, _ []string) error {
			return withAdmin(cmd, g, func(_ *config.Config, admin *luckydraw.Admin) error {
				n, err := admin.RetryFailedRewards(cmd.Context(), appCode)
				if err != nil {
					return err
				}
				fmt.Fprintf(cmd.OutOrStdout(), "%d failed rewards re-driven\n", n)
				return nil
			})
		})
	operatorFlags(retry)
	retry.Flags().StringVar(&appCode, "app-code", "", "only this app_code (default: every app)")
	cmd := &cobra.Command{Use: "rewards", Short: "Operate lucky rewards"}
	cmd.AddCommand(retry)
	return cmd
}

func luckyAdminLogCmd(g *globals) *cobra.Command {
	var since time.Duration
	cmd := newCmd("admin-log", "Print who changed what in the lucky draw service (lucky_admin_log)", help("lucky-admin-log"), cobra.NoArgs,
		func(cmd *cobra.Command, _ []string) error {
			if err := luckyctl.CheckSince(since); err != nil {
				return err
			}
			return withAdmin(cmd, g, func(_ *config.Config, admin *luckydraw.Admin) error {
				es, err := admin.AdminLog(cmd.Context(), time.Now().Add(-since).UnixMilli())
				if err != nil {
					return err
				}
				luckyctl.PrintAdminLog(cmd.OutOrStdout(), es, since)
				return nil
			})
		})
	cmd.Flags().DurationVar(&since, "since", 24*time.Hour, "print the changes of this last span")
	return cmd
}
