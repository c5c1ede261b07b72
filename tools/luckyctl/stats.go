package luckyctl

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"math"
	"math/bits"
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
	sum.PayoutPPM = payoutPPM(sum.CoinsOut, sum.CoinsIn)
	fmt.Fprintf(tw, "total, %d hours\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t\n", len(hours), sum.Draws, sum.Hits, sum.CoinsIn, sum.CoinsOut, sum.PayoutPPM, sum.Rejections, sum.RejectedCoins)
	return tw.Flush()
}

// payoutPPM is out × 10^6 / in, exact in 128 bits and clamped to int64's
// top as lucky_room_stats_hourly.payout_ppm is (migration 0016): a room
// paying 9.2·10^12 coins overflows the product in int64. 0 when in is 0.
func payoutPPM(out, in int64) int64 {
	if in <= 0 || out <= 0 {
		return 0
	}
	hi, lo := bits.Mul64(uint64(out), 1_000_000)
	if hi >= uint64(in) {
		return math.MaxInt64
	}
	q, _ := bits.Div64(hi, lo, uint64(in))
	return int64(min(q, math.MaxInt64))
}
