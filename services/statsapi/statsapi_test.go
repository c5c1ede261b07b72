package statsapi_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/hyapp/roomflow/internal/cfgerr"
	"github.com/hyapp/roomflow/internal/testenv"
	"github.com/hyapp/roomflow/schemas/userv1"
	"github.com/hyapp/roomflow/services/statsapi"
	mysqlsink "github.com/hyapp/roomflow/sinks/mysql"
	"github.com/hyapp/roomflow/sinks/mysql/micledger"
)

func ms(s string) int64 {
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		panic(err)
	}
	return t.UnixMilli()
}

const minute = 60_000

// seed applies, through the sink's own store, user 42's two sessions:
// A from 2026-03-01T23:30 to 03-02T01:10 publishing from 23:40 (crosses
// midnight), and B on 03-05 10:00-11:00 that never published.
func seed(t *testing.T) *testenv.MySQL {
	t.Helper()
	m := testenv.NewMySQL(t)
	aStart, aPub, aEnd := ms("2026-03-01T23:30:00Z"), ms("2026-03-01T23:40:00Z"), ms("2026-03-02T01:10:00Z")
	bStart, bEnd := ms("2026-03-05T10:00:00Z"), ms("2026-03-05T11:00:00Z")
	mid := ms("2026-03-02T00:00:00Z")
	entries := []*userv1.MicLedgerEntry{
		{EventId: "a-up", AppCode: "hyapp", UserId: 42, MicSessionId: "A", Action: "up", Status: "consumed", OccurredAtMs: aStart,
			Session: &userv1.MicSession{MicSessionId: "A", UserId: 42, RoomId: "r1", Status: "pending_publish", SeatStartedAtMs: aStart, Version: 1, OpenedEventId: "a-up", LastEventId: "a-up", CreatedAtMs: aStart, UpdatedAtMs: aStart}},
		{EventId: "a-down", AppCode: "hyapp", UserId: 42, MicSessionId: "A", Action: "down", Status: "consumed", OccurredAtMs: aEnd,
			Session: &userv1.MicSession{MicSessionId: "A", UserId: 42, RoomId: "r1", Status: "ended", SeatStartedAtMs: aStart, PublishingStartedAtMs: aPub, EndedAtMs: aEnd,
				EndReason: "leave", SeatOccupiedMs: 100 * minute, MicOnlineMs: 90 * minute, Version: 3, OpenedEventId: "a-up", ClosedEventId: "a-down", LastEventId: "a-down", CreatedAtMs: aStart, UpdatedAtMs: aEnd},
			Daily: []*userv1.MicDailyDelta{
				{StatDate: "2026-03-01", SeatOccupiedDeltaMs: 30 * minute, MicOnlineDeltaMs: 20 * minute, SessionCountDelta: 1, RoomCountDelta: 1, FirstMicAtMs: aStart, LastMicAtMs: mid},
				{StatDate: "2026-03-02", SeatOccupiedDeltaMs: 70 * minute, MicOnlineDeltaMs: 70 * minute, SessionCountDelta: 1, RoomCountDelta: 1, FirstMicAtMs: mid, LastMicAtMs: aEnd},
			},
			Lifetime: &userv1.MicLifetimeDelta{SeatOccupiedDeltaMs: 100 * minute, MicOnlineDeltaMs: 90 * minute, SessionCountDelta: 1, FirstMicAtMs: aStart, LastMicAtMs: aEnd}},
		{EventId: "b-down", AppCode: "hyapp", UserId: 42, MicSessionId: "B", Action: "down", Status: "consumed", OccurredAtMs: bEnd,
			Session: &userv1.MicSession{MicSessionId: "B", UserId: 42, RoomId: "r2", Status: "ended", SeatStartedAtMs: bStart, EndedAtMs: bEnd, EndReason: "kick",
				SeatOccupiedMs: 60 * minute, Version: 2, OpenedEventId: "b-up", ClosedEventId: "b-down", LastEventId: "b-down", CreatedAtMs: bStart, UpdatedAtMs: bEnd},
			Daily:    []*userv1.MicDailyDelta{{StatDate: "2026-03-05", SeatOccupiedDeltaMs: 60 * minute, SessionCountDelta: 1, RoomCountDelta: 1, FirstMicAtMs: bStart, LastMicAtMs: bEnd}},
			Lifetime: &userv1.MicLifetimeDelta{SeatOccupiedDeltaMs: 60 * minute, SessionCountDelta: 1, FirstMicAtMs: bStart, LastMicAtMs: bEnd}},
	}
	apply(t, m, entries)
	return m
}

