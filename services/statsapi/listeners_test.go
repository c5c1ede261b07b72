package statsapi_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/hyapp/roomflow/internal/testenv"
	"github.com/hyapp/roomflow/schemas/userv1"
	"github.com/hyapp/roomflow/services/statsapi"
)

// startAll serves the seeded API of cfg on all three loopback listeners,
// its metrics on reg.
func startAll(t *testing.T, reg *prometheus.Registry, cfg statsapi.Config) statsapi.Listeners {
	t.Helper()
	m := seed(t)
	cfg.Registerer = reg
	api := newAPI(t, cfg, m.DB)
	run, err := api.Start(statsapi.Listeners{Internal: "127.0.0.1:0", App: "127.0.0.1:0", GRPC: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := run.Stop(ctx); err != nil {
			t.Error(err)
		}
	})
	return run.Addrs()
}

// call does GET http://addr+path with headers and decodes the JSON body.
func call(t *testing.T, addr, path string, headers map[string][]string, into any) int {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, "http://"+addr+path, nil)
	for k, vs := range headers {
		for _, v := range vs {
			req.Header.Add(k, v)
		}
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		t.Fatalf("%s: content type %q: %s", path, ct, body)
	}
	if err := json.Unmarshal(body, into); err != nil {
		t.Fatalf("%s: %v: %s", path, err, body)
	}
	return resp.StatusCode
}

type errResp struct {
	Error struct{ Code, Message string }
}

// TestAppRoutes: the gateway's /me routes answer on the app listener from
// the trusted headers, with 401 for a missing or malformed identity; the
// app listener serves nothing else, and the internal listener does not
// honour the header routes.
func TestAppRoutes(t *testing.T) {
	addrs := startAll(t, prometheus.NewRegistry(), statsapi.Config{DefaultAppCode: "hyapp", UserHeader: "X-Auth-User", AppCodeHeader: "X-Auth-App"})
	aStart, aEnd, bEnd := ms("2026-03-01T23:30:00Z"), ms("2026-03-02T01:10:00Z"), ms("2026-03-05T11:00:00Z")
	user42 := map[string][]string{"X-Auth-User": {"42"}}
	lifetime := statsapi.Stats{SeatOccupiedMs: 160 * minute, MicOnlineMs: 90 * minute, SessionCount: 2, FirstMicAtMs: aStart, LastMicAtMs: bEnd}

	for _, tc := range []struct {
		path    string
		headers map[string][]string
		want    statsapi.Stats
	}{
		{"/api/v1/users/me/mic-stats?range=lifetime", user42, lifetime},
		{fmt.Sprintf("/api/v1/users/me/mic-stats?from_ms=%d&to_ms=%d", ms("2026-03-01T00:00:00Z"), ms("2026-03-03T00:00:00Z")), user42,
			statsapi.Stats{SeatOccupiedMs: 100 * minute, MicOnlineMs: 90 * minute, SessionCount: 1, FirstMicAtMs: aStart, LastMicAtMs: aEnd}},
		{"/api/v1/users/me/mic-stats?range=lifetime", map[string][]string{"X-Auth-User": {"42"}, "X-Auth-App": {"hyapp"}}, lifetime},
		// The app comes from the gateway, not from the query string.
		{"/api/v1/users/me/mic-stats?range=lifetime&app_code=other", user42, lifetime},
		{"/api/v1/users/me/mic-stats?range=lifetime", map[string][]string{"X-Auth-User": {"42"}, "X-Auth-App": {"other"}}, statsapi.Stats{}},
		{"/api/v1/users/me/mic-stats?range=lifetime", map[string][]string{"X-Auth-User": {"7"}}, statsapi.Stats{}},
	} {
		var got statsapi.Stats
		if code := call(t, addrs.App, tc.path, tc.headers, &got); code != http.StatusOK || got != tc.want {
			t.Fatalf("app %s %v: %d %+v, want %+v", tc.path, tc.headers, code, got, tc.want)
		}
	}

	// Missing or malformed identity: 401 with a JSON error.
	for _, h := range []map[string][]string{
		nil,
		{"X-User-Id": {"42"}}, // the default name is not the configured one
		{"X-Auth-User": {""}},
		{"X-Auth-User": {"abc"}},
		{"X-Auth-User": {"0"}},
		{"X-Auth-User": {"-42"}},
		{"X-Auth-User": {"42", "43"}},
		{"X-Auth-User": {"42"}, "X-Auth-App": {"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"}},
		{"X-Auth-User": {"42"}, "X-Auth-App": {"hyapp", "other"}},
	} {
		var e errResp
		if code := call(t, addrs.App, "/api/v1/users/me/mic-stats?range=lifetime", h, &e); code != http.StatusUnauthorized || e.Error.Code != "unauthenticated" || e.Error.Message == "" {
			t.Fatalf("app with %v: %d %+v, want 401", h, code, e)
		}
	}
	// Authenticated but a bad range: 400.
	var e errResp
	if code := call(t, addrs.App, "/api/v1/users/me/mic-stats?from_ms=5&to_ms=5", user42, &e); code != http.StatusBadRequest || e.Error.Code != "invalid_range" {
		t.Fatalf("bad range: %d %+v", code, e)
	}

	// The app listener serves no internal route, whatever the headers.
	for _, path := range []string{"/api/v1/users/42/mic-stats?range=lifetime", "/api/v1/users/42/mic-sessions", "/api/v1/users/me/mic-sessions"} {
		var e errResp
		if code := call(t, addrs.App, path, user42, &e); code != http.StatusNotFound {
			t.Fatalf("app listener served %s: %d %+v", path, code, e)
		}
	}
	// The internal listener does not honour the gateway header.
	for _, path := range []string{"/api/v1/users/me/mic-stats?range=lifetime", "/api/v1/users/me/mic-sessions"} {
		var e errResp
		h := map[string][]string{"X-Auth-User": {"42"}, "X-User-Id": {"42"}}
		if code := call(t, addrs.Internal, path, h, &e); code != http.StatusNotFound {
			t.Fatalf("internal listener answered %s with the header: %d %+v", path, code, e)
		}
	}
	var got statsapi.Stats
	if code := call(t, addrs.Internal, "/api/v1/users/42/mic-stats?range=lifetime", nil, &got); code != http.StatusOK || got != lifetime {
		t.Fatalf("internal route: %d %+v", code, got)
	}
}

