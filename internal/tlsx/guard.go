package tlsx

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/hyapp/roomflow/internal/promreg"
)

// Refusal reasons, the reason label of roomflow_rpc_refused_total.
const (
	// ReasonPlaintext: the caller did not speak TLS to a TLS listener.
	ReasonPlaintext = "plaintext"
	// ReasonNoClientCert: a TLS caller presented no certificate where one
	// is required.
	ReasonNoClientCert = "no_client_cert"
	// ReasonUntrustedCert: the caller's certificate does not chain to
	// client_ca_file (another CA, expired, not for client auth).
	ReasonUntrustedCert = "untrusted_client_cert"
	// ReasonNameNotAllowed: a verified certificate none of whose DNS or
	// URI SANs is in allowed_client_names.
	ReasonNameNotAllowed = "name_not_allowed"
	// ReasonHandshake: any other failed handshake (a caller that does not
	// trust our certificate, a protocol version below 1.2, a timeout).
	ReasonHandshake = "handshake"
)

// Reasons lists every reason, in a stable order.
var Reasons = []string{ReasonPlaintext, ReasonNoClientCert, ReasonUntrustedCert, ReasonNameNotAllowed, ReasonHandshake}

// Metrics are the listeners' refusal counter and insecure gauge, shared by
// every Guard of a registry.
type Metrics struct {
	refused  *prometheus.CounterVec
	insecure *prometheus.GaugeVec
}

// NewMetrics registers roomflow_rpc_refused_total{listener,reason} and
// roomflow_rpc_insecure{listener} on reg (nil: unregistered).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	return &Metrics{
		refused: promreg.Register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{Name: "roomflow_rpc_refused_total",
			Help: "Connections and calls an RPC listener refused, by listener (its config key) and reason: plaintext, no_client_cert, untrusted_client_cert, name_not_allowed, handshake."},
			[]string{"listener", "reason"})),
		insecure: promreg.Register(reg, prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "roomflow_rpc_insecure",
			Help: "1 when an RPC listener accepts callers from other hosts without a client certificate (not loopback, no client_ca_file), else 0."},
			[]string{"listener"})),
	}
}

// GuardConfig is one listener's gate.
type GuardConfig struct {
	// Listener names it in metrics and logs: its address key
	// (lucky.grpc_addr, api.addr).
	Listener string
	// Addr is the configured address (Insecure checks it).
	Addr string
	// TLSKey is its TLS block's key (lucky.tls, api.tls), for the WARN.
	TLSKey string
	// Server is the TLS material; nil serves plaintext.
	Server *Server
	// Metrics get the refusals and the insecure gauge (nil: none).
	Metrics *Metrics
	// Logger gets the refusals and the insecure WARN, with the
	// component of the listener's owner (nil: slog.Default(), component
	// tlsx).
	Logger *slog.Logger
}

// Guard admits or refuses a listener's callers: the TLS handshake (no
// certificate, another CA, plaintext) and, per call, the names of the
// caller's certificate. Every refusal is counted and logged (rate
// limited; names and addresses only, never key material). A Guard with a
// nil Server serves plaintext and refuses nothing.
type Guard struct {
	cfg      GuardConfig
	log      *slog.Logger
	refused  map[string]prometheus.Counter
	insecure bool

	mu      sync.Mutex
	lastLog map[string]time.Time
	dropped map[string]int
}

