package statsapi_test

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/hyapp/roomflow/internal/testenv"
	"github.com/hyapp/roomflow/internal/tlsx"
	"github.com/hyapp/roomflow/schemas/userv1"
	"github.com/hyapp/roomflow/services/statsapi"
)

// api.tls on every listener: the internal and app HTTP listeners and the
// gRPC UserService refuse a plaintext client, a TLS client without a
// certificate, a certificate of another CA (each counted under its reason
// and listener) and answer a certificate whose names are not allowed with
// 403 / PermissionDenied; the allowed caller reads its stats.
func TestMutualTLSOnEveryListener(t *testing.T) {
	p := testenv.NewPKI(t, "api.test", true)
	srv, err := tlsx.ServerConfig{CertFile: p.ServerCert, KeyFile: p.ServerKey, ClientCAFile: p.CAFile,
		AllowedClientNames: []string{testenv.AllowedClient}}.Load(nil)
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	addrs := startAll(t, reg, statsapi.Config{DefaultAppCode: "hyapp", TLS: srv})
	httpGet := func(tc *tls.Config, addr, path string, hdr http.Header) (int, []byte, error) {
		scheme := "https"
		if tc == nil {
			scheme = "http"
		}
		req, _ := http.NewRequest(http.MethodGet, scheme+"://"+addr+path, nil)
		req.Header = hdr
		cl := &http.Client{Transport: &http.Transport{TLSClientConfig: tc}, Timeout: 5 * time.Second}
		resp, err := cl.Do(req)
		if err != nil {
			return 0, nil, err
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, body, nil
	}
	grpcGet := func(tc *tls.Config) error {
		creds := insecure.NewCredentials()
		if tc != nil {
			creds = credentials.NewTLS(tc)
		}
		conn, err := grpc.NewClient(addrs.GRPC, grpc.WithTransportCredentials(creds))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, err = userv1.NewUserServiceClient(conn).GetUserMicLifetimeStats(ctx, &userv1.GetUserMicLifetimeStatsRequest{UserId: 42})
		return err
	}
	for _, c := range p.Callers(t) {
		for _, l := range []struct {
			key, addr, path string
			hdr             http.Header
		}{
			{"api.addr", addrs.Internal, "/api/v1/users/42/mic-stats?range=lifetime", http.Header{}},
			{"api.app_addr", addrs.App, "/api/v1/users/me/mic-stats?range=lifetime", http.Header{"X-User-Id": {"42"}}},
		} {
			code, body, err := httpGet(c.TLS, l.addr, l.path, l.hdr)
			switch c.Refused {
			case "":
				var st statsapi.Stats
				if code != 200 || json.Unmarshal(body, &st) != nil || st.SessionCount == 0 {
					t.Errorf("%s on %s: %d %s %v, want the stats", c.Name, l.key, code, body, err)
				}
			case tlsx.ReasonNameNotAllowed:
				var e errResp
				if code != 403 || json.Unmarshal(body, &e) != nil || e.Error.Code != "forbidden" {
					t.Errorf("%s on %s: %d %s %v, want 403 forbidden", c.Name, l.key, code, body, err)
				}
			case tlsx.ReasonPlaintext:
				if code != 400 {
					t.Errorf("%s on %s: %d %v, want 400 (HTTP to an HTTPS server)", c.Name, l.key, code, err)
				}
			default:
				if err == nil {
					t.Errorf("%s on %s: answered %d, want the handshake refused", c.Name, l.key, code)
				}
			}
		}
		err := grpcGet(c.TLS)
		switch {
		case c.Refused == "" && err != nil:
			t.Errorf("%s on api.grpc_addr: %v", c.Name, err)
		case c.Refused != "" && err == nil:
			t.Errorf("%s on api.grpc_addr: served", c.Name)
		case c.Refused == tlsx.ReasonNameNotAllowed && status.Code(err) != codes.PermissionDenied:
			t.Errorf("%s on api.grpc_addr: %v, want PermissionDenied", c.Name, err)
		}
		if c.Refused == "" {
			continue
		}
		for _, key := range []string{"api.addr", "api.app_addr", "api.grpc_addr"} {
			testenv.Eventually(t, 3*time.Second, c.Name+" counted on "+key, func() bool {
				v, _ := testenv.Metric(reg, "roomflow_rpc_refused_total", "listener", key, "reason", c.Refused)
				return v == 1
			})
		}
	}
	for _, key := range []string{"api.addr", "api.app_addr", "api.grpc_addr"} {
		if v, ok := testenv.Metric(reg, "roomflow_rpc_insecure", "listener", key); !ok || v != 0 {
			t.Errorf("roomflow_rpc_insecure{listener=%q} = %v (%v), want 0", key, v, ok)
		}
	}
}
