package command

import (
	"database/sql"
	"time"

	"github.com/spf13/cobra"

	"github.com/hyapp/roomflow/internal/config"
	"github.com/hyapp/roomflow/tools/luckyctl"
)

// luckyStatsCmd prints one room's hourly lucky facts, the same rows as
// GET /api/v1/lucky/rooms/{room_id}/hourly on api.addr.
func luckyStatsCmd(g *globals) *cobra.Command {
	var (
		room  string
		since time.Duration
	)
	cmd := newCmd("stats --room ROOM_ID", "Print a room's hourly lucky draws, payout and rejections (lucky_room_stats_hourly)", help("lucky-stats"), cobra.NoArgs,
		func(cmd *cobra.Command, _ []string) error {
			if err := luckyctl.CheckStats(room, since); err != nil {
				return err
			}
			return withDB(cmd, g, func(cfg *config.Config, db *sql.DB) error {
				return luckyctl.Stats(cmd.Context(), db, cfg.AppCode, room, since, time.Now(), cmd.OutOrStdout())
			})
		})
	cmd.Flags().StringVar(&room, "room", "", "the room id (required)")
	cmd.Flags().DurationVar(&since, "since", 24*time.Hour, "print the hours of this last span")
	return cmd
}
