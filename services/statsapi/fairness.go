package statsapi

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"net/http"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/hyapp/roomflow/schemas/activityv1"
)

// The public side of provably fair lucky draws (docs/fairness.md),
// read-only over lucky_fairness_days and lucky_draw_records; the API never
// holds the seeds' key, it reads the seeds `roomflow lucky` revealed.
//
// Internal (api.addr) and app (api.app_addr) listeners, the app taking
// app_code from the gateway's header (or ?app_code) and no user:
//
//	GET /api/v1/lucky/fairness/{day}/commitment
//	GET /api/v1/lucky/fairness/{day}/seed
//
// App listener only, the gateway's user:
//
//	GET /api/v1/users/me/lucky-draws/{draw_id}
//
// A day is YYYY-MM-DD (the RFC 3339 start of a short day). An unknown day
// is 404 for its commitment; its seed answers exactly as a day not
// revealed yet (409 seed_not_revealed): a caller learns nothing about
// whether a seed exists before its reveal. Another user's draw is 404.

// FairnessDay is a stored fairness day as the API shows it.
type FairnessDay struct {
	AppCode       string `json:"app_code"`
	Day           string `json:"day"`
	DayStartMs    int64  `json:"day_start_ms"`
	DayEndMs      int64  `json:"day_end_ms"`
	Mode          string `json:"mode"`
	Commitment    string `json:"commitment"`
	CommittedAtMs int64  `json:"committed_at_ms"`
	Revealed      bool   `json:"revealed"`
	seed          string // revealed_seed; "" until revealed
	revealedAtMs  int64
}

// FairnessSeed is a revealed seed.
type FairnessSeed struct {
	AppCode      string `json:"app_code"`
	Day          string `json:"day"`
	Seed         string `json:"seed"`
	Commitment   string `json:"commitment"`
	RevealedAtMs int64  `json:"revealed_at_ms"`
}

// UserDraw is a user's own draw with what verifying it takes.
type UserDraw struct {
	DrawID         string          `json:"draw_id"`
	AppCode        string          `json:"app_code"`
	GiftID         string          `json:"gift_id"`
	RuleVersion    string          `json:"rule_version"`
	FairnessMode   string          `json:"fairness_mode"`
	Nonce          int64           `json:"nonce"`
	ClientSeed     string          `json:"client_seed"`
	RandomValue    int64           `json:"random_value"`
	CandidateTable json.RawMessage `json:"candidate_table"`
	SelectedTierID string          `json:"selected_tier_id"`
	RewardCoins    int64           `json:"reward_coins"`
	RejectReason   string          `json:"reject_reason,omitempty"`
	DrawnAtMs      int64           `json:"drawn_at_ms"`
}

var (
	errNoDay       = &Error{Status: http.StatusNotFound, Code: "no_fairness_day", Msg: "no fairness day is stored for this app and day"}
	errNotRevealed = &Error{Status: http.StatusConflict, Code: "seed_not_revealed", Msg: "no revealed seed for this app and day"}
	errNoDraw      = &Error{Status: http.StatusNotFound, Code: "no_draw", Msg: "no draw of yours has this draw_id"}
)

// checkDay refuses a day label no stored day can have.
func checkDay(day string) error {
	if _, err := time.Parse(time.DateOnly, day); err == nil {
		return nil
	}
	if _, err := time.Parse(time.RFC3339, day); err == nil && len(day) <= 32 {
		return nil
	}
	return bad("invalid_day", "day must be YYYY-MM-DD (or the RFC 3339 start of a short day)")
}

// FairnessDay reads app's day; errNoDay when none is stored.
func (s *Store) FairnessDay(ctx context.Context, app, day string) (FairnessDay, error) {
	d := FairnessDay{AppCode: app, Day: day}
	var seed sql.NullString
	err := s.db.QueryRowContext(ctx, `SELECT day_start_ms, day_end_ms, mode, commitment, committed_at_ms, revealed_seed, revealed_at_ms
	FROM lucky_fairness_days WHERE app_code = ? AND day_label = ?`, app, day).Scan(&d.DayStartMs, &d.DayEndMs, &d.Mode, &d.Commitment,
		&d.CommittedAtMs, &seed, &d.revealedAtMs)
	if errors.Is(err, sql.ErrNoRows) {
		return d, errNoDay
	}
	d.seed, d.Revealed = seed.String, seed.Valid
	return d, err
}

// Seed is app's revealed seed of day; errNotRevealed for a day not
// revealed, in crypto mode, or not stored alike.
func (s *Store) Seed(ctx context.Context, app, day string) (FairnessSeed, error) {
	d, err := s.FairnessDay(ctx, app, day)
	if errors.Is(err, errNoDay) || err == nil && !d.Revealed {
		return FairnessSeed{}, errNotRevealed
	}
	return FairnessSeed{AppCode: app, Day: day, Seed: d.seed, Commitment: d.Commitment, RevealedAtMs: d.revealedAtMs}, err
}

// UserDraw reads user's draw drawID of app; errNoDraw when it is not
// theirs or does not exist.
func (s *Store) UserDraw(ctx context.Context, app string, user int64, drawID string) (UserDraw, error) {
	d := UserDraw{DrawID: drawID, AppCode: app}
	var cands string
	err := s.db.QueryRowContext(ctx, `SELECT gift_id, rule_version, fairness_mode, nonce, client_seed, random_value, candidate_tiers_json,
	selected_tier_id, reward_coins, reject_reason, created_at_ms FROM lucky_draw_records WHERE draw_id = ? AND app_code = ? AND sender_user_id = ?`,
		drawID, app, user).Scan(&d.GiftID, &d.RuleVersion, &d.FairnessMode, &d.Nonce, &d.ClientSeed, &d.RandomValue, &cands,
		&d.SelectedTierID, &d.RewardCoins, &d.RejectReason, &d.DrawnAtMs)
	if errors.Is(err, sql.ErrNoRows) {
		return d, errNoDraw
	}
	d.CandidateTable = json.RawMessage(cands)
	return d, err
}

