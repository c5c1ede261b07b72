package command

import (
	"context"
	"crypto/rand"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/hyapp/roomflow/domain/lucky"

	"github.com/spf13/cobra"

	"github.com/hyapp/roomflow/internal/app"
	"github.com/hyapp/roomflow/internal/cfgerr"
	"github.com/hyapp/roomflow/internal/config"
	"github.com/hyapp/roomflow/internal/mysqlx"
	"github.com/hyapp/roomflow/services/luckydraw"
	"github.com/hyapp/roomflow/services/luckydraw/luckyoutbox"
	"github.com/hyapp/roomflow/services/luckydraw/wallet"
	"github.com/hyapp/roomflow/sinks/mysql/luckystats"
)

// luckyCmd is `roomflow lucky`: seed 003's draw service, and under it the
// one-shot admin commands (MySQL only: no listener, no Kafka, no wallet),
// safe to run with the service's --config while it serves.
func luckyCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "lucky",
		Short: "Serve seed 003's lucky gift draw service (gRPC LuckyGiftService) and its reward outbox worker",
		Long:  help("lucky"),
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			d, err := g.deps()
			if err != nil {
				return err
			}
			if d.Config.Lucky.GRPCAddr == "" {
				return errors.New("lucky.grpc_addr is empty: nothing to serve")
			}
			if err := CheckLucky(d); err != nil {
				return err
			}
			d.Flags = cmd.Flags()
			return app.Run(cmd.Context(), d, []app.Spec{luckySpec()})
		},
	}
	instanceIDFlag(cmd.Flags())
	cmd.AddCommand(luckyAuditCmd(g), luckyRulesCmd(g), luckyPoolsCmd(g), luckySwitchCmd(g), luckyRewardsCmd(g), luckyStatsCmd(g), luckyAdminLogCmd(g), luckyTierCmd(g))
	return cmd
}