// NewGuard returns the gate of one listener, sets its
// roomflow_rpc_insecure series and logs the WARN when Insecure.
func NewGuard(c GuardConfig) *Guard {
	if c.Logger == nil {
		c.Logger = slog.Default().With("component", "tlsx")
	}
	g := &Guard{cfg: c, log: c.Logger.With("listener", c.Listener), refused: map[string]prometheus.Counter{},
		lastLog: map[string]time.Time{}, dropped: map[string]int{}}
	g.insecure = !IsLoopback(c.Addr) && !c.Server.RequiresClientCert()
	if c.Metrics != nil {
		for _, r := range Reasons {
			g.refused[r] = c.Metrics.refused.WithLabelValues(c.Listener, r)
		}
		v := 0.0
		if g.insecure {
			v = 1
		}
		c.Metrics.insecure.WithLabelValues(c.Listener).Set(v)
	}
	if g.insecure {
		g.log.Warn(InsecureWarning(c.Listener, c.Addr, c.TLSKey), "addr", c.Addr)
	}
	return g
}

// Insecure reports what roomflow_rpc_insecure says.
func (g *Guard) Insecure() bool { return g.insecure }

// refuse counts and logs one refusal.
func (g *Guard) refuse(reason, remote string, names []string, err error) {
	if c := g.refused[reason]; c != nil {
		c.Inc()
	}
	// At most one line per reason and second: a scan of the port must not
	// flood the logs; the count says how many were not logged.
	now := time.Now()
	g.mu.Lock()
	if now.Sub(g.lastLog[reason]) < time.Second {
		g.dropped[reason]++
		g.mu.Unlock()
		return
	}
	g.lastLog[reason] = now
	dropped := g.dropped[reason]
	g.dropped[reason] = 0
	g.mu.Unlock()
	attrs := []any{"reason", reason, "remote", remote}
	if names != nil {
		attrs = append(attrs, "client_names", names)
	}
	if err != nil {
		attrs = append(attrs, "error", err.Error())
	}
	if dropped > 0 {
		attrs = append(attrs, "not_logged_since_last", dropped)
	}
	g.log.Warn("caller refused", attrs...)
}

// HandshakeReason classifies a server-side handshake failure.
func HandshakeReason(err error) string {
	var rh tls.RecordHeaderError
	var ve *tls.CertificateVerificationError
	switch {
	case errors.As(err, &rh):
		return ReasonPlaintext
	case errors.As(err, &ve):
		return ReasonUntrustedCert
	case strings.Contains(err.Error(), "client didn't provide a certificate"):
		return ReasonNoClientCert
	}
	return ReasonHandshake
}

// GRPCServerOptions are the options of a grpc.NewServer behind g: the TLS
// credentials (handshake refusals counted) and the interceptors that
// refuse a certificate whose names are not allowed with PermissionDenied.
// None for plaintext.
func (g *Guard) GRPCServerOptions() []grpc.ServerOption {
	if g.cfg.Server == nil {
		return nil
	}
	opts := []grpc.ServerOption{grpc.Creds(countingCreds{TransportCredentials: credentials.NewTLS(g.cfg.Server.TLSConfig()), g: g})}
	if g.cfg.Server.ChecksNames() {
		opts = append(opts, grpc.ChainUnaryInterceptor(g.unary), grpc.ChainStreamInterceptor(g.stream))
	}
	return opts
}

type countingCreds struct {
	credentials.TransportCredentials
	g *Guard
}

func (c countingCreds) ServerHandshake(conn net.Conn) (net.Conn, credentials.AuthInfo, error) {
	out, info, err := c.TransportCredentials.ServerHandshake(conn)
	if err != nil {
		c.g.refuse(HandshakeReason(err), conn.RemoteAddr().String(), nil, err)
	}
	return out, info, err
}

func (c countingCreds) Clone() credentials.TransportCredentials {
	return countingCreds{TransportCredentials: c.TransportCredentials.Clone(), g: c.g}
}

// authorize is the per-call name check of a gRPC caller.
func (g *Guard) authorize(ctx context.Context, method string) error {
	p, _ := peer.FromContext(ctx)
	var cs *tls.ConnectionState
	remote := ""
	if p != nil {
		if ti, ok := p.AuthInfo.(credentials.TLSInfo); ok {
			cs = &ti.State
		}
		if p.Addr != nil {
			remote = p.Addr.String()
		}
	}
	ok, names := g.cfg.Server.allowedPeer(cs)
	if ok {
		return nil
	}
	g.refuse(ReasonNameNotAllowed, remote, names, errors.New(method))
	return status.Error(codes.PermissionDenied, "client certificate names are not allowed on this listener")
}

