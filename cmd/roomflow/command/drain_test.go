package command

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/hyapp/roomflow/internal/testenv"
	"github.com/hyapp/roomflow/schemas/activityv1"
)

// drainDelay is the tests' shutdown.drain_delay: long enough to call
// inside it, short enough for the suite.
const drainDelay = 2 * time.Second

// TestDrainDelay: after SIGTERM (ctx cancelled) a serving component's
// /readyz answers 503 at once while its listener still accepts a new
// connection and serves the call on it; it stops, exit 0, once the delay
// is over.
func TestDrainDelay(t *testing.T) {
	m := testenv.NewMySQL(t)
	base := "mysql:\n  dsn: \"" + m.DSN + "\"\nlog:\n  level: error\nshutdown:\n  timeout: 3s\n  drain_delay: " + drainDelay.String() + "\n" +
		"kafka:\n  brokers: [\"" + testenv.ClosedAddr(t) + "\"]\n"
	t.Run("lucky", func(t *testing.T) {
		addr := testenv.ClosedAddr(t)
		cfg := base + "api:\n  addr: \"\"\n  app_addr: \"\"\n  grpc_addr: \"\"\n" +
			"lucky:\n  grpc_addr: \"" + addr + "\"\n  audit_key: k\n  wallet_grpc_addr: \"" + testenv.ClosedAddr(t) + "\"\n"
		// A fresh client per call: its first RPC dials a new connection,
		// as a caller kube-proxy still routes here does.
		testDrainDelay(t, cfg, "lucky", func(ctx context.Context) error {
			conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				return err
			}
			defer conn.Close()
			_, err = activityv1.NewLuckyGiftServiceClient(conn).CheckLuckyGift(ctx,
				&activityv1.CheckLuckyGiftRequest{Meta: &activityv1.LuckyGiftMeta{RoomId: "r1"}, GiftId: "lucky-star"})
			return err
		})
	})
	t.Run("api", func(t *testing.T) {
		addr := testenv.ClosedAddr(t)
		cfg := base + "api:\n  addr: \"" + addr + "\"\n  app_addr: \"\"\n  grpc_addr: \"\"\n"
		client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}} // a new connection per call
		testDrainDelay(t, cfg, "api", func(ctx context.Context) error {
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/api/v1/users/7/mic-stats?range=lifetime", nil)
			resp, err := client.Do(req)
			if err != nil {
				return err
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				return fmt.Errorf("status %d", resp.StatusCode)
			}
			return nil
		})
	})
}

// testDrainDelay runs `roomflow command` with cfg until ready, cancels it
// and checks the drain: 503, call served, stop after the delay.
func testDrainDelay(t *testing.T, cfg, command string, call func(context.Context) error) {
	metrics := testenv.ClosedAddr(t)
	cfg += "metrics:\n  addr: \"" + metrics + "\"\n"
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	served := make(chan error, 1)
	go func() { _, err := runCLIContext(t, ctx, cfg, command); served <- err }()
	testenv.Eventually(t, 20*time.Second, command+" ready", func() bool {
		return readyz(metrics) == http.StatusOK && call(context.Background()) == nil
	})
	stopAt := time.Now()
	cancel()
	testenv.Eventually(t, time.Second, "/readyz 503 after SIGTERM", func() bool { return readyz(metrics) == http.StatusServiceUnavailable })
	time.Sleep(drainDelay / 2) // well into the delay, past a first instant
	cctx, ccancel := context.WithTimeout(context.Background(), drainDelay/4)
	err := call(cctx)
	ccancel()
	if in := time.Since(stopAt); err != nil || in >= drainDelay {
		t.Fatalf("a new call %s after SIGTERM (drain_delay %s): %v, want served", in, drainDelay, err)
	}
	if code := readyz(metrics); code != http.StatusServiceUnavailable {
		t.Fatalf("/readyz %d during the drain delay, want 503", code)
	}
	select {
	case err := <-served:
		if took := time.Since(stopAt); err != nil || took < drainDelay {
			t.Fatalf("%s stopped after %s (drain_delay %s): %v, want exit 0 after the delay", command, took, drainDelay, err)
		}
	case <-time.After(drainDelay + 3*time.Second + 5*time.Second):
		t.Fatalf("%s still running %s after SIGTERM", command, time.Since(stopAt))
	}
}

// TestKafkaOnlyStopsWithoutDrainDelay: the relay accepts no calls, so
// shutdown.drain_delay does not hold its stop back.
func TestKafkaOnlyStopsWithoutDrainDelay(t *testing.T) {
	const delay = 10 * time.Second
	k := testenv.NewKafka(t, testenv.Partitions(2))
	m := testenv.NewMySQL(t)
	metrics := testenv.ClosedAddr(t)
	cfg := "log:\n  level: error\nshutdown:\n  timeout: 3s\n  drain_delay: " + delay.String() + "\n" +
		"mysql:\n  dsn: \"" + m.DSN + "\"\n" + k.ConfigYAML(2) + "metrics:\n  addr: \"" + metrics + "\"\n"
	if _, err := runCLI(t, cfg, "topics"); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	served := make(chan error, 1)
	go func() { _, err := runCLIContext(t, ctx, cfg, "relay"); served <- err }()
	testenv.Eventually(t, 30*time.Second, "relay ready", func() bool { return readyz(metrics) == http.StatusOK })
	stopAt := time.Now()
	cancel()
	select {
	case err := <-served:
		if err != nil {
			t.Fatalf("relay: %v, want a clean stop", err)
		}
	case <-time.After(delay / 2):
		t.Fatalf("relay still running %s after SIGTERM: it waited for shutdown.drain_delay (%s)", time.Since(stopAt), delay)
	}
}

func readyz(addr string) int {
	resp, err := http.Get("http://" + addr + "/readyz")
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}
