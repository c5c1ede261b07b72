// Package simulate is `roomflow lucky rules simulate`: it draws a rule's
// table many times against a traffic model, with the draw service's own
// planning and filtering (luckydraw.Caps.Windows, AppendRiskLimits,
// Plan.Reset, Plan.Draw: what the draw transaction calls), the pools, risk
// counters and windows held in memory, and measures what the table pays
// under the caps and floors (docs/simulator.md). Pure: no MySQL, no
// clock; one seed gives one run.
package simulate

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"

	"github.com/hyapp/roomflow/domain/lucky"
	"github.com/hyapp/roomflow/services/luckydraw"
)

// Pool is a starting pool: balance and reserve_floor.
type Pool struct{ Balance, ReserveFloor int64 }

// Config is one simulation.
type Config struct {
	// Rules are the rule versions, one per gift (the files `rules
	// publish` takes).
	Rules []*lucky.Rule
	// Platform, Gifts (by gift id; absent: Gift) and Rooms (room-0, the
	// hottest, first; absent: Room) are the starting pools.
	Platform, Gift, Room Pool
	Gifts                map[string]Pool
	Rooms                []Pool
	// Caps, LargeTierMinReward and LargeTierEnabled are lucky.*'s as the
	// draw service reads them.
	Caps               luckydraw.Caps
	LargeTierMinReward int64
	LargeTierEnabled   bool
	Traffic            Traffic
	// StartMs is the first draw's time (UTC ms): the risk windows are the
	// UTC days and hours it falls in. 0: 1970-01-01, a midnight.
	StartMs int64
	Seed    uint64
	// Buckets is how many points the time series have; default 48.
	Buckets int
	// Random, tests only: the draws' random values (as luckydraw's
	// Config.Random); nil: from Seed.
	Random func() (int64, error)
	// Trace, tests only: called with each draw, to replay it against the
	// live service.
	Trace func(Trace)
}

// Trace is one simulated draw: its request as the draw service would get
// it, the random value, the filtered candidate table and the outcome.
type Trace struct {
	NowMs              int64
	RoomID, DeviceID   string
	SenderID, TargetID int64
	GiftID             string
	GiftCount          int32
	CoinSpent          int64
	Random             int64
	Candidates         []luckydraw.Candidate
	TierID             string
	RewardCoins        int64
}

// Check reports the first thing wrong with c, naming the field a command
// line maps to its flag: rules (each must pass luckydraw.CheckRule), the
// traffic (rooms, users, skews, draws/rate/hours) and the gift mix.
func (c *Config) Check() error {
	if len(c.Rules) == 0 {
		return &FieldError{Field: "rules", Msg: "no rule"}
	}
	seen := map[string]bool{}
	for _, r := range c.Rules {
		if err := luckydraw.CheckRule(r); err != nil {
			return &FieldError{Field: "rules", Msg: err.Error()}
		}
		if r.GiftPrice <= 0 {
			return &FieldError{Field: "rules", Msg: fmt.Sprintf("%s/%s: gift_price must be > 0 to simulate (spend = gift_price × gift_count; got %d)",
				r.GiftID, r.RuleVersion, r.GiftPrice)}
		}
		if seen[r.GiftID] {
			return &FieldError{Field: "rules", Msg: "two rules for gift " + r.GiftID}
		}
		seen[r.GiftID] = true
	}
	t := c.Traffic
	switch {
	case t.Rooms <= 0:
		return &FieldError{Field: "rooms", Msg: fmt.Sprintf("must be > 0 (got %d)", t.Rooms)}
	case t.Users <= 0:
		return &FieldError{Field: "users", Msg: fmt.Sprintf("must be > 0 (got %d)", t.Users)}
	case !(t.RoomSkew >= 0) || math.IsInf(t.RoomSkew, 0):
		return &FieldError{Field: "room_skew", Msg: fmt.Sprintf("must be >= 0 (got %v)", t.RoomSkew)}
	case !(t.UserSkew >= 0) || math.IsInf(t.UserSkew, 0):
		return &FieldError{Field: "user_skew", Msg: fmt.Sprintf("must be >= 0 (got %v)", t.UserSkew)}
	case !(t.Hours > 0) || math.IsInf(t.Hours, 0):
		return &FieldError{Field: "hours", Msg: fmt.Sprintf("must be > 0 (got %v)", t.Hours)}
	case (t.Draws != 0) == (t.Rate != 0):
		return &FieldError{Field: "draws", Msg: "give exactly one of draws and rate"}
	case t.Draws < 0:
		return &FieldError{Field: "draws", Msg: fmt.Sprintf("must be > 0 (got %d)", t.Draws)}
	case t.Rate != 0 && (!(t.Rate > 0) || math.IsInf(t.Rate, 0)):
		return &FieldError{Field: "rate", Msg: fmt.Sprintf("must be > 0 (got %v)", t.Rate)}
	case t.Rate != 0 && t.Rate*t.Hours*3600 < 1:
		return &FieldError{Field: "rate", Msg: fmt.Sprintf("%v a second for %vh is not one draw", t.Rate, t.Hours)}
	case len(t.GiftMix) == 0:
		return &FieldError{Field: "gift_mix", Msg: "empty"}
	}
	for _, g := range t.GiftMix {
		if !seen[g.GiftID] {
			return &FieldError{Field: "gift_mix", Msg: fmt.Sprintf("unknown gift %q (no rule file has it)", g.GiftID)}
		}
		if g.GiftCount <= 0 || !(g.Weight > 0) {
			return &FieldError{Field: "gift_mix", Msg: fmt.Sprintf("gift %q: count and weight must be > 0", g.GiftID)}
		}
	}
	return nil
}

