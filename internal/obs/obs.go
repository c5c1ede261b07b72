// Package obs is roomflow's shared observability: slog JSON logs, one
// Prometheus registry with Go/process collectors, and the HTTP server for
// /metrics, /healthz and /readyz that every long-running command serves.
package obs

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/hyapp/roomflow/internal/buildinfo"
)

// NewRegistry returns a registry with the Go runtime and process collectors
// and roomflow_build_info. Components register their roomflow_* metrics on
// it; tests use a fresh one.
func NewRegistry() *prometheus.Registry {
	r := prometheus.NewRegistry()
	r.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), buildinfo.Collector())
	return r
}

// Health tracks liveness and readiness. A component is ready when every
// check registered with AddReadiness passes and the process is not
// draining; /healthz only says the process serves HTTP.
type Health struct {
	mu       sync.Mutex
	checks   map[string]func() error
	draining bool
}

// ErrDraining is the readiness error of a process that is shutting down.
var ErrDraining = errors.New("draining: shutting down")

// SetDraining marks the process as shutting down: from now on Ready fails
// (so /readyz answers 503), whatever the checks say. It is never undone.
func (h *Health) SetDraining() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.draining = true
}

// NewHealth returns a Health with no checks (ready).
func NewHealth() *Health { return &Health{checks: map[string]func() error{}} }

// AddReadiness registers or replaces a named readiness check.
func (h *Health) AddReadiness(name string, check func() error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.checks[name] = check
}

// Ready runs every check and joins the failures, led by ErrDraining once
// SetDraining was called.
func (h *Health) Ready() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	var errs []error
	if h.draining {
		errs = append(errs, ErrDraining)
	}
	for name, c := range h.checks {
		if err := c(); err != nil {
			errs = append(errs, errors.New(name+": "+err.Error()))
		}
	}
	return errors.Join(errs...)
}

// Handler serves /metrics, /healthz and /readyz.
func Handler(reg *prometheus.Registry, h *Health) *http.ServeMux {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, "ok\n")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		if err := h.Ready(); err != nil {
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = io.WriteString(w, err.Error()+"\n")
			return
		}
		_, _ = io.WriteString(w, "ready\n")
	})
	return mux
}

// Server is an HTTP server started on a listener and stopped by Shutdown.
type Server struct {
	srv *http.Server
	ln  net.Listener
	err chan error
}

// The timeouts of every roomflow HTTP server (metrics, health, the stats
// API): 5s to send the headers; a keep-alive connection idle for two
// minutes is closed (Go's default keeps it until the client goes, so
// clients that vanish without a FIN pile up connections). Two minutes
// outlast the usual client and proxy idle timeouts (60-90s): the client
// closes first rather than the server racing a reuse. Variables for tests.
var (
	readHeaderTimeout = 5 * time.Second
	idleTimeout       = 2 * time.Minute
)

// Serve listens on addr and serves h in the background. Addr ":0" picks a
// free port (see Addr).
func Serve(addr string, h http.Handler) (*Server, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	return ServeListener(ln, h), nil
}

// ServeListener serves h on ln in the background (a listener the caller
// bound or wrapped, a TLS one included).
func ServeListener(ln net.Listener, h http.Handler) *Server {
	srv := &http.Server{Handler: h, ReadHeaderTimeout: readHeaderTimeout, IdleTimeout: idleTimeout}
	s := &Server{srv: srv, ln: ln, err: make(chan error, 1)}
	go func() { s.err <- s.srv.Serve(ln) }()
	return s
}

// Addr is the bound address.
func (s *Server) Addr() string { return s.ln.Addr().String() }

// Shutdown stops accepting and waits for in-flight requests until ctx ends.
func (s *Server) Shutdown(ctx context.Context) error {
	err := s.srv.Shutdown(ctx)
	if serr := <-s.err; serr != nil && !errors.Is(serr, http.ErrServerClosed) {
		return serr
	}
	return err
}
