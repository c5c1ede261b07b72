// Package statsapi is the read side of the MySQL sink: the HTTP stats
// query API over user_mic_lifetime_stats, user_mic_daily_stats and
// user_mic_sessions (seed 001 "App Query").
//
//	GET /api/v1/users/{user_id}/mic-stats?range=lifetime
//	GET /api/v1/users/{user_id}/mic-stats?from_ms=...&to_ms=...
//	GET /api/v1/users/{user_id}/mic-sessions?limit=...
//
// A range sums the daily rows of the UTC days from day(from_ms) to
// day(to_ms - 1): session_count is then the sum of the daily counts, so a
// session crossing 00:00 UTC counts once on each day it touches (the
// lifetime count counts it once).
//
// Every route takes an optional app_code (default: the configured
// app_code). A user without rows gets zeros (or no sessions), never 404.
// Invalid input gets 400 with {"error":{"code":...,"message":...}}; a
// database failure gets 500 with a generic message (no SQL, no DSN).
package statsapi

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/hyapp/roomflow/internal/obs"
)

// MaxRangeDays bounds a from_ms/to_ms query (inclusive UTC days).
const MaxRangeDays = 366

// Sessions limits.
const (
	DefaultSessionLimit = 20
	MaxSessionLimit     = 100
)

// Stats is seed 001's mic-stats JSON shape.
type Stats struct {
	SeatOccupiedMs int64 `json:"seat_occupied_ms"`
	MicOnlineMs    int64 `json:"mic_online_ms"`
	SessionCount   int64 `json:"session_count"`
	FirstMicAtMs   int64 `json:"first_mic_at_ms"`
	LastMicAtMs    int64 `json:"last_mic_at_ms"`
}

// Session is one user_mic_sessions row; 0 stands for NULL times.
type Session struct {
	MicSessionID          string `json:"mic_session_id"`
	RoomID                string `json:"room_id"`
	Status                string `json:"status"`
	FirstSeatNo           int32  `json:"first_seat_no"`
	CurrentSeatNo         int32  `json:"current_seat_no"`
	SeatStartedAtMs       int64  `json:"seat_started_at_ms"`
	PublishingStartedAtMs int64  `json:"publishing_started_at_ms"`
	EndedAtMs             int64  `json:"ended_at_ms"`
	EndReason             string `json:"end_reason"`
	SeatOccupiedMs        int64  `json:"seat_occupied_ms"`
	MicOnlineMs           int64  `json:"mic_online_ms"`
	UpdatedAtMs           int64  `json:"updated_at_ms"`
}

// SessionList is the mic-sessions response.
type SessionList struct {
	Sessions []Session `json:"sessions"`
}

// BadRequestError is an input error; its message is safe to return.
type BadRequestError struct {
	Code string
	Msg  string
}

func (e *BadRequestError) Error() string { return e.Msg }

func bad(code, format string, args ...any) error {
	return &BadRequestError{Code: code, Msg: fmt.Sprintf(format, args...)}
}

// DayRange is an inclusive range of UTC dates (YYYY-MM-DD).
type DayRange struct{ From, To string }

// ParseRange turns from_ms (inclusive) and to_ms (exclusive) into the UTC
// days they touch: from day(from_ms) to day(to_ms - 1). Both are required,
// from_ms >= 0, to_ms > from_ms, and at most MaxRangeDays days.
func ParseRange(fromS, toS string) (DayRange, error) {
	if fromS == "" || toS == "" {
		return DayRange{}, bad("invalid_range", "from_ms and to_ms are both required (or range=lifetime)")
	}
	from, err := strconv.ParseInt(fromS, 10, 64)
	if err != nil {
		return DayRange{}, bad("invalid_range", "from_ms must be an integer of epoch milliseconds")
	}
	to, err := strconv.ParseInt(toS, 10, 64)
	if err != nil {
		return DayRange{}, bad("invalid_range", "to_ms must be an integer of epoch milliseconds")
	}
	if from < 0 {
		return DayRange{}, bad("invalid_range", "from_ms must not be negative")
	}
	if to <= from {
		return DayRange{}, bad("invalid_range", "to_ms must be greater than from_ms (to_ms is exclusive)")
	}
	const day = int64(24 * time.Hour / time.Millisecond)
	if days := (to-1)/day - from/day + 1; days > MaxRangeDays {
		return DayRange{}, bad("invalid_range", "range covers %d UTC days, at most %d", days, MaxRangeDays)
	}
	d := func(ms int64) string { return time.UnixMilli(ms).UTC().Format(time.DateOnly) }
	return DayRange{From: d(from), To: d(to - 1)}, nil
}

