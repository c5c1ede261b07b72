package luckydraw_test

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/hyapp/roomflow/internal/testenv"
	"github.com/hyapp/roomflow/internal/tlsx"
	"github.com/hyapp/roomflow/schemas/activityv1"
	"github.com/hyapp/roomflow/services/luckydraw"
)

// startMTLS serves the service with lucky.tls from p: the server
// certificate, p's CA for clients, room-service's SPIFFE id allowed. The
// draw timeout is generous: these tests are about who may draw, and a
// loaded test machine must not turn a slow draw into a failure.
func startMTLS(t *testing.T, p *testenv.PKI) *env {
	t.Helper()
	srv, err := tlsx.ServerConfig{CertFile: p.ServerCert, KeyFile: p.ServerKey, ClientCAFile: p.CAFile,
		AllowedClientNames: []string{testenv.AllowedClient}}.Load(nil)
	if err != nil {
		t.Fatal(err)
	}
	return start(t, luckydraw.Config{TLS: srv, DrawTimeout: 5 * time.Second}, 1_000_000)
}

func dial(t *testing.T, addr string, tc *tls.Config) *grpc.ClientConn {
	t.Helper()
	creds := insecure.NewCredentials()
	if tc != nil {
		creds = credentials.NewTLS(tc)
	}
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds))
	if err != nil {
		t.Fatal(err)
	}
	return conn
}

// Only room-service draws: a plaintext client, a TLS client without a
// certificate, a certificate of another CA and one whose names are not
// allowed are refused (PermissionDenied for the names), counted by reason,
// and write nothing; the allowed client draws.
func TestMutualTLSOnlyAllowedCallerDraws(t *testing.T) {
	p := testenv.NewPKI(t, "lucky.test", true)
	e := startMTLS(t, p)
	addr := e.conn.Target()
	for i, c := range p.Callers(t) {
		conn := dial(t, addr, c.TLS)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		cmd := fmt.Sprintf("mtls-%d", i)
		resp, err := activityv1.NewLuckyGiftServiceClient(conn).ExecuteLuckyGiftDraw(ctx, drawReq(cmd, 7))
		cancel()
		conn.Close()
		rows := e.count(t, `SELECT COUNT(*) FROM lucky_draw_records WHERE command_id = ?`, cmd)
		if c.Refused == "" {
			if err != nil || resp.GetDrawId() == "" || rows != 1 {
				t.Fatalf("%s: draw %v, %v, %d rows; want a draw", c.Name, resp, err, rows)
			}
			continue
		}
		if err == nil || rows != 0 {
			t.Fatalf("%s: draw answered %v (err %v), %d rows written; want a refusal and nothing written", c.Name, resp, err, rows)
		}
		if c.Refused == tlsx.ReasonNameNotAllowed && status.Code(err) != codes.PermissionDenied {
			t.Fatalf("%s: %v, want PermissionDenied", c.Name, err)
		}
		testenv.Eventually(t, 3*time.Second, c.Name+" counted", func() bool {
			v, _ := testenv.Metric(e.reg, "roomflow_rpc_refused_total", "listener", "lucky.grpc_addr", "reason", c.Refused)
			return v >= 1
		})
	}
	if n := e.count(t, `SELECT COUNT(*) FROM lucky_draw_records`); n != 1 {
		t.Fatalf("%d draws recorded, want the allowed caller's one", n)
	}
	if v, ok := testenv.Metric(e.reg, "roomflow_rpc_insecure", "listener", "lucky.grpc_addr"); !ok || v != 0 {
		t.Fatalf("roomflow_rpc_insecure = %v (%v), want 0 on loopback with a client CA", v, ok)
	}
}

// Rotation under load: the server certificate is replaced on disk while
// clients draw over fresh connections; every draw succeeds, connections
// made after the swap see the new certificate, and no command is drawn
// twice.
func TestMutualTLSCertificateRotationUnderLoad(t *testing.T) {
	p := testenv.NewPKI(t, "lucky.test", true)
	e := startMTLS(t, p)
	addr := e.conn.Target()
	var allowed *tls.Config
	for _, c := range p.Callers(t) {
		if c.Refused == "" {
			allowed = c.TLS
		}
	}
	const workers, perWorker, perConn = 6, 60, 5
	var (
		done    atomic.Int64
		mu      sync.Mutex
		drawIDs = map[string]string{}
		errs    []error
		wg      sync.WaitGroup
	)
	for w := range workers {
		wg.Go(func() {
			var conn *grpc.ClientConn
			defer func() {
				if conn != nil {
					conn.Close()
				}
			}()
			for i := range perWorker {
				if i%perConn == 0 { // a new connection, a new handshake
					if conn != nil {
						conn.Close()
					}
					conn = dial(t, addr, allowed)
				}
				cmd := fmt.Sprintf("rot-%d-%d", w, i)
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				resp, err := activityv1.NewLuckyGiftServiceClient(conn).ExecuteLuckyGiftDraw(ctx, drawReq(cmd, int64(100+w)))
				cancel()
				mu.Lock()
				if err != nil {
					errs = append(errs, fmt.Errorf("%s: %w", cmd, err))
				} else {
					drawIDs[cmd] = resp.GetDrawId()
				}
				mu.Unlock()
				done.Add(1)
			}
		})
	}
	testenv.Eventually(t, 30*time.Second, "a third of the draws", func() bool { return done.Load() >= workers*perWorker/3 })
	rotated := p.Issue(t, testenv.LeafOpts{Name: "lucky.test", DNS: []string{"lucky.test"}, IPs: []net.IP{net.IPv4(127, 0, 0, 1)}, Server: true, File: "server"})
	h2 := allowed.Clone()
	h2.NextProtos = []string{"h2"} // as gRPC dials: the listener requires ALPN h2
	conn, err := tls.Dial("tcp", addr, h2)
	if err != nil {
		t.Fatal(err)
	}
	if got := conn.ConnectionState().PeerCertificates[0].SerialNumber; got.Cmp(rotated.X509.SerialNumber) != 0 {
		t.Errorf("after the swap the listener presents serial %s, want the rotated %s", got, rotated.X509.SerialNumber)
	}
	conn.Close()
	beforeEnd := done.Load()
	wg.Wait()
	if beforeEnd >= workers*perWorker {
		t.Fatalf("every draw finished before the rotation: the test did not rotate under load")
	}
	for _, err := range errs {
		t.Error(err)
	}
	seen := map[string]bool{}
	for cmd, id := range drawIDs {
		if seen[id] {
			t.Errorf("draw id %s answered twice (%s)", id, cmd)
		}
		seen[id] = true
	}
	if n := e.count(t, `SELECT COUNT(*) FROM lucky_draw_records`); n != workers*perWorker || len(drawIDs) != workers*perWorker {
		t.Fatalf("%d draws recorded, %d answered, want %d each", n, len(drawIDs), workers*perWorker)
	}
	if n := e.count(t, `SELECT COUNT(DISTINCT command_id) FROM lucky_draw_records`); n != workers*perWorker {
		t.Fatalf("%d distinct commands recorded, want %d", n, workers*perWorker)
	}
	e.checkInvariants(t)
}
