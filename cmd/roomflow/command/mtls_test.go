package command

import (
	"bufio"
	"bytes"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hyapp/roomflow/internal/cli"
	"github.com/hyapp/roomflow/internal/testenv"
)

// The certificates are read by the serving commands at start: a missing or
// unreadable file, a key that does not match its certificate, names
// without a client CA, lucky.require_tls on an open listener stop them
// with exit 2 naming the key, before anything is dialled; `roomflow
// config` accepts a file whose certificates are not mounted yet.
func TestTLSKeysCheckedAtStart(t *testing.T) {
	p := testenv.NewPKI(t, "lucky.test", true)
	other := p.Issue(t, testenv.LeafOpts{Name: "other", Server: true})
	missing := filepath.Join(p.Dir, "missing.crt")
	unreadable := filepath.Join(p.Dir, "unreadable.crt")
	if err := os.WriteFile(unreadable, []byte("x"), 0o000); err != nil {
		t.Fatal(err)
	}
	unreachable := "mysql:\n  dsn: \"root@tcp(" + testenv.ClosedAddr(t) + ")/roomflow\"\nkafka:\n  brokers: [\"" + testenv.ClosedAddr(t) + "\"]\n"
	lucky := func(extra string) string {
		return unreachable + "api:\n  addr: \"\"\n  app_addr: \"\"\n  grpc_addr: \"\"\nlucky:\n  grpc_addr: \"127.0.0.1:0\"\n  audit_key: k\n" + extra
	}
	tlsBlock := func(cert, key, ca string, names ...string) string {
		s := "  tls:\n    cert_file: " + cert + "\n    key_file: " + key + "\n"
		if ca != "" {
			s += "    client_ca_file: " + ca + "\n"
		}
		if len(names) > 0 {
			s += "    allowed_client_names: [\"" + strings.Join(names, "\",\"") + "\"]\n"
		}
		return s
	}
	cases := []struct {
		name, config string
		args         []string
		code         int
		stderr       string
	}{
		{"missing cert_file", lucky(tlsBlock(missing, p.ServerKey, p.CAFile)), []string{"lucky"}, cli.ExitUsage, "lucky.tls.cert_file: cannot read"},
		{"missing client_ca_file", lucky(tlsBlock(p.ServerCert, p.ServerKey, missing)), []string{"lucky"}, cli.ExitUsage, "lucky.tls.client_ca_file: cannot read"},
		{"key of another certificate", lucky(tlsBlock(p.ServerCert, other.KeyFile, p.CAFile)), []string{"lucky"}, cli.ExitUsage, "lucky.tls.cert_file: " + p.ServerCert + " and key_file " + other.KeyFile + " are not a certificate and its key"},
		{"names without a client CA", lucky(tlsBlock(p.ServerCert, p.ServerKey, "", testenv.AllowedClient)), []string{"lucky"}, cli.ExitUsage, "lucky.tls.allowed_client_names: needs client_ca_file"},
		{"names without a client CA, config", lucky(tlsBlock(p.ServerCert, p.ServerKey, "", testenv.AllowedClient)), []string{"config"}, cli.ExitUsage, "lucky.tls.allowed_client_names: needs client_ca_file"},
		{"missing wallet CA", lucky("  wallet_tls:\n    ca_file: " + missing + "\n"), []string{"lucky"}, cli.ExitUsage, "lucky.wallet_tls.ca_file: cannot read"},
		{"wallet key without certificate", lucky("  wallet_tls:\n    key_file: " + p.ClientKey + "\n"), []string{"config"}, cli.ExitUsage, "lucky.wallet_tls.cert_file: must be set with key_file"},
		{"require_tls on an open listener", strings.Replace(lucky("  require_tls: true\n"), "127.0.0.1:0", ":0", 1), []string{"lucky"}, cli.ExitUsage, "lucky.require_tls: is true but lucky.grpc_addr \":0\" accepts callers from other hosts"},
		{"api.tls missing key", unreachable + "api:\n  addr: \"127.0.0.1:0\"\n" + tlsBlock(p.ServerCert, missing, p.CAFile), []string{"api"}, cli.ExitUsage, "api.tls.key_file: cannot read"},
		{"api.tls names without a client CA", unreachable + "api:\n" + tlsBlock(p.ServerCert, p.ServerKey, "", "x.test"), []string{"config"}, cli.ExitUsage, "api.tls.allowed_client_names: needs client_ca_file"},
		// Valid before the certificates are mounted.
		{"config before mounting", lucky(tlsBlock(missing, missing, missing, testenv.AllowedClient)) + "  wallet_tls:\n    ca_file: " + missing + "\n", []string{"config"}, 0, ""},
	}
	if os.Geteuid() != 0 { // root reads a 0000 file
		cases = append(cases, struct {
			name, config string
			args         []string
			code         int
			stderr       string
		}{"unreadable key_file", lucky(tlsBlock(p.ServerCert, unreadable, p.CAFile)), []string{"lucky"}, cli.ExitUsage, "lucky.tls.key_file: cannot read"})
	}
	keyPEM, err := os.ReadFile(p.ServerKey)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cmd := roomflowCmd(t, append([]string{"--config", testenv.WriteConfig(t, tc.config)}, tc.args...)...)
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			cmd.Stdout = io.Discard
			code := exitStatus(t, cmd.Run())
			if code != tc.code || !strings.Contains(stderr.String(), tc.stderr) {
				t.Fatalf("exit %d, want %d; stderr %q, want it to contain %q", code, tc.code, stderr.String(), tc.stderr)
			}
			if strings.Contains(stderr.String(), strings.Split(string(keyPEM), "\n")[1]) {
				t.Fatalf("stderr shows key material: %s", stderr.String())
			}
		})
	}
}