// Store reads the stats tables.
type Store struct{ db *sql.DB }

// NewStore returns a Store on db.
func NewStore(db *sql.DB) *Store { return &Store{db: db} }

// Lifetime returns the user's lifetime row, zeros when there is none.
func (s *Store) Lifetime(ctx context.Context, app string, user int64) (Stats, error) {
	var st Stats
	err := s.db.QueryRowContext(ctx, "SELECT seat_occupied_ms, mic_online_ms, session_count, first_mic_at_ms, last_mic_at_ms FROM user_mic_lifetime_stats WHERE app_code = ? AND user_id = ?", app, user).
		Scan(&st.SeatOccupiedMs, &st.MicOnlineMs, &st.SessionCount, &st.FirstMicAtMs, &st.LastMicAtMs)
	if errors.Is(err, sql.ErrNoRows) {
		return Stats{}, nil
	}
	return st, err
}

// Range sums the user's daily rows of the days in r; first_mic_at_ms is
// the earliest non-zero first, last_mic_at_ms the latest last.
func (s *Store) Range(ctx context.Context, app string, user int64, r DayRange) (Stats, error) {
	var st Stats
	err := s.db.QueryRowContext(ctx, "SELECT COALESCE(SUM(seat_occupied_ms), 0), COALESCE(SUM(mic_online_ms), 0), COALESCE(SUM(session_count), 0), "+
		"COALESCE(MIN(NULLIF(first_mic_at_ms, 0)), 0), COALESCE(MAX(last_mic_at_ms), 0) FROM user_mic_daily_stats "+
		"WHERE app_code = ? AND user_id = ? AND stat_date >= ? AND stat_date <= ?", app, user, r.From, r.To).
		Scan(&st.SeatOccupiedMs, &st.MicOnlineMs, &st.SessionCount, &st.FirstMicAtMs, &st.LastMicAtMs)
	return st, err
}

// Sessions returns the user's most recent sessions, newest seat start first.
func (s *Store) Sessions(ctx context.Context, app string, user int64, limit int) ([]Session, error) {
	rows, err := s.db.QueryContext(ctx, "SELECT mic_session_id, room_id, status, first_seat_no, current_seat_no, seat_started_at_ms, "+
		"COALESCE(publishing_started_at_ms, 0), COALESCE(ended_at_ms, 0), end_reason, seat_occupied_ms, mic_online_ms, updated_at_ms "+
		"FROM user_mic_sessions WHERE app_code = ? AND user_id = ? ORDER BY seat_started_at_ms DESC, mic_session_id DESC LIMIT ?", app, user, limit)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := []Session{}
	for rows.Next() {
		var x Session
		if err := rows.Scan(&x.MicSessionID, &x.RoomID, &x.Status, &x.FirstSeatNo, &x.CurrentSeatNo, &x.SeatStartedAtMs,
			&x.PublishingStartedAtMs, &x.EndedAtMs, &x.EndReason, &x.SeatOccupiedMs, &x.MicOnlineMs, &x.UpdatedAtMs); err != nil {
			return nil, err
		}
		out = append(out, x)
	}
	return out, rows.Err()
}

// Metrics are the API's Prometheus series.
type Metrics struct {
	Requests *prometheus.CounterVec   // roomflow_api_requests_total{route,code}
	Duration *prometheus.HistogramVec // roomflow_api_request_duration_seconds{route}
}

// NewMetrics registers the API metrics on reg (nil: not registered).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		Requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "roomflow_api_requests_total",
			Help: "Stats API requests by route and HTTP status code.",
		}, []string{"route", "code"}),
		Duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "roomflow_api_request_duration_seconds",
			Help:    "Stats API request latency by route.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14),
		}, []string{"route"}),
	}
	if reg != nil {
		reg.MustRegister(m.Requests, m.Duration)
	}
	return m
}

// API serves the routes.
type API struct {
	store      *Store
	defaultApp string
	log        *slog.Logger
	m          *Metrics
	timeout    time.Duration
}

// Option configures an API.
type Option func(*API)

// WithLogger sets the logger (default: discard).
func WithLogger(l *slog.Logger) Option { return func(a *API) { a.log = l } }

// WithRegisterer registers the API metrics on reg.
func WithRegisterer(reg prometheus.Registerer) Option {
	return func(a *API) { a.m = NewMetrics(reg) }
}