// newAPI is statsapi.New(cfg, db) with its logs discarded unless cfg has a
// logger.
func newAPI(t *testing.T, cfg statsapi.Config, db *sql.DB) *statsapi.API {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	api, err := statsapi.New(cfg, db)
	if err != nil {
		t.Fatal(err)
	}
	return api
}

// apply writes ledger entries through the sink's own store, as the sink
// would: sessions, daily and lifetime rows.
func apply(t *testing.T, m *testenv.MySQL, entries []*userv1.MicLedgerEntry) {
	t.Helper()
	ctx := context.Background()
	ledger, err := micledger.New(micledger.Config{Topic: "ledger", DefaultAppCode: "hyapp"})
	if err != nil {
		t.Fatal(err)
	}
	st, err := mysqlsink.NewStore(mysqlsink.StoreConfig{Group: "api-test", Appliers: []mysqlsink.Registration{mysqlsink.Register(ledger)}}, m.DB)
	if err != nil {
		t.Fatal(err)
	}
	tp := mysqlsink.TP{Topic: "ledger", Partition: 0}
	claims, err := st.Claim(ctx, "seed", []mysqlsink.TP{tp}, 1)
	if err != nil {
		t.Fatal(err)
	}
	var recs []mysqlsink.Record
	for i, e := range entries {
		recs = append(recs, mysqlsink.Record{TP: tp, Offset: int64(i), Item: e})
	}
	if _, err := st.Apply(ctx, "seed", map[mysqlsink.TP]int64{tp: claims[tp].Generation}, recs, 1); err != nil {
		t.Fatal(err)
	}
}

func get(t *testing.T, srv *httptest.Server, path string, into any) int {
	t.Helper()
	resp, err := http.Get(srv.URL + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		t.Fatalf("%s: content type %q", path, ct)
	}
	if err := json.Unmarshal(body, into); err != nil {
		t.Fatalf("%s: %v: %s", path, err, body)
	}
	return resp.StatusCode
}

