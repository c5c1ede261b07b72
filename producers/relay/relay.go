// Package relay is `roomflow relay`: it tails MySQL room_outbox into Kafka
// the way Debezium's MySQL connector plus its Outbox Event Router would, but
// exactly once instead of at least once, in one of two modes (Config.Mode):
// ModePoll (the default) polls the table and needs no binlog access;
// ModeBinlog reads the row binlog as a replica. Both feed the same batches
// into the same Kafka transactions, records, routes, dead letters, leader
// election and fencing.
//
// # Reading (poll mode)
//
// The relay reads rows in id order with plain consistent reads,
// `SELECT ... FROM room_outbox WHERE id > ? ORDER BY id LIMIT <BatchSize>`,
// re-polling at once while batches are full and sleeping
// PollInterval when idle. It never locks or writes the table and
// never uses SERIALIZABLE, so room-service's writes never wait on it.
// Reads are bounded by bytes too: a batch reads LENGTH(payload) with the
// other columns (small payloads inline) and loads the larger payloads of
// the prefix that fits MaxBatchBytes (a larger row alone; one over
// MaxRecordBytes, bound for the DLQ, not at all), see Source.
//
// # Gaps
//
// InnoDB hands out an auto-increment id when a row is inserted, not when
// its transaction commits, so id N can become visible after N+1..N+1000,
// and a rolled-back insert leaves a hole forever. The relay keeps moving
// past such holes, remembers each skipped id with the time it was first
// missed (the Tracker, on the position's own clock, so no host's wall
// clock ages a hole), looks them up again with `WHERE id IN (...)` once
// per poll interval (a bounded rotation of them when many are open, see
// Tracker.ProbeIDs) and the youngest ones with every batch that found new
// rows, and relays a row that fills a hole as soon as it appears. A hole
// older than GapMaxAge is given up
// (roomflow_relay_gaps_abandoned_total, a warn log, and a gap_abandoned
// record on the DLQ topic in the same transaction, see Router.GapRecord);
// at most MaxOpenGaps holes are remembered, the oldest being
// given up first when the bound is reached. Consequently an insert
// transaction that stays open longer than GapMaxAge is not relayed: that
// is the trade the bound buys. A relay with no committed position starts
// one batch below the lowest id present, open transactions' inserts
// included, so purged early rows are not mistaken for holes and rows in
// flight are not passed. If the table's AUTO_INCREMENT falls to or below the
// high-water id, MySQL reissues ids the relay has passed: it stops with an
// IDReissueError instead of skipping those rows.
//
// # Reading (binlog mode)
//
// Only the leader connects to MySQL, as a replica with server id
// Binlog.ServerID, after fencing and loading the position; a broken stream
// ends the leader session, so leadership is checked again before every
// reconnect. Start-up checks, as Binlog.DSN's user (binary log on,
// binlog_format=ROW, binlog_row_image=FULL, binlog_row_metadata=FULL,
// REPLICATION SLAVE and REPLICATION CLIENT / BINLOG MONITOR of the user or
// its enabled roles, a server id neither the server's nor registered by
// another replica than ReplicaHost, the relay's database on the same
// server; MySQL: gtid_mode ON, binlog_transaction_compression OFF) fail
// with a *BinlogCheckError naming what is missing. Only INSERTs into Table of the relay database's
// schema are decoded, each by the column names of its own TABLE_MAP (a
// *BinlogColumnsError when it has none). A position without a binlog
// part (first start, a poll-mode position, Binlog.Resnapshot)
// first takes a consistent snapshot of the rows the position has not
// relayed, a batch at a time, then streams the binlog. On MariaDB the
// snapshot has an exact position (START TRANSACTION WITH CONSISTENT
// SNAPSHOT, binlog_snapshot_file/_position, BINLOG_GTID_POS): no overlap.
// MySQL 8.0 reports none, so the snapshot is a watermark one: the stream
// starts from the GTID set executed before the snapshot opened, and the
// rows both read are deduplicated by id: on MySQL a binlog row at or below
// the high-water id that is not an open hole was relayed and is skipped.
// A MySQL transaction larger than a batch spans Kafka transactions, each
// storing the transaction's start and the count of its rows relayed
// (BinlogPosition.Rows). The high-water id and holes are kept current from
// the relayed ids, so poll mode can take over from a binlog position, and
// holes given up (relay.gap_max_age, max_open_gaps) are dead-lettered as
// in poll mode. MySQL 8.0 support is tested only where a container engine
// runs (testenv.MySQL80DSN).
//
// # Exactly once
//
// The relay's position (high-water id plus open holes, see Position) is a
// record in the compacted OffsetsTopic, key TransactionalID, written in the same Kafka transaction as the
// records it covers — like Kafka Connect's source offsets. A
// read_committed consumer therefore sees every row exactly once whatever
// instant the relay crashes at: a batch is either committed together with
// the position that says it is done, or aborted together with it. On start
// and on takeover the position is read back (see loadPosition) before
// anything is relayed.
//
// # High availability
//
// Any number of replicas may run with the same TransactionalID.
// Exactly one leads (see elector: a consumer group whose owner of partition
// 0 of the offsets topic leads, session timeout two thirds of
// FailoverTimeout). A standby takes over when the leader's session
// expires; its InitProducerID fences the old leader's transactional
// producer, so a paused or partitioned former leader can no longer commit.
//
// # Records
//
// key = room_id, value = payload exactly as stored (never decoded),
// timestamp = occurred_at_ms, headers event_id, event_type, app_code,
// room_version, occurred_at_ms, content-type: application/x-protobuf. Topic
// by event_type through Routes, default Topic. An occurred_at_ms a broker
// would refuse (not positive, more than MaxFutureSkew ahead, or refused
// with INVALID_TIMESTAMP) gives way to the relay's time as the record's
// timestamp only (see Stamp): the row is relayed, its headers and payload
// as they are.
// Records are produced in the order their rows became visible (a late row
// after the rows that overtook it). Per-room order therefore holds as long
// as a room's rows commit in room_version order, which room-service's
// serial per-room writes guarantee; the relay does not reorder.
// Rows with an empty payload or larger than MaxRecordBytes (or
// refused by the broker) go to DLQTopic in the same transaction,
// built by schemas/envelope's DeadLetter with stage "relay", "error" and
// "error_reason" headers naming the reason (see DLQReason) and the row as
// source (source=room_outbox, source_id); the relay never stalls on them.
//
// # Shutdown
//
// On cancel the relay stops reading, aborts the open transaction if it has
// not reached its commit point (or finishes the commit if it has, bounded by
// ShutdownTimeout), closes its Kafka clients and leaves the group so a
// standby takes over at once. A half-applied position cannot exist: the
// position is only ever written inside the transaction.
//
// # Configuration
//
// Every setting above is a field of Config (the names in this
// documentation); `roomflow relay` maps its relay.*, kafka.* and
// shutdown.timeout keys onto one. A minimal relay:
//
//	r, err := relay.New(relay.Config{
//		TransactionalID: "roomflow-relay",
//		Topic:           "hyapp.room.events.v1",
//		DLQTopic:        "hyapp.room.events.dlq.v1",
//		OffsetsTopic:    "roomflow.relay.offsets.v1",
//		Kafka:           kafkax.Cluster{Brokers: []string{"localhost:9092"}},
//		Registerer:      prometheus.DefaultRegisterer,
//	}, db)
//	if err != nil {
//		return err // a *cfgerr.FieldError per bad field, e.g. "batch_size"
//	}
//	return r.Run(ctx)
package relay

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hyapp/roomflow/internal/backoff"
	"github.com/hyapp/roomflow/internal/kafkax"
)