func (g *Guard) unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	if err := g.authorize(ctx, info.FullMethod); err != nil {
		return nil, err
	}
	return h(ctx, req)
}

func (g *Guard) stream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
	if err := g.authorize(ss.Context(), info.FullMethod); err != nil {
		return err
	}
	return h(srv, ss)
}

// Handler wraps h with the name check: a caller whose certificate names
// are not allowed gets 403 and a JSON error. h itself for plaintext or
// without names.
func (g *Guard) Handler(h http.Handler) http.Handler {
	if !g.cfg.Server.ChecksNames() {
		return h
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if ok, names := g.cfg.Server.allowedPeer(r.TLS); !ok {
			g.refuse(ReasonNameNotAllowed, r.RemoteAddr, names, errors.New(r.Method+" "+r.URL.Path))
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusForbidden)
			_, _ = w.Write([]byte(`{"error":{"code":"forbidden","message":"client certificate names are not allowed on this listener"}}` + "\n"))
			return
		}
		h.ServeHTTP(w, r)
	})
}

// HandshakeTimeout bounds a TLS handshake on an HTTP listener.
const HandshakeTimeout = 10 * time.Second

// Listener returns ln serving TLS: each accepted connection completes its
// handshake in its own goroutine before Accept returns it (a
// *tls.Conn, so net/http fills Request.TLS), and a failed handshake is
// counted and logged with its reason. A plaintext HTTP request gets a 400
// saying so. ln itself for plaintext.
func (g *Guard) Listener(ln net.Listener) net.Listener {
	if g.cfg.Server == nil {
		return ln
	}
	l := &handshakeListener{Listener: ln, g: g, cfg: g.cfg.Server.TLSConfig(), conns: make(chan net.Conn),
		done: make(chan struct{}), failed: make(chan struct{})}
	go l.acceptLoop()
	return l
}

type handshakeListener struct {
	net.Listener
	g      *Guard
	cfg    *tls.Config
	conns  chan net.Conn
	done   chan struct{} // closed by Close
	once   sync.Once
	failed chan struct{} // closed when the inner Accept failed: err
	err    error
}

func (l *handshakeListener) acceptLoop() {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			l.err = err
			close(l.failed)
			return
		}
		go l.handshake(c)
	}
}

func (l *handshakeListener) handshake(c net.Conn) {
	tc := tls.Server(c, l.cfg)
	ctx, cancel := context.WithTimeout(context.Background(), HandshakeTimeout)
	err := tc.HandshakeContext(ctx)
	cancel()
	if err != nil {
		reason := HandshakeReason(err)
		var rh tls.RecordHeaderError
		if errors.As(err, &rh) && rh.Conn != nil && looksLikeHTTP(rh.RecordHeader[:]) {
			_ = rh.Conn.SetWriteDeadline(time.Now().Add(time.Second))
			_, _ = io.WriteString(rh.Conn, "HTTP/1.0 400 Bad Request\r\n\r\nClient sent an HTTP request to an HTTPS server.\n")
		}
		l.g.refuse(reason, c.RemoteAddr().String(), nil, err)
		_ = c.Close()
		return
	}
	select {
	case l.conns <- tc:
	case <-l.done:
		_ = tc.Close()
	}
}

func looksLikeHTTP(hdr []byte) bool {
	switch string(hdr) {
	case "GET /", "HEAD ", "POST ", "PUT /", "OPTIO", "DELET", "PATCH":
		return true
	}
	return false
}

func (l *handshakeListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	case <-l.failed:
		return nil, l.err
	}
}

func (l *handshakeListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return l.Listener.Close()
}
