// Package statsapi is the read side of the MySQL sink: the mic stats
// queries of docs/requirements.md MIC-12 and MIC-13 over
// user_mic_lifetime_stats and user_mic_sessions, on three listeners so
// that a header only the gateway may set is never honoured where anyone can
// reach the internal routes.
//
// Internal listener (Listeners.Internal, api.addr; back office, tasks):
//
//	GET /api/v1/users/{user_id}/mic-stats?range=lifetime
//	GET /api/v1/users/{user_id}/mic-stats?from_ms=...&to_ms=...
//	GET /api/v1/users/{user_id}/mic-sessions?limit=...
//	GET /api/v1/lucky/rooms/{room_id}/hourly?since_ms=...   (see lucky.go)
//	GET /api/v1/lucky/fairness/{day}/commitment|seed         (see fairness.go)
//
// Each takes an optional app_code (default: Config.DefaultAppCode). The
// /me routes answer 404 here.
//
// App listener (Listeners.App, api.app_addr; only the gateway reaches it):
//
//	GET /api/v1/users/me/mic-stats?range=lifetime
//	GET /api/v1/users/me/mic-stats?from_ms=...&to_ms=...
//	GET /api/v1/users/me/lucky-draws/{draw_id}               (see fairness.go)
//	GET /api/v1/lucky/fairness/{day}/commitment|seed         (public: no user)
//
// The user is the gateway's Config.UserHeader (default X-User-Id), the app
// its Config.AppCodeHeader (default X-App-Code; absent:
// Config.DefaultAppCode); a missing or malformed identity is 401. Only
// these routes are served there.
//
// gRPC listener (Listeners.GRPC, api.grpc_addr): hyapp.user.v1.UserService
// (see grpc.go) and hyapp.activity.v1.LuckyFairnessService (fairness.go).
//
// A range is exact over closed sessions: the seat and mic online
// milliseconds inside [from_ms, to_ms), session_count = the distinct closed
// sessions overlapping it, first/last mic time clamped into it (see
// Store.Range). Open sessions count nowhere until they close, as in the
// daily and lifetime facts.
//
// A user without rows gets zeros (or no sessions), never 404. Invalid input
// gets 400 with {"error":{"code":...,"message":...}}; a database failure
// gets 500 with a generic message (no SQL, no DSN).
//
// Use:
//
//	api, err := statsapi.New(statsapi.Config{DefaultAppCode: "hyapp", Registerer: reg, Logger: log}, db)
//	...
//	err = api.Serve(ctx, statsapi.Listeners{Internal: ":8080", App: ":8081", GRPC: ":13005"}, 10*time.Second)
package statsapi

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/net/http/httpguts"

	"github.com/hyapp/roomflow/internal/cfgerr"
	"github.com/hyapp/roomflow/internal/mysqlerr"
	"github.com/hyapp/roomflow/internal/obs"
	"github.com/hyapp/roomflow/internal/promreg"
	"github.com/hyapp/roomflow/internal/tlsx"
)

// MaxRangeDays bounds a from_ms/to_ms query: to_ms - from_ms is at most
// this many days of 24h.
const MaxRangeDays = 366

// dayMs is one day in milliseconds.
const dayMs = int64(24 * time.Hour / time.Millisecond)

// Sessions limits.
const (
	DefaultSessionLimit = 20
	MaxSessionLimit     = 100
)

// Stats is the mic-stats JSON shape of docs/requirements.md MIC-13.
type Stats struct {
	SeatOccupiedMs int64 `json:"seat_occupied_ms"`
	MicOnlineMs    int64 `json:"mic_online_ms"`
	SessionCount   int64 `json:"session_count"`
	FirstMicAtMs   int64 `json:"first_mic_at_ms"`
	LastMicAtMs    int64 `json:"last_mic_at_ms"`
}