// TestGRPCGetUserMicLifetimeStats calls hyapp.user.v1.UserService with a
// real gRPC client over loopback against MariaDB.
func TestGRPCGetUserMicLifetimeStats(t *testing.T) {
	reg := prometheus.NewRegistry()
	addrs := startAll(t, reg, statsapi.Config{DefaultAppCode: "hyapp"})
	conn, err := grpc.NewClient(addrs.GRPC, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	cl := userv1.NewUserServiceClient(conn)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	aStart, bEnd := ms("2026-03-01T23:30:00Z"), ms("2026-03-05T11:00:00Z")

	for _, tc := range []struct {
		meta *userv1.RequestMeta
		user int64
		want *userv1.UserMicLifetimeStats
	}{
		{&userv1.RequestMeta{RequestId: "r1", Caller: "activity-service"}, 42, &userv1.UserMicLifetimeStats{UserId: 42,
			SeatOccupiedMs: 160 * minute, MicOnlineMs: 90 * minute, SessionCount: 2, FirstMicAtMs: aStart, LastMicAtMs: bEnd, UpdatedAtMs: bEnd, AppCode: "hyapp"}},
		{nil, 42, &userv1.UserMicLifetimeStats{UserId: 42,
			SeatOccupiedMs: 160 * minute, MicOnlineMs: 90 * minute, SessionCount: 2, FirstMicAtMs: aStart, LastMicAtMs: bEnd, UpdatedAtMs: bEnd, AppCode: "hyapp"}},
		{&userv1.RequestMeta{AppCode: "other"}, 42, &userv1.UserMicLifetimeStats{UserId: 42, AppCode: "other"}},
		{&userv1.RequestMeta{AppCode: "hyapp"}, 777, &userv1.UserMicLifetimeStats{UserId: 777, AppCode: "hyapp"}},
	} {
		resp, err := cl.GetUserMicLifetimeStats(ctx, &userv1.GetUserMicLifetimeStatsRequest{Meta: tc.meta, UserId: tc.user})
		if err != nil {
			t.Fatalf("user %d meta %v: %v", tc.user, tc.meta, err)
		}
		if !proto.Equal(resp.GetStats(), tc.want) {
			t.Fatalf("user %d meta %v:\n got %v\nwant %v", tc.user, tc.meta, resp.GetStats(), tc.want)
		}
	}
	for _, req := range []*userv1.GetUserMicLifetimeStatsRequest{
		{UserId: 0},
		{UserId: -1},
		{UserId: 42, Meta: &userv1.RequestMeta{AppCode: "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"}},
	} {
		_, err := cl.GetUserMicLifetimeStats(ctx, req)
		if status.Code(err) != codes.InvalidArgument {
			t.Fatalf("%v: %v, want InvalidArgument", req, err)
		}
	}
	route := "grpc:" + userv1.UserService_GetUserMicLifetimeStats_FullMethodName
	for code, want := range map[string]float64{"OK": 4, "InvalidArgument": 3} {
		if got, _ := testenv.Metric(reg, "roomflow_api_requests_total", "route", route, "code", code); got != want {
			t.Errorf("roomflow_api_requests_total{route=%q,code=%q} = %v, want %v", route, code, got, want)
		}
	}
}

// TestStopIsGraceful: Stop lets an in-flight RPC finish (here a query
// parked on a row lock), then the listeners are closed.
func TestStopIsGraceful(t *testing.T) {
	m := seed(t)
	api := newAPI(t, statsapi.Config{DefaultAppCode: "hyapp"}, m.DB)
	run, err := api.Start(statsapi.Listeners{GRPC: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient(run.Addrs().GRPC, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	cl := userv1.NewUserServiceClient(conn)
	ctx := context.Background()

	// A plain SELECT does not wait on InnoDB row locks: park the RPC's
	// query behind a table lock instead.
	lockConn, err := m.DB.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer lockConn.Close()
	if _, err := lockConn.ExecContext(ctx, "LOCK TABLES user_mic_lifetime_stats WRITE"); err != nil {
		t.Fatal(err)
	}
	rpc := make(chan error, 1)
	go func() {
		resp, err := cl.GetUserMicLifetimeStats(ctx, &userv1.GetUserMicLifetimeStatsRequest{UserId: 42})
		if err == nil && resp.GetStats().GetSessionCount() != 2 {
			err = fmt.Errorf("stats %v", resp.GetStats())
		}
		rpc <- err
	}()
	testenv.Eventually(t, 60*time.Second, "the RPC's query waits on the table lock", func() bool {
		var n int
		m.DB.QueryRow("SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE STATE LIKE '%metadata lock%' AND INFO LIKE '%user_mic_lifetime_stats%'").Scan(&n)
		return n > 0
	})
	stopped := make(chan error, 1)
	go func() {
		sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		stopped <- run.Stop(sctx)
	}()
	testenv.Eventually(t, 60*time.Second, "new RPCs are refused once Stop began", func() bool {
		c2, err := grpc.NewClient(run.Addrs().GRPC, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			return false
		}
		defer c2.Close()
		cctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
		defer cancel()
		_, err = userv1.NewUserServiceClient(c2).GetUserMicLifetimeStats(cctx, &userv1.GetUserMicLifetimeStatsRequest{UserId: 42})
		return status.Code(err) == codes.Unavailable || status.Code(err) == codes.DeadlineExceeded
	})
	select {
	case err := <-rpc:
		t.Fatalf("in-flight RPC ended before its query could: %v", err)
	case err := <-stopped:
		t.Fatalf("Stop returned while an RPC was in flight: %v", err)
	default:
	}
	if _, err := lockConn.ExecContext(ctx, "UNLOCK TABLES"); err != nil {
		t.Fatal(err)
	}
	if err := <-rpc; err != nil {
		t.Fatalf("in-flight RPC during graceful stop: %v", err)
	}
	if err := <-stopped; err != nil {
		t.Fatal(err)
	}
}
