package imoutbox

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"database/sql/driver"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// scanFallback keeps room system messages flowing when Kafka is
// unreachable (IM-12: MySQL alone must suffice for the compensation
// worker). The scan normally claims only the rooms of the partitions its
// replica's fast path owns (see share), so without Kafka nobody would
// claim anything. A replica whose fast path has been out of its consumer
// group for after (no group session, so no partition: kgo ends the session
// with OnPartitionsLost once the brokers have been unreachable for a
// session timeout, and a replica that never reached Kafka never had one)
// competes for a MySQL named lock, GET_LOCK(name, 0) on a dedicated
// connection. The holder's scan claims every room at the full share; the
// others retry every retry. A replica in its group never competes: one
// without partitions (more replicas than partitions) is idle by design,
// the owners' scans cover every room.
//
// The holder leaves the fallback, then releases the lock, as soon as its
// fast path is in a group session again (share.assign ends the fallback at
// once), when ctx ends, or when it can no longer confirm that it holds the
// lock (an error or no answer within check/2, checked every check =
// retry/3). The lock is tied to the connection: the server drops a lost
// one, and with it the lock, at the latest after the session's
// wait_timeout, set to a few checks (the holder queries every check, so a
// live holder is never idle that long). Whoever takes the lock next waits
// holdOff = 2×check before claiming, by which time a previous holder that
// lost its connection has stopped (it notices within 1.5×check), and its
// rate rises one pacing window after that: the holders' sends never
// overlap. Rows are claimed under lock_until leases anyway, so no row is
// sent twice whatever happens; the lock only bounds the rate (one share)
// and the group limit (one sender per room).
//
// The partial case is not covered: a replica cut off from Kafka while
// others still own partitions claims every room at the full share next to
// them, up to twice the share in all for as long as it lasts. Tencent's
// answers to that (60007 over the app limit, MsgFreqCtrl over the group
// limit) are retryable: rows are retried, nothing is lost.
type scanFallback struct {
	db    *sql.DB
	share *share
	after time.Duration // out of the group this long before competing
	retry time.Duration // how often a replica out of its group tries the lock
	check time.Duration // how often the holder confirms it (retry/3)
	app   int64         // SDKAppID: the lock is per database and app
	gauge prometheus.Gauge
	log   *slog.Logger
}

// errLockLost reports that the fallback lock is no longer this
// connection's.
var errLockLost = errors.New("imoutbox: scan fallback lock no longer held")

func newScanFallback(db *sql.DB, sh *share, after, retry time.Duration, app int64, gauge prometheus.Gauge, log *slog.Logger) *scanFallback {
	return &scanFallback{db: db, share: sh, after: after, retry: retry, check: retry / 3, app: app, gauge: gauge, log: log}
}

// lockName is the fallback lock's name for database and app: named locks
// are server-wide and at most 64 characters, so the database enters as a
// digest.
func lockName(database string, app int64) string {
	d := sha256.Sum256([]byte(database))
	return fmt.Sprintf("roomflow.im_scan_fallback.%d.%s", app, hex.EncodeToString(d[:6]))
}

// Run competes for the lock while the fast path has been out of its group
// for f.after, holds it as described on scanFallback, and returns when ctx
// ends, the fallback left and the lock released.
func (f *scanFallback) Run(ctx context.Context) {
	f.gauge.Set(0)
	tick := time.NewTicker(f.retry)
	defer tick.Stop()
	name := ""
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		if f.share.detachedFor() < f.after {
			continue
		}
		if name == "" {
			var db sql.NullString
			if err := f.db.QueryRowContext(ctx, `SELECT DATABASE()`).Scan(&db); err != nil {
				f.log.Warn("scan fallback: database name unknown; retrying", "error", err.Error())
				continue
			}
			name = lockName(db.String, f.app)
		}
		conn, err := f.acquire(ctx, name)
		if err != nil {
			if ctx.Err() == nil {
				f.log.Warn("scan fallback: lock attempt failed; retrying", "lock", name, "error", err.Error())
			}
			continue
		}
		if conn != nil {
			f.hold(ctx, conn, name)
		}
	}
}