// Lifetime is a user_mic_lifetime_stats row; the JSON routes show Stats only.
type Lifetime struct {
	Stats
	UpdatedAtMs int64 `json:"-"`
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

// Error is a request the API refuses: Status is the HTTP status, Code a
// short stable string, Msg safe to return to the caller.
type Error struct {
	Status int
	Code   string
	Msg    string
}

func (e *Error) Error() string { return e.Msg }

func bad(code, format string, args ...any) error {
	return &Error{Status: http.StatusBadRequest, Code: code, Msg: fmt.Sprintf(format, args...)}
}

func unauthorized(code, format string, args ...any) error {
	return &Error{Status: http.StatusUnauthorized, Code: code, Msg: fmt.Sprintf(format, args...)}
}

// Range is the half-open window [FromMs, ToMs) of epoch milliseconds.
type Range struct{ FromMs, ToMs int64 }

// ParseRange parses from_ms (inclusive) and to_ms (exclusive): both are
// required integers, 0 <= from_ms < to_ms, and to_ms - from_ms is at most
// MaxRangeDays days.
func ParseRange(fromS, toS string) (Range, error) {
	if fromS == "" || toS == "" {
		return Range{}, bad("invalid_range", "from_ms and to_ms are both required (or range=lifetime)")
	}
	from, err := strconv.ParseInt(fromS, 10, 64)
	if err != nil {
		return Range{}, bad("invalid_range", "from_ms must be an integer of epoch milliseconds")
	}
	to, err := strconv.ParseInt(toS, 10, 64)
	if err != nil {
		return Range{}, bad("invalid_range", "to_ms must be an integer of epoch milliseconds")
	}
	if from < 0 {
		return Range{}, bad("invalid_range", "from_ms must not be negative")
	}
	if to <= from {
		return Range{}, bad("invalid_range", "to_ms must be greater than from_ms (to_ms is exclusive)")
	}
	if to-from > MaxRangeDays*dayMs {
		return Range{}, bad("invalid_range", "range spans %.1f days, at most %d", float64(to-from)/float64(dayMs), MaxRangeDays)
	}
	return Range{FromMs: from, ToMs: to}, nil
}

// Store reads the stats tables.
type Store struct{ db *sql.DB }

// NewStore returns a Store on db.
func NewStore(db *sql.DB) *Store { return &Store{db: db} }

// Lifetime returns the user's lifetime row, zeros when there is none.
func (s *Store) Lifetime(ctx context.Context, app string, user int64) (Lifetime, error) {
	var lt Lifetime
	err := s.db.QueryRowContext(ctx, "SELECT seat_occupied_ms, mic_online_ms, session_count, first_mic_at_ms, last_mic_at_ms, updated_at_ms "+
		"FROM user_mic_lifetime_stats WHERE app_code = ? AND user_id = ?", app, user).
		Scan(&lt.SeatOccupiedMs, &lt.MicOnlineMs, &lt.SessionCount, &lt.FirstMicAtMs, &lt.LastMicAtMs, &lt.UpdatedAtMs)
	if errors.Is(err, sql.ErrNoRows) {
		return Lifetime{}, nil
	}
	return lt, err
}

// rangeQuery clamps every closed session of the user to [from, to) with
// the mic processor's rules (processors/mic SplitDays, so a range of one
// UTC day equals that day's user_mic_daily_stats row): seat time over
// [seat_started, ended), mic time over [publishing_started clamped into the
// session, ended), first = max(seat start, from), last = min(ended, to-1)
// but not before first. A session overlaps when it has seat time inside,
// or is zero-length and starts inside. ended_at_ms is NULL while a session
// is open, so open sessions drop out. The covering index
// idx_user_mic_sessions_user_ended (migration 0005) bounds the scan to the
// user's sessions that ended at or after from.
const rangeQuery = `SELECT
  COALESCE(SUM(LEAST(ended_at_ms, ?) - GREATEST(seat_started_at_ms, ?)), 0),
  COALESCE(SUM(IF(publishing_started_at_ms > 0,
    GREATEST(0, LEAST(ended_at_ms, ?) - GREATEST(LEAST(GREATEST(publishing_started_at_ms, seat_started_at_ms), ended_at_ms), ?)), 0)), 0),
  COUNT(*),
  COALESCE(MIN(GREATEST(seat_started_at_ms, ?)), 0),
  COALESCE(MAX(GREATEST(LEAST(ended_at_ms, ? - 1), seat_started_at_ms, ?)), 0)
FROM user_mic_sessions
WHERE app_code = ? AND user_id = ? AND ended_at_ms >= ? AND seat_started_at_ms < ?
  AND (ended_at_ms > ? OR seat_started_at_ms >= ?)`

// Range answers exactly over the user's closed sessions inside r (see
// rangeQuery): a session crossing 00:00 UTC counts once, and partial days
// at either edge count only their part inside r.
func (s *Store) Range(ctx context.Context, app string, user int64, r Range) (Stats, error) {
	f, t := r.FromMs, r.ToMs
	var st Stats
	err := s.db.QueryRowContext(ctx, rangeQuery, t, f, t, f, f, t, f, app, user, f, t, f, f).
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
	Requests *prometheus.CounterVec   // roomflow_api_requests_total{route,code}; grpc:* routes carry the gRPC code name
	Duration *prometheus.HistogramVec // roomflow_api_request_duration_seconds{route}
}

// NewMetrics registers the API metrics on reg (nil: not registered).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		Requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "roomflow_api_requests_total",
			Help: "Stats API requests by route and status: the HTTP code, or the gRPC code name for grpc:* routes.",
		}, []string{"route", "code"}),
		Duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "roomflow_api_request_duration_seconds",
			Help:    "Stats API request latency by route.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14),
		}, []string{"route"}),
	}
	m.Requests, m.Duration = promreg.Register(reg, m.Requests), promreg.Register(reg, m.Duration)
	return m
}

