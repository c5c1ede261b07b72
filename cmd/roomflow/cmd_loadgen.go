package main

import (
	"context"
	"fmt"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/hyapp/roomflow/internal/mysqlx"
	"github.com/hyapp/roomflow/producers/loadgen"
	"github.com/hyapp/roomflow/schemas/activityv1"
)

// scenarioFlags binds a loadgen.Scenario to flags shared by loadgen and demo.
func scenarioFlags(fs *pflag.FlagSet, sc *loadgen.Scenario) {
	fs.Uint64Var(&sc.Seed, "seed", sc.Seed, "random seed (a run is reproducible for its seed)")
	fs.IntVar(&sc.Rooms, "rooms", sc.Rooms, "rooms")
	fs.IntVar(&sc.Users, "users", sc.Users, "users")
	fs.IntVar(&sc.Sessions, "sessions", sc.Sessions, "mic sessions")
	fs.IntVar(&sc.Gifts, "gifts", sc.Gifts, "RoomGiftSent events")
	fs.Float64Var(&sc.LuckyShare, "lucky-share", sc.LuckyShare, "fraction of gifts that are lucky")
	fs.DurationVar(&sc.Span, "span", sc.Span, "simulated time the traffic spreads over (crosses UTC midnights)")
	fs.StringVar(&sc.EventIDPrefix, "id-prefix", sc.EventIDPrefix, "event id prefix (unique per run on one database)")
}