// luckySpec builds the draw service: ownership recorded and rule
// statuses tidied before serving, the wallet client, the lucky_outbox worker (the draw's synchronous
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
		// Statuses that no longer draw read retired before serving, so
		// `rules show` and the statuses agree.
		admin, err := luckydraw.NewAdmin(db, luckydraw.AdminConfig{Operator: "roomflow lucky", Host: instance,
			ReplacedVersionGrace: drawCfg.ReplacedVersionGrace, Logger: d.Log})
		if err != nil {
			return nil, err
		}
		if _, err := admin.TidyRuleStatuses(ctx); err != nil {
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
		if err := svc.WarnEmptyPilot(ctx); err != nil {
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

// luckyAdmin opens MySQL and the operator change maker for a one-shot
// admin command; a bad lucky.replaced_version_grace is a usage error
// naming the key, found before anything is written.
func luckyAdmin(cmd *cobra.Command, g *globals) (*config.Config, *sql.DB, *luckydraw.Admin, error) {
	cfg, err := g.load()
	if err != nil {
		return nil, nil, nil, err
	}
	acfg := luckydraw.AdminConfig{ReplacedVersionGrace: cfg.Lucky.ReplacedVersionGrace.D(), LargeTierMinReward: cfg.Lucky.LargeTierMinReward,
		PilotMode: cfg.Lucky.Switches.PilotMode}
	if f := cmd.Flags().Lookup("wait"); f != nil {
		acfg.Wait, _ = cmd.Flags().GetDuration("wait")
		acfg.Operator, _ = cmd.Flags().GetString("operator")
	}
	if err := cfgerr.Under("lucky", map[string]string{"wait": "--wait", "operator": "--operator"}, acfg.Validate()); err != nil {
		return nil, nil, nil, err
	}
	db, err := mysqlx.Open(cmd.Context(), cfg.MySQL)
	if err != nil {
		return nil, nil, nil, err
	}
	a, err := luckydraw.NewAdmin(db, acfg)
	if err != nil {
		db.Close()
		return nil, nil, nil, err
	}
	return cfg, db, a, nil
}

// operatorFlags adds --wait and --operator to an operator command.
func operatorFlags(cmd *cobra.Command) *cobra.Command {
	cmd.Flags().Duration("wait", luckydraw.DefaultAdminWait, "give up (exit 1, nothing changed) after waiting this long for running draws or another change (1s-1h, whole seconds)")
	cmd.Flags().String("operator", "", "who makes the change, for lucky_admin_log (default $USER)")
	return cmd
}

// printChanges prints one line per change, and its note.
func printChanges(w io.Writer, cs ...luckydraw.Change) {
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

func orNone(v string) string {
	if v == "" {
		return "(none)"
	}
	return v
}

func luckyAuditCmd(g *globals) *cobra.Command {
	var (
		drawID string
		since  time.Duration
	)
	cmd := &cobra.Command{
		Use:   "audit",
		Short: "Recompute draws' selected tier, reward and random_digest from their audit material",
		Long:  help("lucky-audit"),
		Args:  cobra.NoArgs,
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
	cmd.AddCommand(operatorFlags(&cobra.Command{
		Use:   "publish FILE",
		Short: "Validate and publish one rule version with its tiers from YAML",
		Long:  help("lucky-rules-publish"),
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			raw, err := os.ReadFile(args[0])
			if err != nil {
				return err
			}
			r, err := lucky.ParseRuleFile(raw, time.Now().UnixMilli())
			if err != nil {
				return err
			}
			_, db, admin, err := luckyAdmin(cmd, g)
			if err != nil {
				return err
			}
			defer db.Close()
			cs, err := admin.PublishRule(cmd.Context(), r)
			if err != nil {
				return err
			}
			printChanges(cmd.OutOrStdout(), cs...)
			return nil
		},
	}), operatorFlags(&cobra.Command{
		Use:   "status GIFT_ID RULE_VERSION draft|active|paused|retired",
		Short: "Change a rule version's status (pause or retire it, or activate it)",
		Long:  help("lucky-rules-status"),
		Args:  cobra.ExactArgs(3),
		RunE: func(cmd *cobra.Command, args []string) error {
			if !slices.Contains([]string{"draft", "active", "paused", "retired"}, args[2]) {
				return cfgerr.Usage(fmt.Errorf("status must be draft, active, paused or retired (got %q)", args[2]))
			}
			_, db, admin, err := luckyAdmin(cmd, g)
			if err != nil {
				return err
			}
			defer db.Close()
			c, err := admin.SetRuleStatus(cmd.Context(), args[0], args[1], args[2])
			if err != nil {
				return err
			}
			printChanges(cmd.OutOrStdout(), c)
			return nil
		},
	}), luckyRulesShowCmd(g))
	return cmd
}

func luckyRulesShowCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "show [GIFT_ID]",
		Short: "Show which rule version of each gift draws now, which are scheduled, and why the others do not draw",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			_, db, admin, err := luckyAdmin(cmd, g)
			if err != nil {
				return err
			}
			defer db.Close()
			gift := ""
			if len(args) == 1 {
				gift = args[0]
			}
			vs, err := admin.RuleVersions(cmd.Context(), gift)
			if err != nil {
				return err
			}
			w := cmd.OutOrStdout()
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
			return nil
		},
	}
}