// Defaults of Config.
const (
	DefaultQueryTimeout  = 5 * time.Second
	DefaultUserHeader    = "X-User-Id"
	DefaultAppCodeHeader = "X-App-Code"
)

// maxAppCode is the width of the app_code columns.
const maxAppCode = 32

// Config configures an API (New).
type Config struct {
	// DefaultAppCode is the app_code of a request that names none;
	// required, at most 32 bytes.
	DefaultAppCode string
	// QueryTimeout bounds each request's database time (default
	// DefaultQueryTimeout).
	QueryTimeout time.Duration
	// UserHeader carries the user id the gateway authenticated, on the app
	// listener (default DefaultUserHeader).
	UserHeader string
	// AppCodeHeader carries the app_code the gateway sets on the app
	// listener; absent means DefaultAppCode. It must differ from
	// UserHeader (default DefaultAppCodeHeader).
	AppCodeHeader string
	// TLS secures every listener (api.tls; internal/tlsx: mutual TLS,
	// callers admitted by certificate name with 403 or PermissionDenied,
	// refusals counted as roomflow_rpc_refused_total{listener="api.addr"|
	// "api.app_addr"|"api.grpc_addr"}, certificates re-read on change).
	// nil: plaintext.
	TLS *tlsx.Server
	// Registerer gets the roomflow_api_* metrics (nil: not registered).
	Registerer prometheus.Registerer
	// Logger gets the API's lines, tagged component=api (nil:
	// slog.Default()).
	Logger *slog.Logger
}

func (c *Config) setDefaults() {
	cfgerr.Default(&c.QueryTimeout, DefaultQueryTimeout)
	cfgerr.Default(&c.UserHeader, DefaultUserHeader)
	cfgerr.Default(&c.AppCodeHeader, DefaultAppCodeHeader)
	cfgerr.Default(&c.Logger, slog.Default())
}

// Validate names the problems by field: "default_app_code",
// "query_timeout", "user_header", "app_code_header".
func (c Config) Validate() error {
	c.setDefaults()
	var v cfgerr.Checks
	if c.DefaultAppCode == "" || len(c.DefaultAppCode) > maxAppCode {
		v.Bad("default_app_code", "must be 1..%d bytes (got %d)", maxAppCode, len(c.DefaultAppCode))
	}
	v.PositiveDuration("query_timeout", c.QueryTimeout)
	if !httpguts.ValidHeaderFieldName(c.UserHeader) {
		v.Bad("user_header", "must be an HTTP header name (got %q)", c.UserHeader)
	}
	if !httpguts.ValidHeaderFieldName(c.AppCodeHeader) {
		v.Bad("app_code_header", "must be an HTTP header name (got %q)", c.AppCodeHeader)
	} else if strings.EqualFold(c.UserHeader, c.AppCodeHeader) {
		v.Bad("app_code_header", "must differ from user_header (%q)", c.UserHeader)
	}
	return v.Err()
}