func TestMicStats(t *testing.T) {
	m := seed(t)
	api := newAPI(t, statsapi.Config{DefaultAppCode: "hyapp", Registerer: prometheus.NewRegistry()}, m.DB)
	srv := httptest.NewServer(api.Handler())
	defer srv.Close()

	aStart, aEnd, bEnd := ms("2026-03-01T23:30:00Z"), ms("2026-03-02T01:10:00Z"), ms("2026-03-05T11:00:00Z")
	mid := ms("2026-03-02T00:00:00Z")
	for _, tc := range []struct {
		path string
		want statsapi.Stats
	}{
		{"/api/v1/users/42/mic-stats?range=lifetime", statsapi.Stats{SeatOccupiedMs: 160 * minute, MicOnlineMs: 90 * minute, SessionCount: 2, FirstMicAtMs: aStart, LastMicAtMs: bEnd}},
		// Days 03-01 and 03-02: session A crosses midnight and counts once.
		{fmt.Sprintf("/api/v1/users/42/mic-stats?from_ms=%d&to_ms=%d", ms("2026-03-01T00:00:00Z"), ms("2026-03-03T00:00:00Z")), statsapi.Stats{SeatOccupiedMs: 100 * minute, MicOnlineMs: 90 * minute, SessionCount: 1, FirstMicAtMs: aStart, LastMicAtMs: aEnd}},
		// Exact edges: one millisecond just after midnight is one millisecond, not the day.
		{fmt.Sprintf("/api/v1/users/42/mic-stats?from_ms=%d&to_ms=%d", mid, mid+1), statsapi.Stats{SeatOccupiedMs: 1, MicOnlineMs: 1, SessionCount: 1, FirstMicAtMs: mid, LastMicAtMs: mid}},
		// to_ms is exclusive: ending exactly at midnight leaves the next day out; last is clamped to to_ms-1 like a day's.
		{fmt.Sprintf("/api/v1/users/42/mic-stats?from_ms=%d&to_ms=%d", ms("2026-03-01T12:00:00Z"), mid), statsapi.Stats{SeatOccupiedMs: 30 * minute, MicOnlineMs: 20 * minute, SessionCount: 1, FirstMicAtMs: aStart, LastMicAtMs: mid - 1}},
		// A partial range inside one session: 23:35-23:45 has 10 min of seat and 5 of mic (publishing from 23:40).
		{fmt.Sprintf("/api/v1/users/42/mic-stats?from_ms=%d&to_ms=%d", ms("2026-03-01T23:35:00Z"), ms("2026-03-01T23:45:00Z")), statsapi.Stats{SeatOccupiedMs: 10 * minute, MicOnlineMs: 5 * minute, SessionCount: 1, FirstMicAtMs: ms("2026-03-01T23:35:00Z"), LastMicAtMs: ms("2026-03-01T23:45:00Z") - 1}},
		{fmt.Sprintf("/api/v1/users/42/mic-stats?from_ms=%d&to_ms=%d", ms("2026-03-01T00:00:00Z"), ms("2026-04-01T00:00:00Z")), statsapi.Stats{SeatOccupiedMs: 160 * minute, MicOnlineMs: 90 * minute, SessionCount: 2, FirstMicAtMs: aStart, LastMicAtMs: bEnd}},
		// Ending exactly where a session starts, or starting exactly where it ended: no overlap.
		{fmt.Sprintf("/api/v1/users/42/mic-stats?from_ms=%d&to_ms=%d", aEnd, ms("2026-03-05T10:00:00Z")), statsapi.Stats{}},
		// Unknown user, other app: zeros, not 404.
		{"/api/v1/users/999/mic-stats?range=lifetime", statsapi.Stats{}},
		{fmt.Sprintf("/api/v1/users/999/mic-stats?from_ms=0&to_ms=%d", ms("2026-03-03T00:00:00Z")-ms("2025-03-03T00:00:00Z")), statsapi.Stats{}},
		{"/api/v1/users/42/mic-stats?range=lifetime&app_code=other", statsapi.Stats{}},
		{"/api/v1/users/42/mic-stats?range=lifetime&app_code=hyapp", statsapi.Stats{SeatOccupiedMs: 160 * minute, MicOnlineMs: 90 * minute, SessionCount: 2, FirstMicAtMs: aStart, LastMicAtMs: bEnd}},
	} {
		var got statsapi.Stats
		if code := get(t, srv, tc.path, &got); code != http.StatusOK {
			t.Fatalf("%s: status %d", tc.path, code)
		}
		if got != tc.want {
			t.Fatalf("%s:\n got %+v\nwant %+v", tc.path, got, tc.want)
		}
	}

	// The exact JSON field names of MIC-13.
	var raw map[string]any
	get(t, srv, "/api/v1/users/42/mic-stats?range=lifetime", &raw)
	for _, k := range []string{"seat_occupied_ms", "mic_online_ms", "session_count", "first_mic_at_ms", "last_mic_at_ms"} {
		if _, ok := raw[k]; !ok {
			t.Fatalf("response lacks %s: %v", k, raw)
		}
	}
	if len(raw) != 5 {
		t.Fatalf("response has extra fields: %v", raw)
	}
}

func TestBadRequests(t *testing.T) {
	m := seed(t)
	srv := httptest.NewServer(newAPI(t, statsapi.Config{DefaultAppCode: "hyapp"}, m.DB).Handler())
	defer srv.Close()
	for _, path := range []string{
		"/api/v1/users/abc/mic-stats?range=lifetime",
		"/api/v1/users/0/mic-stats?range=lifetime",
		"/api/v1/users/-3/mic-stats?range=lifetime",
		"/api/v1/users/42/mic-stats",
		"/api/v1/users/42/mic-stats?range=weekly",
		"/api/v1/users/42/mic-stats?range=lifetime&from_ms=1&to_ms=2",
		"/api/v1/users/42/mic-stats?from_ms=1000",
		"/api/v1/users/42/mic-stats?to_ms=1000",
		"/api/v1/users/42/mic-stats?from_ms=2000&to_ms=1000",
		"/api/v1/users/42/mic-stats?from_ms=1000&to_ms=1000",
		"/api/v1/users/42/mic-stats?from_ms=-5&to_ms=1000",
		"/api/v1/users/42/mic-stats?from_ms=1.5&to_ms=1000",
		"/api/v1/users/42/mic-stats?from_ms=x&to_ms=1000",
		fmt.Sprintf("/api/v1/users/42/mic-stats?from_ms=0&to_ms=%d", int64(400*24*3600*1000)),
		"/api/v1/users/42/mic-sessions?limit=0",
		"/api/v1/users/42/mic-sessions?limit=101",
		"/api/v1/users/42/mic-sessions?limit=ten",
		"/api/v1/users/42/mic-stats?range=lifetime&app_code=aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
	} {
		var got struct {
			Error struct{ Code, Message string }
		}
		if code := get(t, srv, path, &got); code != http.StatusBadRequest {
			t.Fatalf("%s: status %d, want 400", path, code)
		}
		if got.Error.Code == "" || got.Error.Message == "" {
			t.Fatalf("%s: error body %+v", path, got)
		}
	}
	// A range of exactly MaxRangeDays days is accepted.
	var ok statsapi.Stats
	if code := get(t, srv, fmt.Sprintf("/api/v1/users/42/mic-stats?from_ms=0&to_ms=%d", int64(statsapi.MaxRangeDays*24*3600*1000)), &ok); code != http.StatusOK {
		t.Fatalf("366-day range: status %d", code)
	}
}