func luckyPoolsCmd(g *globals) *cobra.Command {
	var (
		scopeType, scopeID, appCode string
		amount, floor               int64
	)
	fund := &cobra.Command{
		Use:   "fund",
		Short: "Add coins to a pool's balance (and funded) and optionally set its reserve_floor",
		Long:  help("lucky-pools-fund"),
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			switch {
			case !slices.Contains([]string{"platform", "room", "gift"}, scopeType):
				return cfgerr.Usage(fmt.Errorf("--scope-type must be platform, room or gift (got %q)", scopeType))
			case scopeID == "" || len(scopeID) > luckydraw.MaxRoomID:
				return cfgerr.Usage(fmt.Errorf("--scope-id must be 1-%d bytes", luckydraw.MaxRoomID))
			case amount < 0 || floor < 0:
				return cfgerr.Usage(fmt.Errorf("--amount and --reserve-floor must be >= 0"))
			}
			cfg, db, admin, err := luckyAdmin(cmd, g)
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
			c, err := admin.FundPool(cmd.Context(), appCode, scopeType, scopeID, amount, fl)
			if err != nil {
				return err
			}
			printChanges(cmd.OutOrStdout(), c)
			return nil
		},
	}
	operatorFlags(fund)
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
		Short: "Override a kill switch at run time (draws see it when the command returns)",
		Long:  help("lucky-switch"),
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			var v *bool
			switch args[1] {
			case "on", "off":
				b := args[1] == "on"
				v = &b
			case "default":
			default:
				return cfgerr.Usage(fmt.Errorf("switch value must be on, off or default (got %q)", args[1]))
			}
			if !slices.Contains(luckydraw.SwitchNames, args[0]) {
				return cfgerr.Usage(fmt.Errorf("unknown switch %q (one of %s)", args[0], strings.Join(luckydraw.SwitchNames, ", ")))
			}
			perRoom := args[0] == luckydraw.SwitchRoomScopePaused || args[0] == luckydraw.SwitchPilotRoom
			if perRoom != (room != "") || len(room) > luckydraw.MaxRoomID {
				return cfgerr.Usage(fmt.Errorf("--room: a room id of 1-%d bytes with %s or %s, and only with them", luckydraw.MaxRoomID,
					luckydraw.SwitchRoomScopePaused, luckydraw.SwitchPilotRoom))
			}
			cfg, db, admin, err := luckyAdmin(cmd, g)
			if err != nil {
				return err
			}
			defer db.Close()
			if appCode == "" {
				appCode = cfg.AppCode
			}
			c, err := admin.SetSwitch(cmd.Context(), appCode, args[0], room, v)
			if err != nil {
				return err
			}
			printChanges(cmd.OutOrStdout(), c)
			return nil
		},
	}
	operatorFlags(cmd)
	cmd.Flags().StringVar(&room, "room", "", "the room of room_scope_paused or pilot_room")
	cmd.Flags().StringVar(&appCode, "app-code", "", "app_code (default: the configured app_code)")
	return cmd
}

// CheckLucky validates every part of `roomflow lucky` before anything
// connects (the deployment tests check their configs with it).
func CheckLucky(d *app.Deps) error {
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
		Long:  help("lucky-rewards-retry"),
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			_, db, admin, err := luckyAdmin(cmd, g)
			if err != nil {
				return err
			}
			defer db.Close()
			n, err := admin.RetryFailedRewards(cmd.Context(), appCode)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%d failed rewards re-driven\n", n)
			return nil
		},
	}
	operatorFlags(retry)
	retry.Flags().StringVar(&appCode, "app-code", "", "only this app_code (default: every app)")
	cmd := &cobra.Command{Use: "rewards", Short: "Operate lucky rewards"}
	cmd.AddCommand(retry)
	return cmd
}

func luckyAdminLogCmd(g *globals) *cobra.Command {
	var since time.Duration
	cmd := &cobra.Command{
		Use:   "admin-log",
		Short: "Print who changed what in the lucky draw service (lucky_admin_log)",
		Long:  help("lucky-admin-log"),
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if since <= 0 {
				return cfgerr.Usage(fmt.Errorf("--since must be a positive duration (got %s)", since))
			}
			_, db, admin, err := luckyAdmin(cmd, g)
			if err != nil {
				return err
			}
			defer db.Close()
			es, err := admin.AdminLog(cmd.Context(), time.Now().Add(-since).UnixMilli())
			if err != nil {
				return err
			}
			w := cmd.OutOrStdout()
			for _, e := range es {
				fmt.Fprintf(w, "%s\t%s@%s\t%s\t%s\t%s\t%s -> %s\n", time.UnixMilli(e.AtMs).UTC().Format(time.RFC3339Nano),
					e.Operator, e.Host, orNone(e.AppCode), e.Command, e.Target, orNone(e.Old), orNone(e.New))
			}
			fmt.Fprintf(w, "%d changes in the last %s\n", len(es), since)
			return nil
		},
	}
	cmd.Flags().DurationVar(&since, "since", 24*time.Hour, "print the changes of this last span")
	return cmd
}
