package tlsx_test

import (
	"context"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/hyapp/roomflow/internal/cfgerr"
	"github.com/hyapp/roomflow/internal/testenv"
	"github.com/hyapp/roomflow/internal/tlsx"
)

func serverConfig(p *testenv.PKI) tlsx.ServerConfig {
	return tlsx.ServerConfig{CertFile: p.ServerCert, KeyFile: p.ServerKey, ClientCAFile: p.CAFile,
		AllowedClientNames: []string{testenv.AllowedClient, "gateway.test"}}
}

func guard(t *testing.T, c tlsx.ServerConfig, listener string) (*tlsx.Guard, *prometheus.Registry) {
	t.Helper()
	srv, err := c.Load(nil)
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	return tlsx.NewGuard(tlsx.GuardConfig{Listener: listener, Addr: "127.0.0.1:0", TLSKey: "x.tls", Server: srv, Metrics: tlsx.NewMetrics(reg)}), reg
}

func refused(t *testing.T, reg prometheus.Gatherer, listener, reason string) float64 {
	t.Helper()
	v, ok := testenv.Metric(reg, "roomflow_rpc_refused_total", "listener", listener, "reason", reason)
	if !ok {
		t.Fatalf("no roomflow_rpc_refused_total{listener=%q,reason=%q}", listener, reason)
	}
	return v
}

// serveHealth serves the gRPC health service behind g on loopback.
func serveHealth(t *testing.T, g *tlsx.Guard) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(g.GRPCServerOptions()...)
	healthpb.RegisterHealthServer(srv, health.NewServer())
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(srv.Stop)
	return ln.Addr().String()
}

func healthCheck(addr string, tc *tls.Config) error {
	creds := insecure.NewCredentials()
	if tc != nil {
		creds = credentials.NewTLS(tc)
	}
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds))
	if err != nil {
		return err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	_, err = healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
	return err
}

// Every refused caller is refused on a gRPC and an HTTP listener and
// counted under its reason; the allowed one is served.
func TestGuardRefusesEveryCallerButTheAllowed(t *testing.T) {
	p := testenv.NewPKI(t, "listener.test", true)
	callers := p.Callers(t)

	g, reg := guard(t, serverConfig(p), "test.grpc_addr")
	addr := serveHealth(t, g)
	for _, c := range callers {
		before := 0.0
		if c.Refused != "" {
			before = refused(t, reg, "test.grpc_addr", c.Refused)
		}
		err := healthCheck(addr, c.TLS)
		switch {
		case c.Refused == "" && err != nil:
			t.Errorf("gRPC %s: refused: %v", c.Name, err)
		case c.Refused != "" && err == nil:
			t.Errorf("gRPC %s: served", c.Name)
		case c.Refused == tlsx.ReasonNameNotAllowed && status.Code(err) != codes.PermissionDenied:
			t.Errorf("gRPC %s: %v, want PermissionDenied", c.Name, err)
		}
		if c.Refused != "" {
			testenv.Eventually(t, 3*time.Second, "gRPC "+c.Name+" counted as "+c.Refused, func() bool {
				return refused(t, reg, "test.grpc_addr", c.Refused) > before
			})
		}
	}

	hg, hreg := guard(t, serverConfig(p), "test.addr")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := &http.Server{Handler: hg.Handler(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") }))}
	go func() { _ = hs.Serve(hg.Listener(ln)) }()
	t.Cleanup(func() { _ = hs.Close() })
	for _, c := range callers {
		scheme := "https"
		if c.TLS == nil {
			scheme = "http"
		}
		cl := &http.Client{Transport: &http.Transport{TLSClientConfig: c.TLS}, Timeout: 3 * time.Second}
		resp, err := cl.Get(scheme + "://" + ln.Addr().String() + "/x")
		code := 0
		if err == nil {
			code = resp.StatusCode
			resp.Body.Close()
		}
		want := map[string]int{"": 200, tlsx.ReasonPlaintext: 400, tlsx.ReasonNameNotAllowed: 403}[c.Refused]
		if code != want {
			t.Errorf("HTTP %s: status %d (err %v), want %d (0: handshake refused)", c.Name, code, err, want)
		}
		if c.Refused != "" {
			testenv.Eventually(t, 3*time.Second, "HTTP "+c.Name+" counted as "+c.Refused, func() bool {
				return refused(t, hreg, "test.addr", c.Refused) == 1
			})
		}
	}
}

// A listener's certificate is re-read when its files change: a new
// connection after the swap sees the new certificate, without a restart;
// a half-written rotation keeps the old one.
func TestServerCertificateRotation(t *testing.T) {
	p := testenv.NewPKI(t, "listener.test", true)
	c := serverConfig(p)
	c.AllowedClientNames = nil
	srv, err := c.Load(nil)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := tls.NewListener(ln, srv.TLSConfig())
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			conn, err := l.Accept()
			if err != nil {
				return
			}
			go func() { _ = conn.(*tls.Conn).Handshake(); conn.Close() }()
		}
	}()
	client := p.Issue(t, testenv.LeafOpts{Name: "c"})
	serial := func() string {
		t.Helper()
		conn, err := tls.Dial("tcp", ln.Addr().String(), p.ClientTLS(&client))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		return conn.ConnectionState().PeerCertificates[0].SerialNumber.String()
	}
	first := serial()
	rotated := p.Issue(t, testenv.LeafOpts{Name: "listener.test", IPs: []net.IP{net.IPv4(127, 0, 0, 1)}, Server: true, File: "server"})
	if got := serial(); got != rotated.X509.SerialNumber.String() || got == first {
		t.Fatalf("after rotation the listener presents serial %s, want the new %s (old %s)", got, rotated.X509.SerialNumber, first)
	}
	// Half a rotation: a new certificate whose key is not yet written.
	other := p.Issue(t, testenv.LeafOpts{Name: "x", Server: true})
	raw, err := os.ReadFile(other.CertFile)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p.ServerCert, raw, 0o600); err != nil {
		t.Fatal(err)
	}
	if got := serial(); got != rotated.X509.SerialNumber.String() {
		t.Fatalf("a mismatched pair must keep the previous certificate: serial %s, want %s", got, rotated.X509.SerialNumber)
	}
}