// API serves the routes.
type API struct {
	store      *Store
	defaultApp string
	log        *slog.Logger
	m          *Metrics
	timeout    time.Duration
	userHeader string
	appHeader  string
	tls        *tlsx.Server
	tlsm       *tlsx.Metrics
}

// guard is the gate of the listener key bound on ln.
func (a *API) guard(key string, ln net.Listener) *tlsx.Guard {
	return tlsx.NewGuard(tlsx.GuardConfig{Listener: key, Addr: ln.Addr().String(), TLSKey: "api.tls", Server: a.tls,
		Metrics: a.tlsm, Logger: a.log})
}

// New returns the API over db, filling cfg's defaults; it fails on a
// config that does not validate (each error a *cfgerr.FieldError naming
// the field).
func New(cfg Config, db *sql.DB) (*API, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &API{
		store: NewStore(db), defaultApp: cfg.DefaultAppCode, timeout: cfg.QueryTimeout,
		userHeader: cfg.UserHeader, appHeader: cfg.AppCodeHeader,
		log: cfg.Logger.With("component", "api"), m: NewMetrics(cfg.Registerer),
		tls: cfg.TLS, tlsm: tlsx.NewMetrics(cfg.Registerer),
	}, nil
}

// Handler returns the internal routes (api.addr). The /me routes are not
// served here: a caller able to reach this listener could set the
// gateway's header itself.
func (a *API) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /api/v1/users/{user_id}/mic-stats", a.wrap("mic-stats", a.pathIdentity, a.micStats))
	mux.HandleFunc("GET /api/v1/users/{user_id}/mic-sessions", a.wrap("mic-sessions", a.pathIdentity, a.micSessions))
	mux.HandleFunc("GET /api/v1/lucky/rooms/{room_id}/hourly", a.wrap("lucky-room-hourly", a.roomIdentity, a.luckyRoomHourly))
	a.fairnessRoutes(mux, a.queryAppIdentity)
	onlyApp := a.notFound("the /me routes are served only on the app listener (api.app_addr)")
	mux.HandleFunc("GET /api/v1/users/me/mic-stats", onlyApp)
	mux.HandleFunc("GET /api/v1/users/me/mic-sessions", onlyApp)
	mux.HandleFunc("GET /api/v1/users/me/lucky-draws/{draw_id}", onlyApp)
	mux.HandleFunc("/", a.notFound("no such route"))
	return mux
}

// AppHandler returns the app routes (api.app_addr), whose user is the one
// the gateway authenticated (see Package doc); nothing else is served.
func (a *API) AppHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /api/v1/users/me/mic-stats", a.wrap("me-mic-stats", a.gatewayIdentity, a.micStats))
	mux.HandleFunc("GET /api/v1/users/me/lucky-draws/{draw_id}", a.wrap("me-lucky-draw", a.gatewayIdentity, a.myLuckyDraw))
	a.fairnessRoutes(mux, a.appIdentity)
	mux.HandleFunc("/", a.notFound("no such route"))
	return mux
}

func (a *API) notFound(msg string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		a.m.Requests.WithLabelValues("other", "404").Inc()
		writeJSON(w, http.StatusNotFound, errBody("not_found", msg))
	}
}

// subject is whom a request asks about: an app's user, or an app's room.
type subject struct {
	app  string
	user int64
	room string
}

// logAttrs name the subject in a log line.
func (s subject) logAttrs() []any {
	if s.room != "" {
		return []any{"app_code", s.app, "room_id", s.room}
	}
	return []any{"app_code", s.app, "user_id", s.user}
}

// identity resolves a request's subject, or an *Error.
type identity func(r *http.Request) (subject, error)

// pathIdentity is the internal user routes' identity: {user_id} and
// ?app_code.
func (a *API) pathIdentity(r *http.Request) (subject, error) {
	user, err := strconv.ParseInt(r.PathValue("user_id"), 10, 64)
	if err != nil || user <= 0 {
		return subject{}, bad("invalid_user_id", "user_id must be a positive integer")
	}
	app, err := a.appCode(r.URL.Query().Get("app_code"))
	if err != nil {
		return subject{}, bad("invalid_app_code", "%v", err)
	}
	return subject{app: app, user: user}, nil
}

