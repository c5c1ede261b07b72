package command

import (
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/hyapp/roomflow/internal/cfgerr"
	"github.com/hyapp/roomflow/services/statsapi"
)

// luckyStatsCmd prints one room's hourly lucky facts, the same rows as
// GET /api/v1/lucky/rooms/{room_id}/hourly on api.addr.
func luckyStatsCmd(g *globals) *cobra.Command {
	var (
		room  string
		since time.Duration
	)
	cmd := &cobra.Command{
		Use:   "stats --room ROOM_ID",
		Short: "Print a room's hourly lucky draws, payout and rejections (lucky_room_stats_hourly)",
		Long:  help("lucky-stats"),
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if why := statsapi.ValidRoomID(room); why != "" {
				return cfgerr.Usage(fmt.Errorf("--room: %s", why))
			}
			if since <= 0 {
				return cfgerr.Usage(fmt.Errorf("--since must be a positive duration (got %s)", since))
			}
			cfg, db, err := adminDB(cmd, g)
			if err != nil {
				return err
			}
			defer db.Close()
			from := time.Now().Add(-since).UnixMilli()
			from -= from % int64(time.Hour/time.Millisecond)
			hours, err := statsapi.NewStore(db).LuckyRoomHours(cmd.Context(), cfg.AppCode, room, from, statsapi.MaxLuckyRoomHours)
			if err != nil {
				return fmt.Errorf("lucky stats: %w", err)
			}
			w := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', tabwriter.AlignRight)
			fmt.Fprintln(w, "hour (UTC)\tdraws\thits\tcoins in\tcoins out\tpayout ppm\trejections\trejected coins\t")
			var sum statsapi.LuckyRoomHour
			for _, h := range hours {
				fmt.Fprintf(w, "%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t\n", time.UnixMilli(h.HourStartMs).UTC().Format("2006-01-02 15:04"),
					h.Draws, h.Hits, h.CoinsIn, h.CoinsOut, h.PayoutPPM, h.Rejections, h.RejectedCoins)
				sum.Draws, sum.Hits, sum.CoinsIn, sum.CoinsOut = sum.Draws+h.Draws, sum.Hits+h.Hits, sum.CoinsIn+h.CoinsIn, sum.CoinsOut+h.CoinsOut
				sum.Rejections, sum.RejectedCoins = sum.Rejections+h.Rejections, sum.RejectedCoins+h.RejectedCoins
			}
			if sum.CoinsIn > 0 {
				sum.PayoutPPM = sum.CoinsOut * 1_000_000 / sum.CoinsIn
			}
			fmt.Fprintf(w, "total, %d hours\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t\n", len(hours), sum.Draws, sum.Hits, sum.CoinsIn, sum.CoinsOut, sum.PayoutPPM, sum.Rejections, sum.RejectedCoins)
			return w.Flush()
		},
	}
	cmd.Flags().StringVar(&room, "room", "", "the room id (required)")
	cmd.Flags().DurationVar(&since, "since", 24*time.Hour, "print the hours of this last span")
	return cmd
}
