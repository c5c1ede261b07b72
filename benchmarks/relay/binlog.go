package main

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strconv"
	"time"

	gomysql "github.com/go-mysql-org/go-mysql/mysql"
	"github.com/go-mysql-org/go-mysql/replication"
	"github.com/go-sql-driver/mysql"

	"github.com/hyapp/roomflow/benchmarks/internal/benchkafka"
	"github.com/hyapp/roomflow/internal/tempmariadb"
)

// runBinlog is -mode binlog (see the package doc).
func runBinlog(rows, payload, batch int, kafka *benchkafka.Flags, rate, txnRows, writers int, latDur, poll time.Duration, partitions int32) error {
	ctx := context.Background()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	srv, err := tempmariadb.Start(ctx, tempmariadb.Options{Binlog: true, ServerID: 1, BufferPool: "512M",
		Args: []string{"--innodb-log-file-size=512M"}})
	if err != nil {
		return fmt.Errorf("private mariadbd: %w", err)
	}
	defer srv.Stop()
	fmt.Printf("private mariadbd with the row binlog at %s\n", srv.DSN)
	b, closeAll, err := setup(ctx, srv.DSN, kafka, batch, poll, false, partitions, log)
	if err != nil {
		return err
	}
	defer closeAll()
	cfg := b.cfg
	cfg.Relay.Mode = "binlog"
	cfg.Relay.Binlog.ServerID = 100
	cfg.Relay.TransactionalID = b.prefix + "relay-binlog"

	// The binlog-mode relay stores its position on the empty table (its
	// snapshot is empty), so the timed run streams every row from the
	// binlog.
	if _, _, err := relayRun(ctx, cfg, b.db, log, 0); err != nil {
		return err
	}
	var gtid string
	if err := b.db.QueryRowContext(ctx, "SELECT @@gtid_binlog_pos").Scan(&gtid); err != nil {
		return err
	}
	fmt.Printf("filling room_outbox with %d rows of %d-byte payloads, each followed by two status UPDATEs...\n", rows, payload)
	t0 := time.Now()
	if err := fill(ctx, b.db, rows, payload, true); err != nil {
		return err
	}
	var maxID uint64
	if err := b.db.QueryRowContext(ctx, "SELECT COALESCE(MAX(id),0) FROM room_outbox").Scan(&maxID); err != nil {
		return err
	}
	fmt.Printf("filled in %s (%.0f rows/s)\n", time.Since(t0).Round(time.Millisecond), float64(rows)/time.Since(t0).Seconds())

	rawRate := 0.0
	rawOnce := func() error {
		dur, n, events, err := rawBinlog(ctx, cfg.MySQL.DSN, gtid, rows)
		if err != nil {
			return err
		}
		r := float64(n) / dur.Seconds()
		rawRate = max(rawRate, r)
		fmt.Printf("raw binlog   : %d INSERT rows (%d row events parsed) in %s = %.0f rows/s (go-mysql, every row event decoded, no Kafka)\n",
			n, events, dur.Round(time.Millisecond), r)
		return nil
	}
	if err := rawOnce(); err != nil {
		return err
	}
	relDur, lead, err := relayRun(ctx, cfg, b.db, log, maxID)
	if err != nil {
		return err
	}
	relRate := float64(rows) / relDur.Seconds()
	fmt.Printf("relay binlog : %d events in %s = %.0f events/s (transactional, position per batch; leader after %s, not counted)\n",
		rows, relDur.Round(time.Millisecond), relRate, lead.Round(time.Millisecond))
	if err := rawOnce(); err != nil {
		return err
	}
	fmt.Printf("ratio        : relay binlog / raw binlog = %.1f%% of the better raw run (target >= 70%%)\n", 100*relRate/rawRate)

	pcfg := b.cfg
	pcfg.Relay.TransactionalID = b.prefix + "relay-poll"
	pollDur, _, err := relayRun(ctx, pcfg, b.db, log, maxID)
	if err != nil {
		return err
	}
	fmt.Printf("relay poll   : %d events in %s = %.0f events/s (same rows, for reference)\n",
		rows, pollDur.Round(time.Millisecond), float64(rows)/pollDur.Seconds())

	if rate > 0 {
		return latency(ctx, cfg, b.db, log, rate, txnRows, writers, payload, latDur)
	}
	return nil
}

// rawBinlog is the raw binlog limit: a go-mysql reader from gtid decoding
// every row event (INSERTs and the status UPDATEs alike, as a generic CDC
// reader does), until it counted want INSERT rows of room_outbox.
func rawBinlog(ctx context.Context, dsn, gtid string, want int) (time.Duration, int, int, error) {
	dc, err := mysql.ParseDSN(dsn)
	if err != nil {
		return 0, 0, 0, err
	}
	host, port, err := net.SplitHostPort(dc.Addr)
	if err != nil {
		return 0, 0, 0, err
	}
	p, _ := strconv.Atoi(port)
	syncer := replication.NewBinlogSyncer(replication.BinlogSyncerConfig{
		ServerID: 200, Flavor: gomysql.MariaDBFlavor, Host: host, Port: uint16(p), User: dc.User, Password: dc.Passwd,
		Logger: slog.New(slog.DiscardHandler),
	})
	defer syncer.Close()
	set, err := gomysql.ParseMariadbGTIDSet(gtid)
	if err != nil {
		return 0, 0, 0, err
	}
	start := time.Now()
	st, err := syncer.StartSyncGTID(set)
	if err != nil {
		return 0, 0, 0, err
	}
	n, events := 0, 0
	for n < want {
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		ev, err := st.GetEvent(cctx)
		cancel()
		if err != nil {
			return 0, 0, 0, fmt.Errorf("raw binlog after %d rows: %w", n, err)
		}
		if re, ok := ev.Event.(*replication.RowsEvent); ok {
			events++
			if re.Type() == replication.EnumRowsEventTypeInsert && string(re.Table.Table) == "room_outbox" {
				n += len(re.Rows)
			}
		}
	}
	return time.Since(start), n, events, nil
}