// WithQueryTimeout bounds each request's database time (default 5s).
func WithQueryTimeout(d time.Duration) Option { return func(a *API) { a.timeout = d } }

// New returns the API over db; defaultApp is used when a request has no
// app_code parameter.
func New(db *sql.DB, defaultApp string, opts ...Option) *API {
	a := &API{store: NewStore(db), defaultApp: defaultApp, timeout: 5 * time.Second}
	for _, o := range opts {
		o(a)
	}
	if a.log == nil {
		a.log = slog.New(slog.DiscardHandler)
	}
	a.log = a.log.With("component", "api")
	if a.m == nil {
		a.m = NewMetrics(nil)
	}
	return a
}

// Handler returns the routes.
func (a *API) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /api/v1/users/{user_id}/mic-stats", a.wrap("mic-stats", a.micStats))
	mux.HandleFunc("GET /api/v1/users/{user_id}/mic-sessions", a.wrap("mic-sessions", a.micSessions))
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		a.m.Requests.WithLabelValues("other", "404").Inc()
		writeJSON(w, http.StatusNotFound, errBody("not_found", "no such route"))
	})
	return mux
}

type handler func(ctx context.Context, r *http.Request, app string, user int64) (any, error)

func errBody(code, msg string) map[string]any {
	return map[string]any{"error": map[string]string{"code": code, "message": msg}}
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

func (a *API) wrap(route string, h handler) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		t0 := time.Now()
		code := http.StatusOK
		defer func() {
			a.m.Requests.WithLabelValues(route, strconv.Itoa(code)).Inc()
			a.m.Duration.WithLabelValues(route).Observe(time.Since(t0).Seconds())
		}()
		user, err := strconv.ParseInt(r.PathValue("user_id"), 10, 64)
		if err != nil || user <= 0 {
			code = http.StatusBadRequest
			writeJSON(w, code, errBody("invalid_user_id", "user_id must be a positive integer"))
			return
		}
		app := r.URL.Query().Get("app_code")
		if app == "" {
			app = a.defaultApp
		}
		if len(app) > 32 {
			code = http.StatusBadRequest
			writeJSON(w, code, errBody("invalid_app_code", "app_code is at most 32 bytes"))
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), a.timeout)
		defer cancel()
		v, err := h(ctx, r, app, user)
		var be *BadRequestError
		switch {
		case err == nil:
			writeJSON(w, code, v)
		case errors.As(err, &be):
			code = http.StatusBadRequest
			writeJSON(w, code, errBody(be.Code, be.Msg))
		default:
			code = http.StatusInternalServerError
			a.log.Error("stats query failed", "route", route, "app_code", app, "user_id", user, "error", err)
			writeJSON(w, code, errBody("internal", "internal error"))
		}
	}
}

func (a *API) micStats(ctx context.Context, r *http.Request, app string, user int64) (any, error) {
	q := r.URL.Query()
	rng, from, to := q.Get("range"), q.Get("from_ms"), q.Get("to_ms")
	switch {
	case rng != "" && (from != "" || to != ""):
		return nil, bad("invalid_range", "give either range=lifetime or from_ms and to_ms, not both")
	case rng == "lifetime":
		return a.store.Lifetime(ctx, app, user)
	case rng != "":
		return nil, bad("invalid_range", "range must be lifetime")
	}
	dr, err := ParseRange(from, to)
	if err != nil {
		return nil, err
	}
	return a.store.Range(ctx, app, user, dr)
}

func (a *API) micSessions(ctx context.Context, r *http.Request, app string, user int64) (any, error) {
	limit := DefaultSessionLimit
	if s := r.URL.Query().Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > MaxSessionLimit {
			return nil, bad("invalid_limit", "limit must be an integer from 1 to %d", MaxSessionLimit)
		}
		limit = n
	}
	ss, err := a.store.Sessions(ctx, app, user, limit)
	if err != nil {
		return nil, err
	}
	return SessionList{Sessions: ss}, nil
}

// Serve listens on addr and serves the API until ctx is cancelled, then
// shuts down within grace. A bind failure is returned at once.
func (a *API) Serve(ctx context.Context, addr string, grace time.Duration) error {
	srv, err := obs.Serve(addr, a.Handler())
	if err != nil {
		return fmt.Errorf("api.addr %s: %w", addr, err)
	}
	a.log.Info("serving stats API", "addr", srv.Addr())
	<-ctx.Done()
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), grace)
	defer cancel()
	return srv.Shutdown(sctx)
}
