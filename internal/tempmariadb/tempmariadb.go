// Package tempmariadb starts a throwaway MariaDB server for tests and
// benchmarks: mariadb-install-db and mariadbd on a free loopback port with
// the data in a temporary directory, removed when the server stops.
//
// The shared development server (127.0.0.1:3306) has no binary log and a
// default buffer pool; tests that need the row binlog (the relay's binlog
// mode) or a server of their own (a benchmark's buffer pool) start one
// here. Unlike `--skip-grant-tables`, the server keeps its grant tables, so
// privilege checks behave as in production: root has no password and may
// connect from the loopback only; create less privileged users with GRANT.
//
// Starting takes about a second; the binaries must be on PATH or in
// /usr/sbin (Debian's mariadb-server package).
package tempmariadb

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	_ "github.com/go-sql-driver/mysql" // the "mysql" driver of the readiness ping
)

// Options configure a throwaway server; the zero value is a server with
// MariaDB's defaults and no binary log.
type Options struct {
	// Binlog turns the row binary log on, as the relay's binlog mode
	// needs it: log_bin, binlog_format=ROW, binlog_row_image=FULL,
	// binlog_row_metadata=FULL, gtid_strict_mode off, server_id ServerID.
	Binlog bool
	// ServerID is the server's server_id; default 1.
	ServerID uint32
	// BufferPool is innodb_buffer_pool_size (such as "2G"); empty:
	// MariaDB's default.
	BufferPool string
	// Args are further mariadbd options ("--innodb-log-file-size=1G"),
	// applied last.
	Args []string
	// ReadyTimeout bounds waiting for the server to answer; default 30s.
	ReadyTimeout time.Duration
}

// Server is a running throwaway mariadbd.
type Server struct {
	// DSN is root's go-sql-driver DSN without a database,
	// "root@tcp(127.0.0.1:<port>)/".
	DSN  string
	Port int
	// Dir is the temporary directory holding data, socket and server.log.
	Dir string

	cmd  *exec.Cmd
	logf *os.File
	done chan struct{}
}

// ErrNotInstalled is returned when mariadb-install-db or mariadbd is not
// found.
var ErrNotInstalled = errors.New("tempmariadb: mariadb-install-db and mariadbd are required (apt-get install mariadb-server)")

// binary finds name on PATH or in /usr/sbin, where Debian puts mariadbd
// outside a non-root PATH.
func binary(name string) (string, error) {
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	p := filepath.Join("/usr/sbin", name)
	if _, err := os.Stat(p); err != nil {
		return "", fmt.Errorf("%w: %s not found", ErrNotInstalled, name)
	}
	return p, nil
}

// Start installs a fresh data directory and starts mariadbd on a free
// loopback port, returning once it answers. It fails when a binary is
// missing (ErrNotInstalled), the install or the server fails (the error
// carries the end of server.log), or the server does not answer within
// ReadyTimeout. Stop it with Stop.
func Start(ctx context.Context, o Options) (*Server, error) {
	install, err := binary("mariadb-install-db")
	if err != nil {
		return nil, err
	}
	mariadbd, err := binary("mariadbd")
	if err != nil {
		return nil, err
	}
	if o.ServerID == 0 {
		o.ServerID = 1
	}
	if o.ReadyTimeout <= 0 {
		o.ReadyTimeout = 30 * time.Second
	}
	dir, err := os.MkdirTemp("", "roomflow-mariadb-")
	if err != nil {
		return nil, err
	}
	data := filepath.Join(dir, "data")
	inst := exec.CommandContext(ctx, install, "--no-defaults", "--datadir="+data,
		"--auth-root-authentication-method=normal", "--user=root", "--skip-test-db", "--skip-name-resolve")
	if out, err := installAlone(inst); err != nil {
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("tempmariadb: mariadb-install-db: %v: %s", err, tail(out))
	}
	port, err := freePort()
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	args := []string{"--no-defaults", "--datadir=" + data, "--socket=" + filepath.Join(dir, "sock"),
		"--port=" + strconv.Itoa(port), "--bind-address=127.0.0.1", "--user=root", "--skip-name-resolve",
		"--max-connections=200", "--server-id=" + strconv.FormatUint(uint64(o.ServerID), 10)}
	if o.Binlog {
		args = append(args, "--log-bin="+filepath.Join(dir, "data", "binlog"), "--binlog-format=ROW",
			"--binlog-row-image=FULL", "--binlog-row-metadata=FULL", "--gtid-strict-mode=OFF")
	} else {
		args = append(args, "--skip-log-bin")
	}
	if o.BufferPool != "" {
		args = append(args, "--innodb-buffer-pool-size="+o.BufferPool)
	}
	args = append(args, o.Args...)
	logf, err := os.Create(filepath.Join(dir, "server.log"))
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	cmd := exec.Command(mariadbd, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		logf.Close()
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("tempmariadb: mariadbd: %w", err)
	}
	s := &Server{DSN: fmt.Sprintf("root@tcp(127.0.0.1:%d)/", port), Port: port, Dir: dir, cmd: cmd, logf: logf, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(s.done) }()
	if err := s.await(ctx, o.ReadyTimeout); err != nil {
		log, _ := os.ReadFile(logf.Name())
		s.Stop()
		return nil, fmt.Errorf("%w; server.log: %s", err, tail(log))
	}
	return s, nil
}

// await pings the server until it answers, exits, or timeout passes.
func (s *Server) await(ctx context.Context, timeout time.Duration) error {
	db, err := sql.Open("mysql", s.DSN)
	if err != nil {
		return err
	}
	defer db.Close()
	deadline := time.Now().Add(timeout)
	for {
		pctx, cancel := context.WithTimeout(ctx, time.Second)
		err := db.PingContext(pctx)
		cancel()
		if err == nil {
			return nil
		}
		select {
		case <-s.done:
			return errors.New("tempmariadb: mariadbd exited at start")
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("tempmariadb: not ready after %s: %w", timeout, err)
		}
	}
}

// Stop shuts the server down (SIGTERM, then SIGKILL after 30s) and
// removes its directory. It is safe to call more than once.
func (s *Server) Stop() {
	if s == nil || s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.done:
	case <-time.After(30 * time.Second):
		_ = s.cmd.Process.Kill()
		<-s.done
	}
	s.cmd = nil
	s.logf.Close()
	_ = os.RemoveAll(s.Dir)
}

// installAlone runs mariadb-install-db holding an exclusive lock shared by
// every process on the machine: two bootstraps at once failed here ("Unknown
// table 'mysql.tmp_user_sys'"), and make test runs packages in parallel.
func installAlone(inst *exec.Cmd) ([]byte, error) {
	lock, err := os.OpenFile(filepath.Join(os.TempDir(), "roomflow-tempmariadb-install.lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, err
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return nil, fmt.Errorf("tempmariadb: lock the install: %w", err)
	}
	defer syscall.Flock(int(lock.Fd()), syscall.LOCK_UN) //nolint:errcheck // closing the file unlocks too
	return inst.CombinedOutput()
}

func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// tail is the last 2 KiB of a log, enough to show why a server failed.
func tail(b []byte) string {
	const n = 2048
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}