// The client side re-reads its certificate too (ClientFiles.Reload).
func TestClientCertificateRotation(t *testing.T) {
	p := testenv.NewPKI(t, "listener.test", true)
	first := p.Issue(t, testenv.LeafOpts{Name: "c1", File: "client"})
	tc, err := tlsx.ClientFiles{CAFile: p.CAFile, CertFile: first.CertFile, KeyFile: first.KeyFile, Reload: true}.Load()
	if err != nil {
		t.Fatal(err)
	}
	seen := make(chan string, 4)
	ln, err := tls.Listen("tcp", "127.0.0.1:0", p.ServerTLS(true))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			tconn := conn.(*tls.Conn)
			if tconn.Handshake() == nil {
				seen <- tconn.ConnectionState().PeerCertificates[0].Subject.CommonName
			}
			conn.Close()
		}
	}()
	dial := func() string {
		t.Helper()
		conn, err := tls.Dial("tcp", ln.Addr().String(), tc)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		if err := conn.Handshake(); err != nil {
			t.Fatal(err)
		}
		return <-seen
	}
	if got := dial(); got != "c1" {
		t.Fatalf("client presented %q, want c1", got)
	}
	p.Issue(t, testenv.LeafOpts{Name: "c2", File: "client"})
	if got := dial(); got != "c2" {
		t.Fatalf("after rotation the client presented %q, want c2", got)
	}
}

