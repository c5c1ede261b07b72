package chaos

import (
	"cmp"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	mrand "math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/hyapp/roomflow/services/luckydraw"
)

// chaosOperator is the operator of the chaos run (issue 31): while draws
// run it switches the lucky gift off and on through luckydraw.Admin, as
// `roomflow lucky` does, and records evidence that each change acted when
// it returned (the lucky_fence) without reading any clock:
//
//   - an off episode (global switch off, a room paused, the gift's rule
//     version paused) counts the draws it must stop (non-rejected
//     lucky_draw_records rows of the app, the room, the version) right
//     after the off call returns and right before the on call: the two
//     counts must be equal;
//   - a tier episode (a non-none tier disabled) reads the set of the
//     version's draws right after the disable returns and right before the
//     enable: every draw in the second set and not the first committed in
//     between, and its candidate_tiers_json must mark the tier
//     tier_disabled.
//
// Two loops run at once (off episodes, tier episodes: a tier may be
// toggled while the version is paused), each with its own RNG seeded from
// the run's seed, so a seed replays the operator's choices and the fault
// schedule (h.rng) is the one it was before the operator existed. The
// admin talks to MySQL as the test's user, whose connections no fault
// kills: a change that fails (the fence held past its wait) is retried
// until it returns, since the evidence is about the moment it returns.
type chaosOperator struct {
	h     *chaosHarness
	db    *sql.DB
	adm   *luckydraw.Admin
	app   string
	gift  string
	ver   string
	rooms []luckyAt // the lucky gifts' rooms by occurred_at, the candidates of a room pause
	tiers []string  // the version's non-none tiers

	mu        sync.Mutex
	episodes  map[string]int // completed episodes by kind
	retries   int            // admin calls repeated after an error
	anomalies []string
}

// luckyAt is a lucky gift's room and occurred_at.
type luckyAt struct {
	atMs int64
	room string
}

// pauseRoom picks the room of the next lucky gift due at least 500 ms
// from now (its draw comes while the room is paused, most of the time:
// the clock only aims the pause, the evidence reads none), or a random one
// once the traffic is over.
func (o *chaosOperator) pauseRoom(r *mrand.Rand) string {
	from := time.Now().Add(500 * time.Millisecond).UnixMilli()
	if i, _ := slices.BinarySearchFunc(o.rooms, from, func(g luckyAt, ms int64) int { return cmp.Compare(g.atMs, ms) }); i < len(o.rooms) {
		return o.rooms[i].room
	}
	return o.rooms[r.IntN(len(o.rooms))].room
}

// The operator's episode kinds.
const (
	opGlobalOff = "global switch off"
	opRoomPause = "room paused"
	opRulePause = "rule version paused"
	opTierOff   = "tier disabled"
)

func (o *chaosOperator) anomaly(format string, args ...any) {
	o.mu.Lock()
	o.anomalies = append(o.anomalies, fmt.Sprintf(format, args...))
	o.mu.Unlock()
}

// run runs both loops until until (no episode starts after it; one under
// way finishes, so everything is switched back on when run returns).
func (o *chaosOperator) run(seed uint64, until time.Time) {
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		r := mrand.New(mrand.NewPCG(seed^0x0be7a70e, seed))
		kinds := []string{opGlobalOff, opRoomPause, opRulePause}
		for o.wait(r, until) {
			o.offEpisode(r, kinds[r.IntN(len(kinds))])
		}
	}()
	go func() {
		defer wg.Done()
		r := mrand.New(mrand.NewPCG(seed^0x7131e5, seed))
		for o.wait(r, until) {
			o.tierEpisode(r, o.tiers[r.IntN(len(o.tiers))])
		}
	}()
	wg.Wait()
}

// wait sleeps 2-6 s between episodes; false when the next would start
// after until.
func (o *chaosOperator) wait(r *mrand.Rand, until time.Time) bool {
	gap := 2*time.Second + time.Duration(r.Int64N(int64(4*time.Second)))
	if time.Now().Add(gap).After(until) {
		return false
	}
	time.Sleep(gap)
	return true
}

// hold is how long a switch stays off: 1-4 s, long enough for draws to
// arrive meanwhile (about 4 lucky gifts a second).
func hold(r *mrand.Rand) time.Duration {
	return time.Second + time.Duration(r.Int64N(int64(3*time.Second)))
}

// call repeats an admin change until it returns without error.
func (o *chaosOperator) call(what string, fn func(ctx context.Context) (luckydraw.Change, error)) {
	for n := 0; ; n++ {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		_, err := fn(ctx)
		cancel()
		if err == nil {
			return
		}
		if n == 20 {
			o.anomaly("%s: still failing after %d attempts: %v", what, n+1, err)
			return
		}
		o.mu.Lock()
		o.retries++
		o.mu.Unlock()
		o.h.logf("operator: %s: %v (retried)", what, err)
		time.Sleep(500 * time.Millisecond)
	}
}

// count reads the non-rejected draws of query's scope.
func (o *chaosOperator) count(query string, args ...any) int {
	var n int
	if err := o.db.QueryRow(query, args...).Scan(&n); err != nil {
		o.anomaly("operator count: %v", err)
		return -1
	}
	return n
}