// Component is the component name in logs, client ids and metrics.
const Component = "relay"

// abortTimeout bounds a best-effort abort outside the shutdown path.
const abortTimeout = 10 * time.Second

// BatchInfo describes a batch at a hook.
type BatchInfo struct {
	Rows      int    // rows in the batch (relayed and dead-lettered)
	FirstID   uint64 // lowest row id, 0 when the batch only moves the position
	LastID    uint64 // highest row id
	High      uint64 // high-water mark the batch commits
	OpenGaps  int
	Abandoned uint64 // ids given up in this batch
	ReadBytes int    // payload bytes read from MySQL for the batch (inline reads of rows it left for later included)
}

// Hooks are observation and fault-injection points, used by tests and
// benchmarks; production code leaves them nil.
type Hooks struct {
	// OnLeader is called when this replica starts relaying as the leader
	// (true: fenced in, position loaded) and when it stops (false).
	OnLeader func(leading bool)
	// BeforeCommit runs after a batch's records are flushed into the open
	// transaction and before it is committed. If ctx is done when it
	// returns, the transaction is aborted instead of committed.
	BeforeCommit func(ctx context.Context, b BatchInfo)
	// AfterCommit reports the outcome of a commit attempt.
	AfterCommit func(b BatchInfo, err error)
}

