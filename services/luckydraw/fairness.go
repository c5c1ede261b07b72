package luckydraw

import (
	"context"
	"database/sql"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/hyapp/roomflow/domain/fairness"
	"github.com/hyapp/roomflow/internal/promreg"
)

// RejectFairnessNotCommitted: the draw's day is in commit-reveal mode (or
// would be) and has no committed seed this service can read; nothing is
// drawn (Execute records the rejection).
const RejectFairnessNotCommitted = "fairness_not_committed"

// fairDay is a (app_code, day)'s randomness as draws use it: the stored
// mode and, in commit-reveal mode, the decrypted seed. A stored day never
// changes, so it is cached for the day; a day without a row is re-read
// after unstoredTTL.
type fairDay struct {
	startMs  int64
	mode     string
	seed     []byte // commit_reveal only; never logged
	stored   bool
	readAtMs int64
}

// notCommitted: the day draws in commit-reveal mode but has no seed.
func (d *fairDay) notCommitted() bool { return d.mode == fairness.ModeCommitReveal && d.seed == nil }

// unstoredTTL is how long a day with no stored row keeps its fallback mode.
const unstoredTTL = time.Second

// fairDays caches the days draws are in, per app.
type fairDays struct {
	s        *Service
	listed   map[string]bool
	unlisted *prometheus.CounterVec
	nextDay  *prometheus.GaugeVec
	mu       sync.Mutex
	days     map[string]*fairDay // by app_code: the day last read
	warned   map[string]bool     // app_code NUL day: contradiction logged
}

func newFairDays(s *Service) *fairDays {
	f := &fairDays{s: s, listed: map[string]bool{}, days: map[string]*fairDay{}, warned: map[string]bool{}, nextDay: fairnessGauge(s.cfg.Registerer),
		unlisted: promreg.Register(s.cfg.Registerer, prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "roomflow_lucky_fairness_unlisted_draws_total",
			Help: "Draws of an app_code outside lucky.fairness.app_codes: in its stored day's mode, crypto when the day has none."}, []string{"app_code"}))}
	for _, a := range s.cfg.FairnessAppCodes {
		f.listed[a] = true
	}
	return f
}

// dayOf returns app's fairness day at atMs: the stored day whatever this replica lists (another may have made it, or
// this one before the app left its list), else what this replica's writer would store: for a listed app the
// schedule's mode or lucky.randomness (commit-reveal then has no seed), for another crypto.
func (f *fairDays) dayOf(ctx context.Context, q querier, app string, atMs int64) (*fairDay, error) {
	start := fairness.DayStartMs(atMs, f.s.cfg.FairnessDayLength)
	f.mu.Lock()
	d := f.days[app]
	f.mu.Unlock()
	if d != nil && d.startMs == start && (d.stored || atMs-d.readAtMs < unstoredTTL.Milliseconds()) {
		return d, nil
	}
	d, err := f.read(ctx, q, app, start, atMs)
	if err != nil {
		return nil, err
	}
	f.mu.Lock()
	f.days[app] = d
	f.mu.Unlock()
	return d, nil
}

// forget drops app's cached day.
func (f *fairDays) forget(app string) {
	f.mu.Lock()
	delete(f.days, app)
	f.mu.Unlock()
}

// read reads app's day starting at start: its stored row, else (listed
// apps only) the schedule's mode for it, in one statement.
func (f *fairDays) read(ctx context.Context, q querier, app string, start, atMs int64) (*fairDay, error) {
	listed := f.listed[app]
	rows, err := q.QueryContext(ctx, `(SELECT 'day' AS part, mode, seed_sealed FROM lucky_fairness_days WHERE app_code = ? AND day_start_ms = ?)
	UNION ALL (SELECT 'schedule', mode, '' FROM lucky_fairness_schedule WHERE app_code = ? AND from_day_ms <= ? ORDER BY from_day_ms DESC LIMIT 1)`,
		app, start, app, start)
	if err != nil {
		return nil, err
	}
	d := &fairDay{startMs: start, mode: fairness.ModeCrypto, readAtMs: atMs}
	if listed {
		d.mode = f.s.cfg.Randomness
	}
	var sealed []byte
	err = eachRow(rows, func(rs *sql.Rows) error {
		var part, mode string
		var b []byte
		if err := rs.Scan(&part, &mode, &b); err != nil {
			return err
		}
		if part == "day" {
			d.stored, d.mode, sealed = true, mode, b
		} else if !d.stored && listed {
			d.mode = mode
		}
		return nil
	})
	if err != nil || !d.stored || d.mode != fairness.ModeCommitReveal {
		return d, err
	}
	if f.s.cfg.FairnessKeys == nil {
		f.s.log.Error("a commit-reveal day's seed cannot be read without lucky.fairness.key: its draws are rejected",
			"app_code", app, "day", fairness.DayLabel(start, f.s.cfg.FairnessDayLength))
		d.stored = false // re-read once a key is configured (restart)
		return d, nil
	}
	seed, err := f.s.cfg.FairnessKeys.Open(sealed, fairness.AAD(app, start))
	if err != nil {
		f.s.log.Error("a commit-reveal day's seed does not decrypt: its draws are rejected", "app_code", app,
			"day", fairness.DayLabel(start, f.s.cfg.FairnessDayLength), "error", err)
		d.stored = false
		return d, nil
	}
	d.seed = seed
	return d, nil
}

// The nonce counter of a (app_code, sender, fairness day) is a
// lucky_risk_counters row (scope nonce, window fairness_day, no cap):
// locked with the batch's capped counters in the statement that locks
// them and counted in the upsert that writes them, so a commit-reveal
// draw costs no statement of its own.
const (
	nonceScope  = "nonce"
	nonceWindow = "fairness_day"
)

// random is the random value of r's draw in the batch's day: from the
// day's seed and r's nonce in commit-reveal mode (r.nonce set here: the
// sender's draws of the day so far, this batch's earlier ones included,
// plus one), else crypto/rand.
func (b *batchTx) random(r *drawReq) (int64, error) {
	if b.day.mode != fairness.ModeCommitReveal {
		return randomPPM()
	}
	ctr := b.ctrs[counterKey(b.app, nonceScope, strconv.FormatInt(r.sender, 10), nonceWindow, b.day.startMs)]
	if ctr == nil {
		return 0, fmt.Errorf("luckydraw: nonce counter of user %d not locked", r.sender)
	}
	r.nonce = ctr.draws + 1
	return fairness.RandomPPM(b.day.seed, fairness.Input{AppCode: r.app, ClientSeed: r.clientSeed,
		SenderUserID: r.sender, Nonce: r.nonce}), nil
}
