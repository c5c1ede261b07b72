package chaos

import (
	"context"
	"database/sql"
	"encoding/base64"
	"fmt"
	"testing"
	"time"

	"github.com/hyapp/roomflow/domain/fairness"
	"github.com/hyapp/roomflow/internal/config"
	"github.com/hyapp/roomflow/services/luckydraw"
)

// The draw service replicas draw in commit-reveal mode on one-minute
// fairness days revealed 5 s after their end, so several days are
// committed, drawn, revealed and recomputed within a run: the nonce
// counter, the seed cache and the writer meet the kills, zombies and
// killed MySQL connections like every other draw.
const (
	chaosFairnessDay   = time.Minute
	chaosFairnessGrace = 5 * time.Second
)

// chaosFairnessKey is the run's seed key (32 bytes, base64).
var chaosFairnessKey = base64.StdEncoding.EncodeToString([]byte("chaos-fairness-key-not-for-prod!"))

// withCommitReveal sets lc's draws to commit-reveal days (chaosFairnessDay).
func withCommitReveal(lc *config.Config) {
	lc.Lucky.Randomness = fairness.ModeCommitReveal
	lc.Lucky.Fairness.Key = chaosFairnessKey
	lc.Lucky.Fairness.DayLength = config.Duration(chaosFairnessDay)
	lc.Lucky.Fairness.RevealGrace = config.Duration(chaosFairnessGrace)
}

// fairnessFigures are the commit-reveal days the run's verdict recomputed.
type fairnessFigures struct {
	days, revealed, draws int
}

// fairnessDifferences recomputes every revealed commit-reveal day of app
// with `roomflow lucky fairness verify`'s code (each draw's random value
// and tier from the revealed seed, the nonces without gaps per user). A
// day still unrevealed at the verdict is counted, not checked.
func fairnessDifferences(t *testing.T, db *sql.DB, app string) (fairnessFigures, []string) {
	t.Helper()
	ctx := context.Background()
	rows, err := db.QueryContext(ctx, `SELECT day_start_ms, revealed_seed IS NOT NULL FROM lucky_fairness_days
	WHERE app_code = ? AND mode = ? ORDER BY day_start_ms`, app, fairness.ModeCommitReveal)
	if err != nil {
		t.Fatal(err)
	}
	type day struct {
		start    int64
		revealed bool
	}
	var days []day
	for rows.Next() {
		var d day
		if err := rows.Scan(&d.start, &d.revealed); err != nil {
			t.Fatal(err)
		}
		days = append(days, d)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	rows.Close()
	var f fairnessFigures
	var diffs []string
	for _, d := range days {
		f.days++
		if !d.revealed {
			continue
		}
		v, err := luckydraw.VerifyFairnessDay(ctx, db, app, d.start)
		if err != nil {
			diffs = append(diffs, fmt.Sprintf("fairness day %d: %v", d.start, err))
			continue
		}
		f.revealed++
		f.draws += v.Draws
		for _, x := range v.Differences {
			diffs = append(diffs, "fairness day "+v.Day+": "+x)
		}
	}
	if f.revealed == 0 {
		diffs = append(diffs, fmt.Sprintf("no commit-reveal day revealed among %d", f.days))
	}
	return f, diffs
}