// Relay is the outbox relay component. Create it with New and run it with
// Run; it is an app.Component.
type Relay struct {
	cfg    Config // defaulted
	db     *sql.DB
	src    *Source
	router Router
	log    *slog.Logger // cfg.Logger tagged component=relay
	m      *metrics
	lag    *lagWatch

	started atomic.Bool
	// refused is the refusal Run ended on: Ready reports it, not "ready".
	refused atomic.Pointer[RefusedError]
	// resnapshot is Config.Binlog.Resnapshot until a snapshot's last batch
	// committed.
	resnapshot atomic.Bool

	// Rows the broker refused. A refusal fails a whole produce batch, so
	// every row in it becomes a suspect; the retry produces each suspect
	// alone, and the one refused alone gets the relay's time (refused for
	// its timestamp) or is dead-lettered on the next retry. Entries go once
	// their batch commits.
	refusedMu sync.Mutex
	refusals  map[uint64]refusal
}

// New builds a relay on cfg reading db. It fills cfg's defaults and fails
// on a config that does not validate (the error as Validate returns it) or
// metrics that cannot be registered; it does not connect yet.
func New(cfg Config, db *sql.DB) (*Relay, error) {
	if db == nil {
		return nil, errors.New("relay: nil database")
	}
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.Routes = maps.Clone(cfg.Routes)
	r := &Relay{
		cfg:      cfg,
		db:       db,
		src:      NewSource(db, cfg.Table),
		log:      cfg.Logger.With("component", Component),
		refusals: map[uint64]refusal{},
		router: Router{
			Default:        cfg.Topic,
			Routes:         cfg.Routes,
			DLQ:            cfg.DLQTopic,
			MaxRecordBytes: cfg.MaxRecordBytes,
		},
	}
	r.resnapshot.Store(cfg.Mode == ModeBinlog && cfg.Binlog.Resnapshot)
	r.lag = newLagWatch(cfg.Now)
	r.m = newMetrics(cfg.Registerer, r.lagGaugeValue)
	return r, nil
}

// Ready is a readiness check: nil once Run has joined the leader group
// (as leader or standby), until the broker refused it for good.
func (r *Relay) Ready() error {
	if e := r.refused.Load(); e != nil {
		return e
	}
	if !r.started.Load() {
		return errors.New("relay: not started")
	}
	return nil
}

// refuse records the refusal Run ends on for Ready, and returns it.
func (r *Relay) refuse(err error) error {
	var re *RefusedError
	if errors.As(err, &re) {
		r.refused.Store(re)
	}
	return err
}

// sessionTimeout is the leader group's session timeout: two thirds of
// FailoverTimeout, leaving the rest for the rebalance, fencing and
// reading the position back. Real brokers refuse less than
// group.min.session.timeout.ms (6s by default), so a failover_timeout below
// 9s needs that broker setting lowered.
func (r *Relay) sessionTimeout() time.Duration {
	return r.cfg.FailoverTimeout * 2 / 3
}

// txnTimeout is the transactions' timeout: the failover timeout, at
// least 10 s. An open transaction of another producer holds the offsets
// partition's last stable offset at most this long.
func (r *Relay) txnTimeout() time.Duration { return max(r.cfg.FailoverTimeout, 10*time.Second) }

