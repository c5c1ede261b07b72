package luckydraw_test

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/hyapp/roomflow/internal/config"
	"github.com/hyapp/roomflow/internal/testenv"
	"github.com/hyapp/roomflow/services/luckydraw"
	"github.com/hyapp/roomflow/services/luckydraw/luckyoutbox"
	"github.com/hyapp/roomflow/services/luckydraw/wallet"
)

// NewServer records the ownership under the replica's name before
// serving, and the server stops cleanly when its context ends; with
// neither the wallet nor Kafka reachable it still starts.
func TestNewServer(t *testing.T) {
	m := testenv.NewMySQL(t)
	ctx := context.Background()
	cfg := config.Default()
	cfg.Lucky.AuditKey = "test-key"
	cfg.Kafka.Brokers = []string{"127.0.0.1:1"} // never dialled before use
	draw, err := luckydraw.ConfigFrom(&cfg, luckydraw.Config{})
	if err != nil {
		t.Fatal(err)
	}
	out, err := luckyoutbox.ConfigFrom(&cfg, luckyoutbox.Config{})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := luckydraw.NewServer(ctx, m.DB, luckydraw.ServerConfig{Draw: draw, Outbox: out,
		Wallet: wallet.Config{Addr: "127.0.0.1:1", Timeout: time.Second}, Instance: "pod-7"})
	if err != nil {
		t.Fatal(err)
	}
	var inst string
	if err := m.DB.QueryRow(`SELECT instance_id FROM lucky_pool_owner WHERE id = 1`).Scan(&inst); err != nil || inst != "pod-7" {
		t.Fatalf("lucky_pool_owner: %q %v", inst, err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- srv.Run(runCtx, ln) }()
	time.Sleep(100 * time.Millisecond)
	stop()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("run: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the server did not stop")
	}
}
