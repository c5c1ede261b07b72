package luckydraw_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/hyapp/roomflow/internal/cfgerr/cfgerrtest"
	"github.com/hyapp/roomflow/internal/config"
	"github.com/hyapp/roomflow/internal/mysqlx"
	"github.com/hyapp/roomflow/services/luckydraw"
)

// A draw's transaction holds a connection while the rule version it has
// not cached yet is loaded on another: on a pool of one connection
// (mysql.max_open_conns: 1) every draw times out and answers Unavailable,
// for ever, as the version is never cached. New refuses such a pool,
// naming the field ConfigFrom maps to mysql.max_open_conns; two connections
// draw.
func TestDrawNeedsTwoConnections(t *testing.T) {
	m := seeded(t, 100_000)
	ctx := context.Background()
	db, err := mysqlx.Open(ctx, config.MySQLConfig{DSN: m.DSN, MaxOpenConns: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	cfg := luckydraw.Config{AppCode: app, AuditKey: "test-key"}
	_, err = luckydraw.New(cfg, db)
	cfgerrtest.NamesKey(t, "pool_conns", err)

	db.SetMaxOpenConns(2)
	svc, err := luckydraw.New(cfg, db)
	if err != nil {
		t.Fatal(err)
	}
	db.SetMaxOpenConns(1) // what New refuses, under a running service
	for i := range 3 {
		_, err := svc.ExecuteLuckyGiftDraw(ctx, drawReq(fmt.Sprint("one-", i), int64(i+1)))
		if status.Code(err) != codes.Unavailable {
			t.Fatalf("draw %d on one connection: %v, want Unavailable (timed out)", i, err)
		}
	}
	db.SetMaxOpenConns(2)
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if resp, err := svc.ExecuteLuckyGiftDraw(cctx, drawReq("two", 1)); err != nil || resp.RejectReason != "" {
		t.Fatalf("draw on two connections: %v %v", resp, err)
	}
}