// Run relays until ctx is cancelled (returns nil) or the brokers refuse
// the relay's settings for good (returns a *RefusedError: the leader group
// or the transaction timeout). Other failures of a leader session (MySQL
// or Kafka errors, being fenced) are logged and retried: the session is torn
// down, and the next one starts again from the position committed in Kafka.
func (r *Relay) Run(ctx context.Context) error {
	el := newElector(r.log)
	group := LeaderGroup(r.cfg.TransactionalID)
	gcl, err := r.cfg.Kafka.NewClient(Component+"-leader",
		el.groupOpts(group, r.cfg.OffsetsTopic, r.sessionTimeout(), r.cfg.InstanceID)...)
	if err != nil {
		return fmt.Errorf("relay: leader group client: %w", err)
	}
	el.cl = gcl
	// Membership is all the elector needs; the positions themselves are
	// read by the leader alone (loadPosition).
	gcl.PauseFetchTopics(r.cfg.OffsetsTopic)
	pctx, pcancel := context.WithCancel(context.WithoutCancel(ctx))
	var wg sync.WaitGroup
	wg.Go(func() { el.run(pctx, group) })
	wg.Go(func() { r.watchLag(pctx) })
	defer func() {
		pcancel()
		// A dynamic member leaves the group here, so a standby takes over
		// at once; a static one (Config.InstanceID) does not, so that its
		// restart leads again at once: on a deliberate stop its caller
		// leaves for it (kafkax.LeaveGroup). Leaving may wait for a
		// JoinGroup answer up to the rebalance timeout: bounded.
		cctx, cancel := context.WithTimeout(context.Background(), r.cfg.ShutdownTimeout)
		kafkax.CloseWithin(cctx, gcl, r.log)
		cancel()
		wg.Wait()
	}()
	r.started.Store(true)
	r.log.Info("relay started; waiting for leadership", "group", group, "transactional_id", r.cfg.TransactionalID)

	retryWait := r.sessionTimeout() / 2
	for {
		lctx, cancel, err := el.await(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return r.refuse(err)
		}
		var led bool
		err = r.lead(lctx, &led)
		cancel()
		if led {
			r.m.isLeader.Set(0)
			if r.cfg.Hooks.OnLeader != nil {
				r.cfg.Hooks.OnLeader(false)
			}
		}
		if ctx.Err() != nil {
			r.log.Info("relay stopped")
			return nil
		}
		if errors.Is(err, kerr.InvalidTransactionTimeout) {
			return r.refuse(&RefusedError{Op: "transaction timeout " + r.txnTimeout().String(), Err: err})
		}
		var reissue *IDReissueError
		if !errors.As(err, &reissue) {
			r.m.idReissue.Set(0) // a standby must not keep reporting a stop it no longer makes
		}
		var purged *BinlogPurgedError
		if !errors.As(err, &purged) {
			r.m.binlogPurged.Set(0)
		}
		var check *BinlogCheckError
		var columns *BinlogColumnsError
		if purged != nil || errors.As(err, &check) || errors.As(err, &columns) {
			r.log.Error("binlog mode cannot relay; retrying", "error", err, "backoff", retryWait.String())
		} else if idRange := (*IDRangeError)(nil); errors.As(err, &idRange) {
			r.log.Error("outbox id out of range; relaying stopped at that row", "error", err, "backoff", retryWait.String())
		} else if reissue != nil {
			r.log.Error("ids are being reissued; relaying stopped until AUTO_INCREMENT is above the high-water id again",
				"error", err, "table", reissue.Table, "auto_increment", reissue.AutoIncrement, "high", reissue.High, "backoff", retryWait.String())
		} else if err != nil && !errors.Is(err, context.Canceled) {
			r.log.Warn("leader session ended; retrying", "error", err, "fenced", isFenced(err), "backoff", retryWait.String())
		} else {
			r.log.Info("leadership lost")
		}
		// A fenced or frozen former leader learns from its next heartbeat
		// that it lost the group; waiting a few heartbeats first keeps it
		// from fencing the new leader right back.
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(leaderRetryJitter.Jitter(retryWait * 5 / 4)):
		}
	}
}

// leaderRetryJitter spreads the relays' leader retries over [backoff,
// 1.25·backoff] (backoff = half the session): never shorter than the
// heartbeats a former leader needs to learn it lost the group, and
// replicas that lost leadership together do not campaign in step.
var leaderRetryJitter = backoff.MustNew(backoff.Config{JitterFraction: 0.2})