func TestMicSessions(t *testing.T) {
	m := seed(t)
	srv := httptest.NewServer(newAPI(t, statsapi.Config{DefaultAppCode: "hyapp"}, m.DB).Handler())
	defer srv.Close()
	var got statsapi.SessionList
	if code := get(t, srv, "/api/v1/users/42/mic-sessions", &got); code != http.StatusOK {
		t.Fatalf("status %d", code)
	}
	if len(got.Sessions) != 2 || got.Sessions[0].MicSessionID != "B" || got.Sessions[1].MicSessionID != "A" {
		t.Fatalf("sessions = %+v, want B then A", got.Sessions)
	}
	a := got.Sessions[1]
	if a.Status != "ended" || a.SeatOccupiedMs != 100*minute || a.MicOnlineMs != 90*minute || a.PublishingStartedAtMs != ms("2026-03-01T23:40:00Z") || a.EndReason != "leave" {
		t.Fatalf("session A = %+v", a)
	}
	if got.Sessions[0].PublishingStartedAtMs != 0 {
		t.Fatalf("B never published: %+v", got.Sessions[0])
	}
	if code := get(t, srv, "/api/v1/users/42/mic-sessions?limit=1", &got); code != http.StatusOK || len(got.Sessions) != 1 || got.Sessions[0].MicSessionID != "B" {
		t.Fatalf("limit=1: %d %+v", code, got)
	}
	var raw map[string]any
	if code := get(t, srv, "/api/v1/users/777/mic-sessions", &raw); code != http.StatusOK {
		t.Fatalf("unknown user: status %d", code)
	}
	if s, ok := raw["sessions"].([]any); !ok || len(s) != 0 {
		t.Fatalf("unknown user: %v, want an empty list", raw)
	}
}

func TestParseRange(t *testing.T) {
	day := int64(24 * 3600 * 1000)
	for _, tc := range []struct {
		from, to string
		want     statsapi.Range
		bad      bool
	}{
		{"0", "1", statsapi.Range{FromMs: 0, ToMs: 1}, false},
		{fmt.Sprint(day - 1), fmt.Sprint(day + 1), statsapi.Range{FromMs: day - 1, ToMs: day + 1}, false},
		{"5", fmt.Sprint(366*day + 5), statsapi.Range{FromMs: 5, ToMs: 366*day + 5}, false},
		{"5", fmt.Sprint(366*day + 6), statsapi.Range{}, true},
		{"5", "5", statsapi.Range{}, true},
		{"6", "5", statsapi.Range{}, true},
		{"-1", "5", statsapi.Range{}, true},
		{"", "5", statsapi.Range{}, true},
		{"5", "", statsapi.Range{}, true},
		{"1e3", "5000", statsapi.Range{}, true},
	} {
		got, err := statsapi.ParseRange(tc.from, tc.to)
		if (err != nil) != tc.bad || got != tc.want {
			t.Fatalf("ParseRange(%s, %s) = %+v, %v", tc.from, tc.to, got, err)
		}
	}
}

// New fills the defaults and refuses a config that does not validate,
// naming the field.
func TestNewRefusesInvalidConfig(t *testing.T) {
	if _, err := statsapi.New(statsapi.Config{DefaultAppCode: "hyapp"}, nil); err != nil {
		t.Fatalf("New with defaults: %v", err)
	}
	for _, tc := range []struct {
		key string
		cfg statsapi.Config
	}{
		{"default_app_code", statsapi.Config{}},
		{"default_app_code", statsapi.Config{DefaultAppCode: strings.Repeat("a", 33)}},
		{"query_timeout", statsapi.Config{DefaultAppCode: "hyapp", QueryTimeout: -time.Second}},
		{"user_header", statsapi.Config{DefaultAppCode: "hyapp", UserHeader: "X User"}},
		{"app_code_header", statsapi.Config{DefaultAppCode: "hyapp", AppCodeHeader: "X-App:Code"}},
		{"app_code_header", statsapi.Config{DefaultAppCode: "hyapp", AppCodeHeader: "x-user-id"}}, // the default user header
	} {
		_, err := statsapi.New(tc.cfg, nil)
		var fe *cfgerr.FieldError
		if !errors.As(err, &fe) || fe.Key != tc.key {
			t.Errorf("New(%+v): %v, want a %s field error", tc.cfg, err, tc.key)
		}
	}
}