// gatewayIdentity is the app routes' identity: the gateway's headers. A
// missing or malformed one is 401, as the gateway failed to authenticate.
func (a *API) gatewayIdentity(r *http.Request) (subject, error) {
	vs := r.Header.Values(a.userHeader)
	if len(vs) == 0 || vs[0] == "" {
		return subject{}, unauthorized("unauthenticated", "missing %s header", a.userHeader)
	}
	user, err := strconv.ParseInt(vs[0], 10, 64)
	if len(vs) > 1 || err != nil || user <= 0 {
		return subject{}, unauthorized("unauthenticated", "malformed %s header: want one positive integer user id", a.userHeader)
	}
	apps := r.Header.Values(a.appHeader)
	if len(apps) > 1 {
		return subject{}, unauthorized("unauthenticated", "malformed %s header: more than one value", a.appHeader)
	}
	app, err := a.appCode(r.Header.Get(a.appHeader))
	if err != nil {
		return subject{}, unauthorized("unauthenticated", "malformed %s header: %v", a.appHeader, err)
	}
	return subject{app: app, user: user}, nil
}

// appCode applies the default to an empty app_code and bounds its size.
func (a *API) appCode(v string) (string, error) {
	if v == "" {
		return a.defaultApp, nil
	}
	if len(v) > maxAppCode {
		return "", errors.New("app_code is at most 32 bytes")
	}
	return v, nil
}

type handler func(ctx context.Context, r *http.Request, who subject) (any, error)

func errBody(code, msg string) map[string]any {
	return map[string]any{"error": map[string]string{"code": code, "message": msg}}
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

func (a *API) wrap(route string, id identity, h handler) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		t0 := time.Now()
		code := http.StatusOK
		defer func() {
			a.m.Requests.WithLabelValues(route, strconv.Itoa(code)).Inc()
			a.m.Duration.WithLabelValues(route).Observe(time.Since(t0).Seconds())
		}()
		ctx, cancel := context.WithTimeout(r.Context(), a.timeout)
		defer cancel()
		var ae *Error
		who, err := id(r)
		if err == nil {
			var v any
			if v, err = h(ctx, r, who); err == nil {
				writeJSON(w, code, v)
				return
			}
		}
		attrs := append([]any{"route", route, "error", err}, who.logAttrs()...)
		switch {
		case errors.As(err, &ae):
			code = ae.Status
			writeJSON(w, code, errBody(ae.Code, ae.Msg))
		case r.Context().Err() != nil:
			// The caller hung up: no one reads the answer, and nothing failed here.
			code = StatusClientClosedRequest
			a.log.Debug("stats request ended by the caller", attrs...)
			w.WriteHeader(code)
		case errors.Is(ctx.Err(), context.DeadlineExceeded):
			code = http.StatusGatewayTimeout
			a.log.Warn("stats query timed out", append(attrs, "timeout", a.timeout.String())...)
			writeJSON(w, code, errBody("timeout", "the query took longer than "+a.timeout.String()))
		case mysqlerr.Retryable(err):
			code = http.StatusServiceUnavailable
			a.log.Warn("stats query: database unavailable", attrs...)
			writeJSON(w, code, errBody("unavailable", "the database is unavailable; retry"))
		default:
			code = http.StatusInternalServerError
			a.log.Error("stats query failed", attrs...)
			writeJSON(w, code, errBody("internal", "internal error"))
		}
	}
}

// StatusClientClosedRequest is the status counted (nginx's 499) for a
// request whose caller hung up before its answer.
const StatusClientClosedRequest = 499

func (a *API) micStats(ctx context.Context, r *http.Request, who subject) (any, error) {
	q := r.URL.Query()
	rng, from, to := q.Get("range"), q.Get("from_ms"), q.Get("to_ms")
	switch {
	case rng != "" && (from != "" || to != ""):
		return nil, bad("invalid_range", "give either range=lifetime or from_ms and to_ms, not both")
	case rng == "lifetime":
		lt, err := a.store.Lifetime(ctx, who.app, who.user)
		return lt.Stats, err
	case rng != "":
		return nil, bad("invalid_range", "range must be lifetime")
	}
	rg, err := ParseRange(from, to)
	if err != nil {
		return nil, err
	}
	return a.store.Range(ctx, who.app, who.user, rg)
}