func isFenced(err error) bool {
	return errors.Is(err, kerr.ProducerFenced) || errors.Is(err, kerr.InvalidProducerEpoch) ||
		errors.Is(err, kerr.TransactionalIDAuthorizationFailed)
}

// batch is one transaction's worth: rows in id order and the position after
// them.
type batch struct {
	rows      []Row
	pos       []byte
	info      BatchInfo
	abandoned []Abandoned
	started   time.Time
	// endsSnapshot marks a snapshot's last batch, the first to store the
	// new binlog position: --resnapshot is spent only once it commits.
	endsSnapshot bool
}

// newBatch is a batch of rows and abandoned gaps with tr's position after
// them; readBytes is what reading it took from MySQL.
func newBatch(tr *Tracker, rows []Row, abandoned []Abandoned, started time.Time, readBytes int) *batch {
	b := &batch{rows: rows, abandoned: abandoned, started: started, pos: tr.Encode()}
	b.info = BatchInfo{Rows: len(rows), High: tr.High(), OpenGaps: tr.OpenHoles(), ReadBytes: readBytes}
	for _, a := range abandoned {
		b.info.Abandoned += a.Count()
	}
	if n := len(rows); n > 0 {
		b.info.FirstID, b.info.LastID = rows[0].ID, rows[n-1].ID
	}
	return b
}

