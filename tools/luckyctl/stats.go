package luckyctl

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/hyapp/roomflow/internal/cfgerr"
	"github.com/hyapp/roomflow/services/statsapi"
)

// CheckStats refuses the room and span `lucky stats` cannot print.
func CheckStats(room string, since time.Duration) error {
	if why := statsapi.ValidRoomID(room); why != "" {
		return cfgerr.Usage(fmt.Errorf("--room: %s", why))
	}
	return CheckSince(since)
}

// Stats prints the room's hours of lucky_room_stats_hourly from the start
// of the hour since before now, oldest first (at most
// statsapi.MaxLuckyRoomHours), as a right-aligned table with a total row.
func Stats(ctx context.Context, db *sql.DB, app, room string, since time.Duration, now time.Time, w io.Writer) error {
	from := now.Add(-since).UnixMilli()
	from -= from % int64(time.Hour/time.Millisecond)
	hours, err := statsapi.NewStore(db).LuckyRoomHours(ctx, app, room, from, statsapi.MaxLuckyRoomHours)
	if err != nil {
		return fmt.Errorf("lucky stats: %w", err)
	}
	return PrintRoomHours(w, hours)
}

// PrintRoomHours prints hours as stats' table: one row an hour and their
// total, payout ppm of the total recomputed from its coins.
func PrintRoomHours(w io.Writer, hours []statsapi.LuckyRoomHour) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "hour (UTC)\tdraws\thits\tcoins in\tcoins out\tpayout ppm\trejections\trejected coins\t")
	var sum statsapi.LuckyRoomHour
	for _, h := range hours {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t\n", time.UnixMilli(h.HourStartMs).UTC().Format("2006-01-02 15:04"),
			h.Draws, h.Hits, h.CoinsIn, h.CoinsOut, h.PayoutPPM, h.Rejections, h.RejectedCoins)
		sum.Draws, sum.Hits, sum.CoinsIn, sum.CoinsOut = sum.Draws+h.Draws, sum.Hits+h.Hits, sum.CoinsIn+h.CoinsIn, sum.CoinsOut+h.CoinsOut
		sum.Rejections, sum.RejectedCoins = sum.Rejections+h.Rejections, sum.RejectedCoins+h.RejectedCoins
	}
	if sum.CoinsIn > 0 {
		sum.PayoutPPM = sum.CoinsOut * 1_000_000 / sum.CoinsIn
	}
	fmt.Fprintf(tw, "total, %d hours\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t\n", len(hours), sum.Draws, sum.Hits, sum.CoinsIn, sum.CoinsOut, sum.PayoutPPM, sum.Rejections, sum.RejectedCoins)
	return tw.Flush()
}