func (a *API) micSessions(ctx context.Context, r *http.Request, who subject) (any, error) {
	limit := DefaultSessionLimit
	if s := r.URL.Query().Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > MaxSessionLimit {
			return nil, bad("invalid_limit", "limit must be an integer from 1 to %d", MaxSessionLimit)
		}
		limit = n
	}
	ss, err := a.store.Sessions(ctx, who.app, who.user, limit)
	if err != nil {
		return nil, err
	}
	return SessionList{Sessions: ss}, nil
}

// Listeners are the API's addresses; an empty one is not served.
type Listeners struct {
	Internal string // api.addr: /api/v1/users/{user_id}/...
	App      string // api.app_addr: /api/v1/users/me/...
	GRPC     string // api.grpc_addr: hyapp.user.v1.UserService
}

// Serve starts every listener in l (see Start) and serves until ctx is
// cancelled, then stops within grace (see Running.Stop).
func (a *API) Serve(ctx context.Context, l Listeners, grace time.Duration) error {
	run, err := a.Start(l)
	if err != nil {
		return err
	}
	<-ctx.Done()
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), grace)
	defer cancel()
	return run.Stop(sctx)
}

// Running is the API serving on its listeners.
type Running struct {
	http []*obs.Server // internal, app: nil when off
	grpc *grpcServer   // nil when off
}

// Start binds every non-empty listener in l and serves in the background.
// A bind failure stops what was started and is returned naming the key.
func (a *API) Start(l Listeners) (*Running, error) {
	if l == (Listeners{}) {
		return nil, errors.New("api.addr, api.app_addr and api.grpc_addr are all empty: nothing to serve")
	}
	run := &Running{http: make([]*obs.Server, 2)}
	fail := func(key, addr string, err error) (*Running, error) {
		return nil, errors.Join(fmt.Errorf("%s %s: %w", key, addr, err), run.Stop(context.Background()))
	}
	for i, h := range []struct {
		key, addr string
		h         http.Handler
	}{{"api.addr", l.Internal, a.Handler()}, {"api.app_addr", l.App, a.AppHandler()}} {
		if h.addr == "" {
			continue
		}
		ln, err := net.Listen("tcp", h.addr)
		if err != nil {
			return fail(h.key, h.addr, err)
		}
		g := a.guard(h.key, ln)
		srv := obs.ServeListener(g.Listener(ln), g.Handler(h.h))
		run.http[i] = srv
		a.log.Info("serving stats API", "listener", h.key, "addr", srv.Addr(), "tls", a.tls != nil)
	}
	if l.GRPC != "" {
		gs, err := a.serveGRPC(l.GRPC)
		if err != nil {
			return fail("api.grpc_addr", l.GRPC, err)
		}
		run.grpc = gs
		a.log.Info("serving stats API", "listener", "api.grpc_addr", "addr", gs.Addr(), "tls", a.tls != nil)
	}
	return run, nil
}

// Addrs returns the bound addresses ("" for a listener that is off).
func (r *Running) Addrs() Listeners {
	var l Listeners
	if s := r.http[0]; s != nil {
		l.Internal = s.Addr()
	}
	if s := r.http[1]; s != nil {
		l.App = s.Addr()
	}
	if r.grpc != nil {
		l.GRPC = r.grpc.Addr()
	}
	return l
}

// Stop stops accepting on every listener and lets in-flight requests and
// RPCs finish until ctx ends; then the remaining RPCs are cancelled.
func (r *Running) Stop(ctx context.Context) error {
	errs := make([]error, 3)
	var wg sync.WaitGroup
	for i, s := range r.http {
		if s != nil {
			wg.Go(func() { errs[i] = s.Shutdown(ctx) })
		}
	}
	if r.grpc != nil {
		wg.Go(func() { errs[2] = r.grpc.Stop(ctx) })
	}
	wg.Wait()
	return errors.Join(errs...)
}
