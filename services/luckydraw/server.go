package luckydraw

import (
	"context"
	"database/sql"
	"net"
	"os"
	"time"

	"github.com/hyapp/roomflow/internal/app"
	"github.com/hyapp/roomflow/services/luckydraw/luckyoutbox"
	"github.com/hyapp/roomflow/services/luckydraw/wallet"
)

// ServerConfig is what NewServer assembles the draw service from: the
// service's, its reward outbox worker's and its wallet client's configs
// (validated; NewServer sets the worker's WorkerID and DispatchEnabled and
// the service's Dispatcher) and the replica's name (--instance-id; "":
// the host name) for lucky_pool_owner and the worker id.
type ServerConfig struct {
	Draw     Config
	Outbox   luckyoutbox.Config
	Wallet   wallet.Config
	Instance string
}

// Server is the draw service as `roomflow lucky` runs it: the gRPC
// service and its lucky_outbox worker (the draws' synchronous dispatcher
// too) over one wallet client.
type Server struct {
	svc    *Service
	worker *luckyoutbox.Worker
	wallet *wallet.Client
}

// NewServer records that the draw service owns lucky_pools, retires the
// rule statuses that no longer draw (so `rules show` and the statuses
// agree), builds the wallet client, the worker and the service, and warns
// when pilot mode is on with no pilot room. Neither the wallet nor Kafka
// is dialled, so it serves while either is down. On an error nothing is
// left open; else Run, or Close when it will not run, releases the
// worker's Kafka client and the wallet's connection.
func NewServer(ctx context.Context, db *sql.DB, c ServerConfig) (*Server, error) {
	if c.Instance == "" {
		c.Instance, _ = os.Hostname()
	}
	if err := RecordOwnership(ctx, db, c.Instance, time.Now()); err != nil {
		return nil, err
	}
	admin, err := NewAdmin(db, AdminConfig{Operator: "roomflow lucky", Host: c.Instance,
		ReplacedVersionGrace: c.Draw.ReplacedVersionGrace, Logger: c.Draw.Logger})
	if err != nil {
		return nil, err
	}
	if _, err := admin.TidyRuleStatuses(ctx); err != nil {
		return nil, err
	}
	s := &Server{}
	if s.wallet, err = wallet.New(c.Wallet); err != nil {
		return nil, err
	}
	c.Outbox.WorkerID = luckyoutbox.WorkerID(c.Instance)
	c.Outbox.DispatchEnabled = func(ctx context.Context, app string) (bool, error) { return s.svc.DispatchEnabled(ctx, app) }
	if s.worker, err = luckyoutbox.New(c.Outbox, db, s.wallet); err != nil {
		s.wallet.Close()
		return nil, err
	}
	c.Draw.Dispatcher = s.worker
	if s.svc, err = New(c.Draw, db); err == nil {
		err = s.svc.WarnEmptyPilot(ctx)
	}
	if err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// Close releases the worker's Kafka client and the wallet's connection of
// a server that will not run.
func (s *Server) Close() {
	s.worker.Close(context.Background())
	s.wallet.Close()
}

// Run serves the service on ln and runs the worker and the fairness
// writer until ctx ends, the first failure stopping all; the worker and
// the wallet are closed once both the worker and the service (its last
// draw batches and their synchronous credits) have returned.
func (s *Server) Run(ctx context.Context, ln net.Listener) error {
	served := make(chan struct{})
	serve := app.ComponentFunc(func(ctx context.Context) error {
		defer close(served)
		return s.svc.Serve(ctx, ln)
	})
	work := app.ComponentFunc(func(ctx context.Context) error {
		defer s.wallet.Close()
		defer s.worker.Close(context.Background())
		defer func() { <-served }()
		return s.worker.Run(ctx)
	})
	return app.Together(serve, work, app.ComponentFunc(s.svc.RunFairness)).Run(ctx)
}