// Bad input names the field; nothing needs a file for Validate.
func TestServerConfigErrorsNameTheKey(t *testing.T) {
	p := testenv.NewPKI(t, "listener.test", true)
	missing := filepath.Join(p.Dir, "missing.pem")
	unreadable := filepath.Join(p.Dir, "unreadable.pem")
	if err := os.WriteFile(unreadable, []byte("x"), 0o000); err != nil {
		t.Fatal(err)
	}
	other := p.Issue(t, testenv.LeafOpts{Name: "other"})
	keyPEM, err := os.ReadFile(p.ServerKey)
	if err != nil {
		t.Fatal(err)
	}
	ok := serverConfig(p)
	for _, tc := range []struct {
		key, want string
		mod       func(*tlsx.ServerConfig)
	}{
		{"cert_file", "no such file", func(c *tlsx.ServerConfig) { c.CertFile = missing }},
		{"key_file", "no such file", func(c *tlsx.ServerConfig) { c.KeyFile = missing }},
		{"client_ca_file", "no such file", func(c *tlsx.ServerConfig) { c.ClientCAFile = missing }},
		{"client_ca_file", "holds no PEM certificate", func(c *tlsx.ServerConfig) { c.ClientCAFile = p.ServerKey }},
		{"cert_file", "are not a certificate and its key", func(c *tlsx.ServerConfig) { c.KeyFile = other.KeyFile }},
		{"allowed_client_names", "needs client_ca_file", func(c *tlsx.ServerConfig) { c.ClientCAFile = "" }},
		{"allowed_client_names", "is empty", func(c *tlsx.ServerConfig) { c.AllowedClientNames = []string{""} }},
		{"cert_file", "must be set", func(c *tlsx.ServerConfig) { c.CertFile = "" }},
		{"key_file", "must be set", func(c *tlsx.ServerConfig) { c.KeyFile = "" }},
	} {
		c := ok
		tc.mod(&c)
		_, err := c.Load(nil)
		if err == nil || !slices.Contains(cfgerr.Keys(err), tc.key) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s ...%s...: got %v", tc.key, tc.want, err)
		}
		if err != nil && strings.Contains(err.Error(), strings.Split(string(keyPEM), "\n")[1]) {
			t.Errorf("the error shows key material: %v", err)
		}
	}
	if os.Geteuid() != 0 { // root reads a 0000 file
		c := ok
		c.CertFile = unreadable
		if _, err := c.Load(nil); err == nil || !strings.Contains(err.Error(), "permission denied") {
			t.Errorf("unreadable cert_file: %v", err)
		}
	}
	if srv, err := (tlsx.ServerConfig{}).Load(nil); srv != nil || err != nil {
		t.Fatalf("the zero config is plaintext: %v %v", srv, err)
	}
}

func TestInsecure(t *testing.T) {
	ca := tlsx.ServerConfig{ClientCAFile: "ca.crt"}
	for _, tc := range []struct {
		addr string
		c    tlsx.ServerConfig
		want bool
	}{
		{":13006", tlsx.ServerConfig{}, true},
		{"0.0.0.0:13006", tlsx.ServerConfig{CertFile: "a", KeyFile: "b"}, true},
		{"[::]:1", tlsx.ServerConfig{}, true},
		{"10.0.0.1:1", tlsx.ServerConfig{}, true},
		{":13006", ca, false},
		{"127.0.0.1:13006", tlsx.ServerConfig{}, false},
		{"localhost:1", tlsx.ServerConfig{}, false},
		{"[::1]:1", tlsx.ServerConfig{}, false},
		{"", tlsx.ServerConfig{}, false},
	} {
		if got := tlsx.Insecure(tc.addr, tc.c); got != tc.want {
			t.Errorf("Insecure(%q, %+v) = %v", tc.addr, tc.c, got)
		}
	}
}

// A guard on an address other hosts reach without a client CA exports
// roomflow_rpc_insecure 1 and every refusal series at 0; with a client CA
// the gauge is 0.
func TestGuardInsecureGauge(t *testing.T) {
	p := testenv.NewPKI(t, "listener.test", true)
	reg := prometheus.NewRegistry()
	m := tlsx.NewMetrics(reg)
	open := tlsx.NewGuard(tlsx.GuardConfig{Listener: "open", Addr: "[::]:13006", TLSKey: "x.tls", Metrics: m})
	srv, err := serverConfig(p).Load(nil)
	if err != nil {
		t.Fatal(err)
	}
	closed := tlsx.NewGuard(tlsx.GuardConfig{Listener: "closed", Addr: "[::]:13006", TLSKey: "x.tls", Server: srv, Metrics: m})
	if !open.Insecure() || closed.Insecure() {
		t.Fatalf("Insecure: open %v, closed %v", open.Insecure(), closed.Insecure())
	}
	for l, want := range map[string]float64{"open": 1, "closed": 0} {
		if v, ok := testenv.Metric(reg, "roomflow_rpc_insecure", "listener", l); !ok || v != want {
			t.Errorf("roomflow_rpc_insecure{listener=%q} = %v (%v), want %v", l, v, ok, want)
		}
		for _, r := range tlsx.Reasons {
			if v, ok := testenv.Metric(reg, "roomflow_rpc_refused_total", "listener", l, "reason", r); !ok || v != 0 {
				t.Errorf("roomflow_rpc_refused_total{listener=%q,reason=%q} = %v (%v), want a 0 series", l, r, v, ok)
			}
		}
	}
}