// appIdentity is the public fairness routes' identity on the app
// listener: the gateway's app header, else ?app_code; no user.
func (a *API) appIdentity(r *http.Request) (subject, error) {
	v := r.Header.Get(a.appHeader)
	if v == "" {
		v = r.URL.Query().Get("app_code")
	}
	app, err := a.appCode(v)
	if err != nil {
		return subject{}, bad("invalid_app_code", "%v", err)
	}
	return subject{app: app}, nil
}

// queryAppIdentity is their identity on the internal listener: ?app_code.
func (a *API) queryAppIdentity(r *http.Request) (subject, error) {
	app, err := a.appCode(r.URL.Query().Get("app_code"))
	if err != nil {
		return subject{}, bad("invalid_app_code", "%v", err)
	}
	return subject{app: app}, nil
}

func (a *API) fairnessCommitment(ctx context.Context, r *http.Request, who subject) (any, error) {
	day := r.PathValue("day")
	if err := checkDay(day); err != nil {
		return nil, err
	}
	return a.store.FairnessDay(ctx, who.app, day)
}

func (a *API) fairnessSeed(ctx context.Context, r *http.Request, who subject) (any, error) {
	day := r.PathValue("day")
	if err := checkDay(day); err != nil {
		return nil, err
	}
	return a.store.Seed(ctx, who.app, day)
}

func (a *API) myLuckyDraw(ctx context.Context, r *http.Request, who subject) (any, error) {
	id := r.PathValue("draw_id")
	if id == "" || len(id) > 64 {
		return nil, bad("invalid_draw_id", "draw_id must be 1 to 64 bytes")
	}
	return a.store.UserDraw(ctx, who.app, who.user, id)
}

// fairnessRoutes adds the public fairness routes to mux with identity id.
func (a *API) fairnessRoutes(mux *http.ServeMux, id identity) {
	mux.HandleFunc("GET /api/v1/lucky/fairness/{day}/commitment", a.wrap("lucky-fairness-commitment", id, a.fairnessCommitment))
	mux.HandleFunc("GET /api/v1/lucky/fairness/{day}/seed", a.wrap("lucky-fairness-seed", id, a.fairnessSeed))
}

// FairnessService is hyapp.activity.v1.LuckyFairnessService over the
// store (api.grpc_addr).
type FairnessService struct {
	activityv1.UnimplementedLuckyFairnessServiceServer
	api *API
}

// FairnessService returns the gRPC service of a.
func (a *API) FairnessService() *FairnessService { return &FairnessService{api: a} }

// rpcDay checks app_code and day and bounds the query's time.
func (s *FairnessService) rpcDay(ctx context.Context, appCode, day string) (context.Context, context.CancelFunc, string, error) {
	app, err := s.api.appCode(appCode)
	if err != nil {
		return nil, nil, "", status.Error(codes.InvalidArgument, "app_code: "+err.Error())
	}
	if err := checkDay(day); err != nil {
		return nil, nil, "", status.Error(codes.InvalidArgument, err.Error())
	}
	ctx, cancel := context.WithTimeout(ctx, s.api.timeout)
	return ctx, cancel, app, nil
}

// rpcError maps the store's errors to gRPC codes.
func (s *FairnessService) rpcError(rpc string, err error) error {
	switch {
	case errors.Is(err, errNoDay):
		return status.Error(codes.NotFound, errNoDay.Msg)
	case errors.Is(err, errNotRevealed):
		return status.Error(codes.FailedPrecondition, errNotRevealed.Msg)
	case errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded):
		return status.FromContextError(err).Err()
	}
	s.api.log.Error("fairness query failed", "rpc", rpc, "error", err)
	return status.Error(codes.Internal, "internal error")
}

// GetCommitment answers a stored day's mode and commitment: NotFound for
// a day not stored, InvalidArgument for a bad day or app_code.
func (s *FairnessService) GetCommitment(ctx context.Context, req *activityv1.GetCommitmentRequest) (*activityv1.GetCommitmentResponse, error) {
	ctx, cancel, app, err := s.rpcDay(ctx, req.GetAppCode(), req.GetDay())
	if err != nil {
		return nil, err
	}
	defer cancel()
	d, err := s.api.store.FairnessDay(ctx, app, req.GetDay())
	if err != nil {
		return nil, s.rpcError("GetCommitment", err)
	}
	return &activityv1.GetCommitmentResponse{AppCode: app, Day: d.Day, DayStartMs: d.DayStartMs, DayEndMs: d.DayEndMs,
		Mode: d.Mode, Commitment: d.Commitment, CommittedAtMs: d.CommittedAtMs, Revealed: d.Revealed}, nil
}

// GetSeed answers a revealed seed; FailedPrecondition before the reveal,
// for a crypto day and for a day not stored alike.
func (s *FairnessService) GetSeed(ctx context.Context, req *activityv1.GetSeedRequest) (*activityv1.GetSeedResponse, error) {
	ctx, cancel, app, err := s.rpcDay(ctx, req.GetAppCode(), req.GetDay())
	if err != nil {
		return nil, err
	}
	defer cancel()
	sd, err := s.api.store.Seed(ctx, app, req.GetDay())
	if err != nil {
		return nil, s.rpcError("GetSeed", err)
	}
	return &activityv1.GetSeedResponse{AppCode: app, Day: sd.Day, Seed: sd.Seed, Commitment: sd.Commitment,
		RevealedAtMs: sd.RevealedAtMs}, nil
}