// TestEndedRequestsAreNotInternalErrors: a caller that hung up is counted
// 499 and logged at debug, a query past QueryTimeout answers 504 and logs
// a warning, a database that cannot be reached answers 503 (worth a retry)
// and logs a warning; only another database failure answers 500 and logs
// an error. The
// gRPC method answers the same ends with their codes (Unavailable for the
// unreachable database), Internal alone logged as an error.
func TestEndedRequestsAreNotInternalErrors(t *testing.T) {
	m := seed(t)
	closed, err := sql.Open("mysql", testenv.ServerDSN())
	if err != nil {
		t.Fatal(err)
	}
	closed.Close() // every query fails: sql: database is closed
	unreachable := unreachableDB(t)
	for _, tc := range []struct {
		name     string
		db       *sql.DB
		timeout  time.Duration
		hangUp   bool
		code     int
		level    string // of the request's log line
		errorStr string // the answered error code, "" for no body
		rpc      codes.Code
	}{
		{name: "caller hung up", db: m.DB, hangUp: true, code: statsapi.StatusClientClosedRequest, level: "DEBUG", rpc: codes.Canceled},
		{name: "query timeout", db: m.DB, timeout: time.Nanosecond, code: http.StatusGatewayTimeout, level: "WARN", errorStr: "timeout",
			rpc: codes.DeadlineExceeded},
		{name: "database failure", db: closed, code: http.StatusInternalServerError, level: "ERROR", errorStr: "internal", rpc: codes.Internal},
		{name: "database unreachable", db: unreachable, code: http.StatusServiceUnavailable, level: "WARN", errorStr: "unavailable",
			rpc: codes.Unavailable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var logs strings.Builder
			reg := prometheus.NewRegistry()
			api := newAPI(t, statsapi.Config{DefaultAppCode: "hyapp", QueryTimeout: tc.timeout, Registerer: reg,
				Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))}, tc.db)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			if tc.hangUp {
				cancel()
			}
			rec := httptest.NewRecorder()
			api.Handler().ServeHTTP(rec, httptest.NewRequestWithContext(ctx, "GET", "/api/v1/users/42/mic-stats?range=lifetime", nil))
			if rec.Code != tc.code {
				t.Errorf("answered %d, want %d", rec.Code, tc.code)
			}
			if l := logs.String(); !strings.Contains(l, "level="+tc.level) || tc.level != "ERROR" && strings.Contains(l, "level=ERROR") {
				t.Errorf("logged %q, want one %s line", l, tc.level)
			}
			if tc.errorStr != "" {
				var e struct{ Error struct{ Code string } }
				if err := json.Unmarshal(rec.Body.Bytes(), &e); err != nil || e.Error.Code != tc.errorStr {
					t.Errorf("body %q, want error code %q", rec.Body, tc.errorStr)
				}
			}
			if n, _ := testenv.Metric(reg, "roomflow_api_requests_total", "route", "mic-stats", "code", strconv.Itoa(tc.code)); n != 1 {
				t.Errorf("roomflow_api_requests_total{code=%d} = %v, want 1", tc.code, n)
			}

			logs.Reset()
			_, err := api.UserService().GetUserMicLifetimeStats(ctx, &userv1.GetUserMicLifetimeStatsRequest{UserId: 42})
			if status.Code(err) != tc.rpc || strings.Contains(logs.String(), "level=ERROR") != (tc.rpc == codes.Internal) {
				t.Errorf("RPC: %v, logged %q; want %v, an error logged only for Internal", err, logs.String(), tc.rpc)
			}
		})
	}
}

// unreachableDB is a pool whose server refuses every connection: a port
// that was free a moment ago.
func unreachableDB(t *testing.T) *sql.DB {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	db, err := sql.Open("mysql", "root@tcp("+addr+")/x?timeout=1s")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}