func (o *chaosOperator) offEpisode(r *mrand.Rand, kind string) {
	// the global switch's value when off; room_scope_paused's when paused
	globalOff, roomPaused := false, true
	var target, query string
	var args []any
	var set func(ctx context.Context, disable bool) (luckydraw.Change, error)
	switch kind {
	case opGlobalOff:
		target = o.app
		query, args = `SELECT COUNT(*) FROM lucky_draw_records WHERE app_code = ? AND reward_status <> 'rejected'`, []any{o.app}
		set = func(ctx context.Context, disable bool) (luckydraw.Change, error) {
			if disable {
				return o.adm.SetSwitch(ctx, o.app, luckydraw.SwitchGlobal, "", &globalOff)
			}
			return o.adm.SetSwitch(ctx, o.app, luckydraw.SwitchGlobal, "", nil) // back to the configuration (on)
		}
	case opRoomPause:
		room := o.pauseRoom(r)
		target = room
		query, args = `SELECT COUNT(*) FROM lucky_draw_records WHERE app_code = ? AND room_id = ? AND reward_status <> 'rejected'`, []any{o.app, room}
		set = func(ctx context.Context, disable bool) (luckydraw.Change, error) {
			if disable {
				return o.adm.SetSwitch(ctx, o.app, luckydraw.SwitchRoomScopePaused, room, &roomPaused)
			}
			return o.adm.SetSwitch(ctx, o.app, luckydraw.SwitchRoomScopePaused, room, nil)
		}
	case opRulePause:
		target = o.gift + "/" + o.ver
		query, args = `SELECT COUNT(*) FROM lucky_draw_records WHERE gift_id = ? AND rule_version = ? AND reward_status <> 'rejected'`, []any{o.gift, o.ver}
		set = func(ctx context.Context, disable bool) (luckydraw.Change, error) {
			st := "active"
			if disable {
				st = "paused"
			}
			return o.adm.SetRuleStatus(ctx, o.gift, o.ver, st)
		}
	}
	o.call(kind+" "+target, func(ctx context.Context) (luckydraw.Change, error) { return set(ctx, true) })
	after := o.count(query, args...)
	time.Sleep(hold(r))
	before := o.count(query, args...)
	o.call(kind+" "+target+" undone", func(ctx context.Context) (luckydraw.Change, error) { return set(ctx, false) })
	if after != before {
		o.anomaly("%s %s: %d draws right after the change returned, %d right before it was undone", kind, target, after, before)
	}
	o.h.logf("operator: %s %s: draws %d -> %d while off", kind, target, after, before)
	o.mu.Lock()
	o.episodes[kind]++
	o.mu.Unlock()
}

func (o *chaosOperator) tierEpisode(r *mrand.Rand, tier string) {
	set := func(enabled bool) func(ctx context.Context) (luckydraw.Change, error) {
		return func(ctx context.Context) (luckydraw.Change, error) {
			return o.adm.SetTierEnabled(ctx, o.gift, o.ver, tier, enabled)
		}
	}
	target := o.gift + "/" + o.ver + "/" + tier
	o.call(opTierOff+" "+target, set(false))
	after := o.drawIDs()
	time.Sleep(hold(r))
	before := o.drawIDs()
	o.call(opTierOff+" "+target+" undone", set(true))
	var between []string
	for id := range before {
		if !after[id] {
			between = append(between, id)
		}
	}
	for _, id := range between {
		var raw []byte
		if err := o.db.QueryRow(`SELECT candidate_tiers_json FROM lucky_draw_records WHERE draw_id = ?`, id).Scan(&raw); err != nil {
			o.anomaly("operator: candidates of %s: %v", id, err)
			continue
		}
		var cands []luckydraw.Candidate
		if err := json.Unmarshal(raw, &cands); err != nil {
			o.anomaly("operator: candidates of %s: %v", id, err)
			continue
		}
		found := false
		for _, c := range cands {
			if c.TierID == tier {
				found = true
				if c.Disabled != luckydraw.DisabledTier {
					o.anomaly("%s %s: draw %s committed while it was off has it %q in candidate_tiers_json, want %s",
						opTierOff, target, id, c.Disabled, luckydraw.DisabledTier)
				}
			}
		}
		if !found {
			o.anomaly("%s %s: draw %s committed while it was off lists no such candidate", opTierOff, target, id)
		}
	}
	o.h.logf("operator: %s %s: %d draws committed while off", opTierOff, target, len(between))
	o.mu.Lock()
	o.episodes[opTierOff]++
	o.episodes["draws checked while a tier was off"] += len(between)
	o.mu.Unlock()
}

// drawIDs reads the version's committed non-rejected draws.
func (o *chaosOperator) drawIDs() map[string]bool {
	ids := map[string]bool{}
	rows, err := o.db.Query(`SELECT draw_id FROM lucky_draw_records WHERE gift_id = ? AND rule_version = ? AND reward_status <> 'rejected'`, o.gift, o.ver)
	if err != nil {
		o.anomaly("operator: read draws: %v", err)
		return ids
	}
	defer rows.Close()
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			o.anomaly("operator: read draws: %v", err)
			return ids
		}
		ids[id] = true
	}
	if err := rows.Err(); err != nil {
		o.anomaly("operator: read draws: %v", err)
	}
	return ids
}
