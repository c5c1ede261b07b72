package statsapi

import (
	"context"
	"errors"
	"net"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/hyapp/roomflow/internal/mysqlerr"
	"github.com/hyapp/roomflow/schemas/activityv1"
	"github.com/hyapp/roomflow/schemas/userv1"
)

// UserService is MIC-12's hyapp.user.v1.UserService over the stats
// store: GetUserMicLifetimeStats reads user_mic_lifetime_stats.
type UserService struct {
	userv1.UnimplementedUserServiceServer
	api *API
}

// UserService returns the gRPC service of a (same store, default app_code,
// query timeout and logger).
func (a *API) UserService() *UserService { return &UserService{api: a} }

// GetUserMicLifetimeStats answers the user's lifetime totals: zeros for a
// user without a row, INVALID_ARGUMENT for user_id <= 0 or an app_code over
// 32 bytes (an empty or absent meta.app_code is the configured default),
// UNAVAILABLE when the database cannot be reached (a lost or refused
// connection: worth a retry), INTERNAL with a generic message when it
// fails otherwise.
func (s *UserService) GetUserMicLifetimeStats(ctx context.Context, req *userv1.GetUserMicLifetimeStatsRequest) (*userv1.GetUserMicLifetimeStatsResponse, error) {
	if req.GetUserId() <= 0 {
		return nil, status.Error(codes.InvalidArgument, "user_id must be a positive integer")
	}
	app, err := s.api.appCode(req.GetMeta().GetAppCode())
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, "meta.app_code: "+err.Error())
	}
	ctx, cancel := context.WithTimeout(ctx, s.api.timeout)
	defer cancel()
	lt, err := s.api.store.Lifetime(ctx, app, req.GetUserId())
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return nil, status.FromContextError(err).Err() // the caller's or the query's time ran out; nothing failed
	}
	if err != nil {
		attrs := []any{"rpc", "GetUserMicLifetimeStats", "app_code", app, "user_id", req.GetUserId(),
			"request_id", req.GetMeta().GetRequestId(), "caller", req.GetMeta().GetCaller(), "error", err}
		if mysqlerr.Retryable(err) { // a lost or refused connection: the caller's retry may find it back
			s.api.log.Warn("lifetime stats query: database unavailable", attrs...)
			return nil, status.Error(codes.Unavailable, "database unavailable")
		}
		s.api.log.Error("lifetime stats query failed", attrs...)
		return nil, status.Error(codes.Internal, "internal error")
	}
	return &userv1.GetUserMicLifetimeStatsResponse{Stats: &userv1.UserMicLifetimeStats{
		UserId: req.GetUserId(), SeatOccupiedMs: lt.SeatOccupiedMs, MicOnlineMs: lt.MicOnlineMs,
		SessionCount: lt.SessionCount, FirstMicAtMs: lt.FirstMicAtMs, LastMicAtMs: lt.LastMicAtMs,
		UpdatedAtMs: lt.UpdatedAtMs, AppCode: app,
	}}, nil
}

// grpcServer is a running gRPC server on its own listener.
type grpcServer struct {
	srv  *grpc.Server
	ln   net.Listener
	done chan error
}

// serveGRPC binds addr and serves UserService and LuckyFairnessService in
// the background; requests
// are counted in the API's metrics under route "grpc:<method>" with the
// gRPC code name.
func (a *API) serveGRPC(addr string) (*grpcServer, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	gd := a.guard("api.grpc_addr", ln)
	srv := grpc.NewServer(append(gd.GRPCServerOptions(), grpc.ChainUnaryInterceptor(a.observeRPC))...)
	userv1.RegisterUserServiceServer(srv, a.UserService())
	activityv1.RegisterLuckyFairnessServiceServer(srv, a.FairnessService())
	g := &grpcServer{srv: srv, ln: ln, done: make(chan error, 1)}
	go func() { g.done <- srv.Serve(ln) }()
	return g, nil
}

// Addr is the bound address.
func (g *grpcServer) Addr() string { return g.ln.Addr().String() }

// Stop lets in-flight RPCs finish until ctx ends, then cancels them.
func (g *grpcServer) Stop(ctx context.Context) error {
	stopped := make(chan struct{})
	go func() { g.srv.GracefulStop(); close(stopped) }()
	select {
	case <-stopped:
	case <-ctx.Done():
		g.srv.Stop()
		<-stopped
	}
	if err := <-g.done; err != nil && !errors.Is(err, grpc.ErrServerStopped) {
		return err
	}
	return nil
}

func (a *API) observeRPC(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	t0 := time.Now()
	resp, err := h(ctx, req)
	route := "grpc:" + info.FullMethod
	code := status.Code(err)
	a.m.Requests.WithLabelValues(route, code.String()).Inc()
	a.m.Duration.WithLabelValues(route).Observe(time.Since(t0).Seconds())
	if code == codes.InvalidArgument {
		a.log.Debug("rpc refused", "rpc", info.FullMethod, "error", err)
	}
	return resp, err
}