// send hands b to the committer, or returns ctx's error if ctx ends first.
func (r *Relay) send(ctx context.Context, out chan<- *batch, b *batch) error {
	r.m.batchBytes.Observe(float64(b.info.ReadBytes))
	select {
	case out <- b:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// lead is one leader session: fence, load the position, then read and
// commit batches until ctx ends or something fails. Reading runs one batch
// ahead of committing so MySQL and Kafka work overlap.
func (r *Relay) lead(ctx context.Context, led *bool) error {
	watch := r.cfg.Kafka.NewCommitWatch(Component)
	cl, err := r.cfg.Kafka.NewClient(Component,
		kgo.TransactionalID(r.cfg.TransactionalID),
		kgo.TransactionTimeout(r.txnTimeout()),
		kgo.RecordPartitioner(newPartitioner(r.cfg.OffsetsTopic)),
		kafkax.BatchBytes(r.cfg.MaxRecordBytes),
		kgo.MaxBufferedRecords(2*r.cfg.BatchSize+16),
		kgo.ProducerLinger(0),
		watch.Opt(),
	)
	if err != nil {
		return fmt.Errorf("relay: transactional client: %w", err)
	}
	defer cl.Close()
	txn := producer{cl, watch}

	// InitProducerID bumps the epoch of the transactional id: from here on
	// no older leader can produce or commit, and whatever it had open is
	// aborted (or completed, if it was already committing).
	if _, _, err := txn.ProducerID(ctx); err != nil {
		return fmt.Errorf("relay: init producer id: %w", err)
	}
	// The short-lived position reader reports no client metrics.
	position := r.cfg.Kafka
	position.Metrics = nil
	pos, found, err := loadPosition(ctx, txn, position.Opts(Component+"-position"), r.cfg.OffsetsTopic, r.cfg.TransactionalID, r.txnTimeout())
	if err != nil {
		return err
	}
	if !found {
		if pos, err = r.firstPosition(ctx); err != nil {
			return err
		}
		if r.cfg.Mode == ModeBinlog && pos.High < r.cfg.Binlog.SnapshotFromID {
			pos.High = r.cfg.Binlog.SnapshotFromID
		}
	}
	if err := r.checkReissue(ctx, pos.High); err != nil {
		return err
	}
	tr := NewTracker(pos, r.cfg.MaxOpenGaps, r.cfg.GapMaxAge, r.cfg.Now())
	read := r.read
	switch {
	case r.cfg.Mode == ModeBinlog:
		read = r.readBinlog
		if pos.Mode != ModeBinlog || r.resnapshot.Load() {
			// First start, a switch from poll mode or --resnapshot:
			// snapshot the rows the position has not relayed, then the
			// binlog from there.
			if pos.Mode == ModeBinlog {
				r.log.Warn("resnapshot: not streaming from the stored binlog position", "gtid_set", pos.Binlog.GTIDSet,
					"file", pos.Binlog.File, "offset", pos.Binlog.Offset)
			}
			_ = tr.SetBinlog(BinlogPosition{}) // a zero binlog position always fits
		}
	case pos.Mode == ModeBinlog:
		// A switch from binlog mode: its high-water id and holes, kept
		// current, are where polling resumes.
		tr.SetPoll()
	}
	r.m.openGaps.Set(float64(tr.OpenHoles()))
	r.log.Info("leading", "mode", string(r.cfg.Mode), "high", pos.High, "open_gaps", len(pos.Holes), "restored", found,
		"stored_mode", string(cmp.Or(pos.Mode, ModePoll)))
	*led = true
	r.m.isLeader.Set(1)
	if r.cfg.Hooks.OnLeader != nil {
		r.cfg.Hooks.OnLeader(true)
	}

	rctx, rcancel := context.WithCancel(ctx)
	batches := make(chan *batch, 1)
	var rerr error
	go func() {
		defer close(batches)
		rerr = read(rctx, tr, batches)
	}()
	defer func() {
		rcancel()
		for range batches { // let the reader exit
		}
	}()
	for b := range batches {
		if err := r.commit(ctx, txn, b); err != nil {
			return err
		}
		if b.endsSnapshot {
			r.resnapshot.Store(false)
		}
	}
	if rerr != nil {
		return rerr
	}
	return ctx.Err()
}

// firstPosition is where a relay with no committed position starts: just
// below the lowest id in the table, less one batch. Ids below the lowest
// present row are purged rows, not holes; without this, a table whose
// early rows were deleted would open (and then probe for gap_max_age)
// up to max_open_gaps holes. The lowest id counts the inserts of open
// transactions (MinID): several writers' transactions in flight hold ids
// below every committed one, and a row at or below the start position is
// never read (in binlog mode: if it commits before the snapshot opens).
// The window of batch_size ids below it covers an insert whose ids are
// allocated but whose rows are not in the table yet.
func (r *Relay) firstPosition(ctx context.Context) (Position, error) {
	minID, err := r.src.MinID(ctx)
	if err != nil {
		return Position{}, err
	}
	window := uint64(r.cfg.BatchSize) + 1
	if minID <= window {
		return Position{}, nil
	}
	return Position{High: minID - window}, nil
}

// tooLarge reports whether row goes to the DLQ for its size, so its
// payload need not be read at all.
func (r *Relay) tooLarge(row *Row) bool { return r.router.Classify(row) == DLQTooLarge }

// IDReissueError means the outbox table's AUTO_INCREMENT is at or below the
// highest id the relay has passed: MySQL is handing out ids again that the
// relay considers done (a failover to a replica that had not received the
// latest inserts, a TRUNCATE, an ALTER TABLE ... AUTO_INCREMENT). Rows with
// those ids would be skipped silently, so the relay stops relaying
// (roomflow_relay_id_reissue_detected = 1) and checks again on each retry.
type IDReissueError struct {
	Table         string
	AutoIncrement uint64 // information_schema.TABLES.AUTO_INCREMENT: the next id
	High          uint64 // the committed high-water id
}

func (e *IDReissueError) Error() string {
	return fmt.Sprintf("relay: %s AUTO_INCREMENT %d is at or below the relayed high-water id %d: ids are being reissued (failover to a lagging replica, TRUNCATE or ALTER TABLE?); not relaying so that no row is skipped",
		e.Table, e.AutoIncrement, e.High)
}

// checkReissue returns an *IDReissueError when the table's next id is not
// above high, and keeps roomflow_relay_id_reissue_detected up to date.
func (r *Relay) checkReissue(ctx context.Context, high uint64) error {
	next, err := r.src.AutoIncrement(ctx)
	if err != nil {
		return err
	}
	if next != 0 && next <= high {
		r.m.idReissue.Set(1)
		return &IDReissueError{Table: r.cfg.Table, AutoIncrement: next, High: high}
	}
	r.m.idReissue.Set(0)
	return nil
}
