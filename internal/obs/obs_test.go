package obs_test

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/hyapp/roomflow/internal/obs"
)

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func TestServerEndpoints(t *testing.T) {
	reg := obs.NewRegistry()
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: "roomflow_test_things_total", Help: "things"})
	reg.MustRegister(c)
	c.Add(3)
	h := obs.NewHealth()
	var notReady = errors.New("restoring state")
	failing := true
	h.AddReadiness("mic", func() error {
		if failing {
			return notReady
		}
		return nil
	})
	srv, err := obs.Serve("127.0.0.1:0", obs.Handler(reg, h))
	if err != nil {
		t.Fatal(err)
	}
	base := "http://" + srv.Addr()
	if code, body := get(t, base+"/healthz"); code != 200 || !strings.Contains(body, "ok") {
		t.Fatalf("healthz: %d %q", code, body)
	}
	if code, body := get(t, base+"/readyz"); code != 503 || !strings.Contains(body, "mic: restoring state") {
		t.Fatalf("readyz while not ready: %d %q", code, body)
	}
	failing = false
	if code, _ := get(t, base+"/readyz"); code != 200 {
		t.Fatalf("readyz when ready: %d", code)
	}
	h.SetDraining()
	if code, body := get(t, base+"/readyz"); code != 503 || !strings.Contains(body, "draining") || !errors.Is(h.Ready(), obs.ErrDraining) {
		t.Fatalf("readyz while draining: %d %q", code, body)
	}
	code, body := get(t, base+"/metrics")
	if code != 200 || !strings.Contains(body, "roomflow_test_things_total 3") || !strings.Contains(body, "go_goroutines") || !strings.Contains(body, "process_") {
		t.Fatalf("metrics: %d, missing roomflow/go/process series", code)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := http.Get(base + "/healthz"); err == nil {
		t.Fatal("server still serving after Shutdown")
	}
}

// TestIdleConnectionsAreClosed: a keep-alive connection that stays idle is
// closed by the server after its idle timeout (shortened here), instead of
// being held until the client goes.
func TestIdleConnectionsAreClosed(t *testing.T) {
	defer obs.SetIdleTimeout(200 * time.Millisecond)()
	srv, err := obs.Serve("127.0.0.1:0", obs.Handler(obs.NewRegistry(), obs.NewHealth()))
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown(context.Background())
	conn, err := net.Dial("tcp", srv.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := io.WriteString(conn, "GET /healthz HTTP/1.1\r\nHost: roomflow\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	r := bufio.NewReader(conn)
	resp, err := http.ReadResponse(r, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	start := time.Now()
	_ = conn.SetReadDeadline(start.Add(5 * time.Second))
	if _, err := r.ReadByte(); !errors.Is(err, io.EOF) {
		t.Fatalf("idle keep-alive connection after %s: read %v, want the server's close (EOF)", time.Since(start).Round(time.Millisecond), err)
	}
}