// roomflow lucky on a listener other hosts reach without a client CA
// starts, and WARNs naming the listener and the keys that close it.
func TestLuckyWarnsWhenOpen(t *testing.T) {
	m := testenv.NewMySQL(t)
	cfg := "mysql:\n  dsn: \"" + m.DSN + "\"\nlog:\n  format: text\nmetrics:\n  addr: \"\"\napi:\n  addr: \"\"\n  app_addr: \"\"\n  grpc_addr: \"\"\n" +
		"kafka:\n  brokers: [\"" + testenv.ClosedAddr(t) + "\"]\n" +
		"lucky:\n  grpc_addr: \":0\"\n  audit_key: k\n  wallet_grpc_addr: \"" + testenv.ClosedAddr(t) + "\"\n"
	cmd := roomflowCmd(t, "--config", testenv.WriteConfig(t, cfg), "lucky")
	errPipe, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	found := make(chan string, 1)
	var all strings.Builder
	go func() {
		sc := bufio.NewScanner(errPipe)
		sent := false
		for sc.Scan() {
			all.WriteString(sc.Text() + "\n")
			if !sent && strings.Contains(sc.Text(), "level=WARN") && strings.Contains(sc.Text(), "lucky.grpc_addr") {
				found <- sc.Text()
				sent = true
			}
		}
		close(found)
	}()
	var line string
	select {
	case line = <-found:
	case <-time.After(30 * time.Second):
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	for range found {
	}
	code := exitStatus(t, cmd.Wait())
	for _, want := range []string{"lucky.tls.cert_file", "lucky.tls.key_file", "lucky.tls.client_ca_file", "lucky.tls.allowed_client_names", "component=lucky"} {
		if !strings.Contains(line, want) {
			t.Fatalf("WARN line %q does not name %s; stderr:\n%s", line, want, all.String())
		}
	}
	if code != 0 {
		t.Fatalf("exit %d after SIGTERM; stderr:\n%s", code, all.String())
	}
}