// FieldError is an invalid Config field.
type FieldError struct{ Field, Msg string }

func (e *FieldError) Error() string { return e.Field + ": " + e.Msg }

// draws is the run's number of draws.
func (t Traffic) draws() int64 {
	if t.Draws > 0 {
		return t.Draws
	}
	return int64(t.Rate * t.Hours * 3600)
}

// poolState is one simulated lucky_pools row and what the run saw of it.
type poolState struct {
	luckydraw.PoolState
	start, low, peak, drawdown int64
	floorAtMs                  int64 // first draw a floor of it removed a tier; -1: none
}

func newPool(scope, id string, p Pool) poolState {
	return poolState{PoolState: luckydraw.PoolState{ScopeType: scope, ScopeID: id, Balance: p.Balance, ReserveFloor: p.ReserveFloor},
		start: p.Balance, low: p.Balance, peak: p.Balance, floorAtMs: -1}
}

func (p *poolState) add(delta int64) {
	p.Balance += delta
	p.peak = max(p.peak, p.Balance)
	p.low = min(p.low, p.Balance)
	p.drawdown = max(p.drawdown, p.peak-p.Balance)
}

// slot is a risk window's running total in memory: its start and what
// it has paid.
type slot struct {
	start, payout int64
	draws         int64
}

// engine is a run in the making.
type engine struct {
	cfg      Config
	traffic  *rand.Rand
	draw     *rand.Rand
	rooms    alias
	users    alias
	mix      alias
	giftOf   []int // GiftMix entry -> rule index
	userIDs  []string
	roomIDs  []string
	anchors  []string // the one anchor (target user) of each room
	platform poolState
	gifts    []poolState
	roomPool []poolState
	userDay  []slot // user per UTC day
	device   []slot // a user's one device per UTC day
	roomHour []slot
	anchor   []slot // a room's anchor (one per room) per UTC day
	activity slot
	ws       []luckydraw.Window
	risks    []luckydraw.RiskLimit
	plan     luckydraw.Plan
	st       stats
}

func newEngine(c Config) *engine {
	e := &engine{cfg: c, traffic: rand.New(rand.NewPCG(c.Seed, 1)), draw: rand.New(rand.NewPCG(c.Seed, 2)),
		rooms: newAlias(zipfWeights(c.Traffic.Rooms, c.Traffic.RoomSkew)), users: newAlias(zipfWeights(c.Traffic.Users, c.Traffic.UserSkew)),
		platform: newPool("platform", "global", c.Platform)}
	var w []float64
	for _, g := range c.Traffic.GiftMix {
		w = append(w, g.Weight)
		for i, r := range c.Rules {
			if r.GiftID == g.GiftID {
				e.giftOf = append(e.giftOf, i)
			}
		}
	}
	e.mix = newAlias(w)
	for _, r := range c.Rules {
		p, ok := c.Gifts[r.GiftID]
		if !ok {
			p = c.Gift
		}
		e.gifts = append(e.gifts, newPool("gift", r.GiftID, p))
	}
	for i := range c.Traffic.Rooms {
		id := "room-" + strconv.Itoa(i)
		p := c.Room
		if i < len(c.Rooms) {
			p = c.Rooms[i]
		}
		e.roomIDs = append(e.roomIDs, id)
		e.anchors = append(e.anchors, strconv.Itoa(c.Traffic.Users+1+i))
		e.roomPool = append(e.roomPool, newPool("room", id, p))
	}
	for i := range c.Traffic.Users {
		e.userIDs = append(e.userIDs, strconv.Itoa(i+1))
	}
	e.userDay, e.device = make([]slot, c.Traffic.Users), make([]slot, c.Traffic.Users)
	e.roomHour, e.anchor = make([]slot, c.Traffic.Rooms), make([]slot, c.Traffic.Rooms)
	for _, s := range [][]slot{e.userDay, e.device, e.roomHour, e.anchor} {
		for i := range s {
			s[i].start = -1
		}
	}
	e.activity.start = -1
	e.st = newStats(c)
	return e
}

// Run simulates c. It fails when c does not Check, or with the draw
// service's own errors (a table that does not select).
func Run(c Config) (*Result, error) {
	if err := c.Check(); err != nil {
		return nil, err
	}
	if c.Buckets <= 0 {
		c.Buckets = 48
	}
	e := newEngine(c)
	n := c.Traffic.draws()
	spanMs := int64(c.Traffic.Hours * float64(hourMs))
	for i := range n {
		if err := e.step(i, c.StartMs+int64(float64(i)*float64(spanMs)/float64(n))); err != nil {
			return nil, fmt.Errorf("simulate: draw %d: %w", i, err)
		}
	}
	return e.result(n, spanMs), nil
}

const hourMs = int64(3_600_000)

// errRandom is a Random hook that gave a value outside [0, 1e6).
var errRandom = errors.New("simulate: random value outside [0, 1000000)")

func (e *engine) random() (int64, error) {
	if e.cfg.Random == nil {
		return e.draw.Int64N(lucky.PPM), nil
	}
	v, err := e.cfg.Random()
	if err == nil && (v < 0 || v >= lucky.PPM) {
		err = errRandom
	}
	return v, err
}