// acquire tries the lock once (no wait) on a connection of its own; nil
// when another replica holds it.
func (f *scanFallback) acquire(ctx context.Context, name string) (*sql.Conn, error) {
	ctx, cancel := context.WithTimeout(ctx, f.retry)
	defer cancel()
	conn, err := f.db.Conn(ctx)
	if err != nil {
		return nil, err
	}
	var got sql.NullInt64
	if err := conn.QueryRowContext(ctx, `SELECT GET_LOCK(?, 0)`, name).Scan(&got); err != nil {
		discard(conn)
		return nil, err
	}
	if got.Int64 != 1 {
		_ = conn.Close() // untouched: back to the pool
		return nil, nil
	}
	// A holder that vanishes without closing its connection (a lost node)
	// loses the lock when the server drops the idle session.
	idle := int(math.Ceil((5 * f.check).Seconds()))
	if _, err := conn.ExecContext(ctx, fmt.Sprintf(`SET SESSION wait_timeout = %d`, max(idle, 2))); err != nil {
		discard(conn) // closing the connection releases the lock
		return nil, err
	}
	return conn, nil
}

// hold runs the fallback while conn holds the lock, then leaves it and
// releases the lock (see scanFallback).
func (f *scanFallback) hold(ctx context.Context, conn *sql.Conn, name string) {
	acquired := time.Now()
	f.log.Info("scan fallback lock taken: the fast path is out of its consumer group; the compensation scan will claim every room at the full im.max_calls_per_second",
		"lock", name, "out_of_group_for", f.share.detachedFor().Round(time.Second).String())
	tick := time.NewTicker(f.check)
	defer tick.Stop()
	on := false
	why := "" // why the fallback ends
	for why == "" {
		select {
		case <-ctx.Done():
			why = "shutdown"
			continue
		case <-tick.C:
		}
		if err := f.held(ctx, conn, name); err != nil {
			if ctx.Err() != nil {
				why = "shutdown"
			} else {
				why = "lock lost: " + err.Error()
			}
			continue
		}
		switch {
		case on && !f.share.inFallback(), !on && f.share.detachedFor() < f.after:
			why = "the fast path is in its consumer group again"
		case !on && time.Since(acquired) >= 2*f.check:
			if on = f.share.enterFallback(f.after); on {
				f.gauge.Set(1)
				f.log.Warn("scan fallback on: the compensation scan claims every room (Kafka unreachable?)", "lock", name,
					"budget_per_second", f.share.rate(), "metric", "roomflow_im_scan_fallback")
			}
		}
	}
	f.share.leaveFallback()
	f.gauge.Set(0)
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), f.check)
	_, _ = conn.ExecContext(rctx, `SELECT RELEASE_LOCK(?)`, name)
	cancel()
	discard(conn)
	if on {
		f.log.Warn("scan fallback off; lock released", "lock", name, "reason", why)
	} else {
		f.log.Info("scan fallback lock released unused", "lock", name, "reason", why)
	}
}

// held confirms that conn still holds the lock, within check/2.
func (f *scanFallback) held(ctx context.Context, conn *sql.Conn, name string) error {
	ctx, cancel := context.WithTimeout(ctx, f.check/2)
	defer cancel()
	var mine sql.NullBool
	if err := conn.QueryRowContext(ctx, `SELECT IS_USED_LOCK(?) = CONNECTION_ID()`, name).Scan(&mine); err != nil {
		return err
	}
	if !mine.Bool {
		return errLockLost
	}
	return nil
}

// discard closes conn's session instead of returning it to the pool (its
// wait_timeout was changed, or it failed): the server drops its locks.
func discard(conn *sql.Conn) {
	_ = conn.Raw(func(any) error { return driver.ErrBadConn })
	_ = conn.Close()
}