func loadgenCmd(g *globals) *cobra.Command {
	sc := loadgen.DefaultScenario()
	sc.EventIDPrefix = fmt.Sprintf("lg%d", time.Now().Unix())
	var (
		to        string
		rate      float64
		batch     int
		live      bool
		abandoned float64
		luckyAddr string
	)
	cmd := &cobra.Command{
		Use:   "loadgen",
		Short: "Write synthetic gift/mic traffic into room_outbox (or Kafka) and print the expected results",
		Long: `loadgen generates a reproducible scenario of rooms, users, mic sessions
(crossing UTC midnights), plain and lucky gifts, joins and heat changes, and
writes it into room_outbox in commit order (--to mysql, the default, as the
room service would) or straight to the room events topic (--to kafka). It
seeds the scenario's lucky_gift_rules row, then prints the oracle: the facts
roomflow must produce. 'roomflow verify' checks them later.

--live writes wall-clock traffic instead: the events lie between now and
now + --span and each row is inserted when the clock reaches its
occurred_at; --abandoned of the sessions are left unpublished or without a
down on purpose, for the mic timers (mic.pending_publish_max_age,
mic.publishing_session_max_age of the config) to close, and the oracle
includes those closes. Every other session keeps its events a third of the
shorter max age away from its timer's due time.

--lucky-addr host:port sends every lucky gift through that draw service
(roomflow lucky's LuckyGiftService) first (with --live right before the
transaction that writes it), as room-service does: check,
the debit's receipt, ExecuteLuckyGiftDraw with the gift's event id as
command_id, then the gift row names the draw_id it answered. Without it,
lucky gifts carry invented draw ids and no draw is made (the stream
inflow owns the pools, as before the draw service). The rule must be
active for the service (loadgen seeds it) and the pools funded ('roomflow
lucky pools fund') for draws to pay.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := g.load()
			if err != nil {
				return err
			}
			sc.AppCode = cfg.AppCode
			if live {
				if to != "mysql" {
					return fmt.Errorf("--live writes to mysql only")
				}
				if !cmd.Flags().Changed("span") {
					sc.Span = 10 * time.Minute
				}
				pol := loadgen.TimerPolicy{PendingPublishMaxAge: cfg.Mic.PendingPublishMaxAge.D(), PublishingSessionMaxAge: cfg.Mic.PublishingSessionMaxAge.D()}
				sc.Start, sc.Timers, sc.Abandoned = time.Now().Add(time.Second), &pol, abandoned
				sc.TimerMargin = min(pol.PendingPublishMaxAge, pol.PublishingSessionMaxAge) / 3
			}
			events, o := sc.Generate()
			ctx := cmd.Context()
			db, err := mysqlx.Open(ctx, cfg.MySQL)
			if err != nil {
				return err
			}
			defer db.Close()
			if err := loadgen.SeedRule(ctx, db, sc.Rule); err != nil {
				return err
			}
			// With --lucky-addr every lucky gift is drawn before its row is
			// written: all up front, or with --live right before each
			// transaction, at the gift's wall-clock time.
			var draw loadgen.BeforeWrite
			var drawn loadgen.DrawSummary
			if luckyAddr != "" {
				conn, err := grpc.NewClient(luckyAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
				if err != nil {
					return err
				}
				defer conn.Close()
				client := activityv1.NewLuckyGiftServiceClient(conn)
				draw = func(ctx context.Context, evs []loadgen.Event) error {
					sum, err := loadgen.DrawLucky(ctx, client, evs, 32)
					drawn.Add(sum)
					return err
				}
				if !live {
					if err := draw(ctx, events); err != nil {
						return err
					}
				}
			}
			start := time.Now()
			switch to {
			case "mysql":
				if live {
					_, _, err = loadgen.WriteOutboxLiveWith(ctx, db, events, batch, draw)
				} else {
					_, err = loadgen.WriteOutbox(ctx, db, events, batch, rate)
				}
				if err != nil {
					return err
				}
			case "kafka":
				cl, err := cfg.Kafka.Cluster(nil, nil).NewClient("loadgen", kgo.ProducerLinger(5*time.Millisecond))
				if err != nil {
					return err
				}
				defer cl.Close()
				if err := cl.ProduceSync(ctx, loadgen.Records(cfg.Kafka.Topics.RoomEvents, events)...).FirstErr(); err != nil {
					return err
				}
			default:
				return fmt.Errorf("--to must be mysql or kafka")
			}
			if luckyAddr != "" {
				fmt.Fprintf(cmd.OutOrStdout(), "drew %d lucky gifts through %s: %d hits, %d coins paid of %d spent, %d granted, %d pending, rejected %v\n",
					drawn.Draws, luckyAddr, drawn.Hits, drawn.RewardCoins, drawn.CoinSpent, drawn.Granted, drawn.Pending, drawn.Rejected)
			}
			el := time.Since(start)
			fmt.Fprintf(cmd.OutOrStdout(), "wrote %d events to %s in %s (%.0f events/s)\n", len(events), to, el.Round(time.Millisecond), float64(len(events))/el.Seconds())
			printOracle(cmd, o)
			return nil
		},
	}
	scenarioFlags(cmd.Flags(), &sc)
	cmd.Flags().StringVar(&to, "to", "mysql", "mysql (room_outbox) or kafka (room events topic)")
	cmd.Flags().Float64Var(&rate, "rate", 0, "events per second (0: as fast as possible)")
	cmd.Flags().IntVar(&batch, "batch", 200, "rows per room_outbox transaction")
	cmd.Flags().BoolVar(&live, "live", false, "wall-clock traffic from now over --span (default 10m), sessions closed by the mic timers included")
	cmd.Flags().Float64Var(&abandoned, "abandoned", 0.1, "with --live: share of sessions left for the mic timers to close")
	cmd.Flags().StringVar(&luckyAddr, "lucky-addr", "", "draw every lucky gift through this LuckyGiftService (roomflow lucky) before writing it, as room-service does")
	return cmd
}

func printOracle(cmd *cobra.Command, o *loadgen.Oracle) {
	fmt.Fprintf(cmd.OutOrStdout(), "expected: %d events, %d IM messages, %d closed mic sessions (%d open), %d users, %d user-days, %d lucky gifts (%d to DLQ), %d pool rows\n",
		o.Events, o.IMMessages, o.ClosedSessions, len(o.OpenSessions), len(o.Lifetime), len(o.Daily), o.LuckyGifts, o.Rejected, len(o.Pools))
}

func init() { extraCommands = append(extraCommands, loadgenCmd) }
