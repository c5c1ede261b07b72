package mysqlsink

import (
	"context"
	"database/sql"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"

	"github.com/hyapp/roomflow/internal/sqlbuild"
)

// TP is a topic partition.
type TP struct {
	Topic     string
	Partition int32
}

func (tp TP) String() string { return fmt.Sprintf("%s/%d", tp.Topic, tp.Partition) }

// Record is one consumed Kafka record, decoded by its topic's applier. A
// record without an Item (sent to the DLQ) still advances its partition's
// offset.
type Record struct {
	TP
	Offset int64
	Item   any // what the applier of TP.Topic decoded; nil: dead-lettered
}

// Claimed is a partition's row in roomflow_sink_offsets right after this
// instance claimed it.
type Claimed struct {
	Generation int64
	// NextOffset is the first offset not yet applied; -1 when the sink never
	// committed this partition (consume from the start).
	NextOffset int64
}

// FencedError is returned by Store.Apply when another instance claimed
// one of the batch's partitions after this one did: this instance was
// revoked (or is a zombie) and its commit is rejected. Nothing was written.
type FencedError struct {
	Partitions []TP
}

func (e *FencedError) Error() string {
	s := make([]string, len(e.Partitions))
	for i, tp := range e.Partitions {
		s[i] = tp.String()
	}
	return "mysql sink: fenced: partitions claimed by another instance: " + strings.Join(s, ", ")
}

// Store writes batches and claims into MySQL for one consumer group: the
// engine's transaction, with the facts written by the registered appliers.
type Store struct {
	db       *sql.DB
	group    string
	appliers appliers
	// chunk caps the rows of one multi-row statement.
	chunk int
	// inTxn, when set, runs after the facts are written and before the
	// offsets are (tests: a crash inside the transaction).
	inTxn func(ctx context.Context) error
	// afterCommit, when set, runs right after a batch's commit (tests: a
	// crash the moment the facts are durable).
	afterCommit func(ctx context.Context) error
}

// NewStore returns a Store for consumer group cfg.Group on db, applying
// the topics of cfg.Appliers. It fails on a config that does not validate:
// no applier, or two for one topic.
func NewStore(cfg StoreConfig, db *sql.DB) (*Store, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	s := &Store{db: db, group: cfg.Group, chunk: defaultChunk, appliers: appliers{}}
	for _, r := range cfg.Appliers {
		s.appliers[r.a.Topic()] = r.a
	}
	return s, nil
}

// DB is the pool the store writes to.
func (s *Store) DB() *sql.DB { return s.db }

// Group is the consumer group whose offsets the store keeps.
func (s *Store) Group() string { return s.group }

// Topics are the topics of the registered appliers, sorted.
func (s *Store) Topics() []string {
	return slices.Sorted(maps.Keys(s.appliers))
}

func (s *Store) begin(ctx context.Context) (*sql.Tx, error) {
	// READ COMMITTED: no gap locks on the dedupe lookups and upserts, so
	// concurrent sinks only contend on the rows they really share.
	return s.db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
}

func sortTPs(tps []TP) {
	sort.Slice(tps, func(i, j int) bool {
		if tps[i].Topic != tps[j].Topic {
			return tps[i].Topic < tps[j].Topic
		}
		return tps[i].Partition < tps[j].Partition
	})
}

// offsetKeys renders "(consumer_group, topic, partition_id) IN ((?,?,?),...)"
// for tps, the primary keys of their roomflow_sink_offsets rows. A locking
// read must name the rows by whole key: with "consumer_group = ? AND
// (topic = ? AND partition_id IN (...)) OR ..." MariaDB scans (and locks)
// every row of the group, so concurrent transactions of disjoint partitions
// (Config.Parallelism) wait for each other.
func offsetKeys(group string, tps []TP) (string, []any) {
	args := make([]any, 0, 3*len(tps))
	for _, tp := range tps {
		args = append(args, group, tp.Topic, tp.Partition)
	}
	return "(consumer_group, topic, partition_id) IN (" + sqlbuild.Rows(len(tps), 3) + ")", args
}

// Claim takes ownership of tps for owner: each row's owner_id becomes owner
// and its generation increases by one, in one transaction that also reads
// the stored next offsets. Any later Apply of a previous owner of these
// partitions fails with FencedError; an Apply of the previous owner that
// committed before the claim is reflected in the offsets returned.
func (s *Store) Claim(ctx context.Context, owner string, tps []TP, nowMs int64) (map[TP]Claimed, error) {
	if len(tps) == 0 {
		return map[TP]Claimed{}, nil
	}
	tps = append([]TP(nil), tps...)
	sortTPs(tps)
	tx, err := s.begin(ctx)
	if err != nil {
		return nil, err
	}
	defer tx.Rollback()
	var b strings.Builder
	args := make([]any, 0, len(tps)*7)
	b.WriteString("INSERT INTO roomflow_sink_offsets (consumer_group, topic, partition_id, next_offset, owner_id, generation, updated_at_ms) VALUES ")
	for i, tp := range tps {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString("(?,?,?,-1,?,1,?)")
		args = append(args, s.group, tp.Topic, tp.Partition, owner, nowMs)
	}
	b.WriteString(" ON DUPLICATE KEY UPDATE owner_id = VALUES(owner_id), generation = generation + 1, updated_at_ms = VALUES(updated_at_ms)")
	if _, err := tx.ExecContext(ctx, b.String(), args...); err != nil {
		return nil, fmt.Errorf("claim offsets: %w", err)
	}
	where, wargs := offsetKeys(s.group, tps)
	rows, err := tx.QueryContext(ctx, "SELECT topic, partition_id, next_offset, generation FROM roomflow_sink_offsets WHERE "+where, wargs...)
	if err != nil {
		return nil, fmt.Errorf("read claimed offsets: %w", err)
	}
	out := make(map[TP]Claimed, len(tps))
	for rows.Next() {
		var tp TP
		var c Claimed
		if err := rows.Scan(&tp.Topic, &tp.Partition, &c.NextOffset, &c.Generation); err != nil {
			rows.Close()
			return nil, err
		}
		out[tp] = c
	}
	if err := rows.Close(); err != nil {
		return nil, err
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	if err := tx.Commit(); err != nil {
		return nil, fmt.Errorf("commit claim: %w", err)
	}
	return out, nil
}

// Result is what one applied batch did.
type Result struct {
	// Applied is what each topic's applier did, by topic.
	Applied map[string]Applied
	// Behind counts records below the stored offset of their partition
	// (already applied by an earlier transaction) that were skipped.
	Behind int
	// Offsets are the next offsets stored per partition.
	Offsets map[TP]int64
}

type offsetRow struct {
	next  int64
	owner string
	gen   int64
}

// Apply writes one batch in one transaction: it locks the batch's offset
// rows and checks that owner still holds them at the claimed generations
// (else FencedError), skips records below the stored offsets, hands the
// items of the others to their topics' appliers (in topic order), which
// record each new event_id in their consumption table and write its facts,
// and stores the next offsets. Either all of it commits or none of it does.
func (s *Store) Apply(ctx context.Context, owner string, claims map[TP]int64, recs []Record, nowMs int64) (Result, error) {
	res := Result{Applied: map[string]Applied{}, Offsets: map[TP]int64{}}
	next, tps, err := s.batchPartitions(recs)
	if err != nil || len(tps) == 0 {
		return res, err
	}

	tx, err := s.begin(ctx)
	if err != nil {
		return res, err
	}
	defer tx.Rollback()

	stored, err := s.lockOffsets(ctx, tx, owner, claims, tps)
	if err != nil {
		return res, err
	}
	if err := s.applyNew(ctx, tx, recs, stored, nowMs, &res); err != nil {
		return res, err
	}
	if s.inTxn != nil {
		if err := s.inTxn(ctx); err != nil {
			return res, err
		}
	}
	if err := s.storeOffsets(ctx, tx, owner, claims, tps, next, stored, res.Offsets, nowMs); err != nil {
		return res, err
	}
	if err := tx.Commit(); err != nil {
		return res, fmt.Errorf("commit: %w", err)
	}
	if s.afterCommit != nil {
		if err := s.afterCommit(ctx); err != nil {
			return res, err
		}
	}
	return res, nil
}

// batchPartitions returns the offset after each partition's last record
// in recs and the partitions in lock order; an error when a record's
// topic has no applier.
func (s *Store) batchPartitions(recs []Record) (map[TP]int64, []TP, error) {
	next := map[TP]int64{}
	for _, r := range recs {
		if _, ok := s.appliers[r.Topic]; !ok {
			return nil, nil, fmt.Errorf("mysql sink: no applier for topic %s", r.Topic)
		}
		if n, ok := next[r.TP]; !ok || r.Offset+1 > n {
			next[r.TP] = r.Offset + 1
		}
	}
	if len(next) == 0 {
		return next, nil, nil
	}
	tps := make([]TP, 0, len(next))
	for tp := range next {
		tps = append(tps, tp)
	}
	sortTPs(tps)
	return next, tps, nil
}

// lockOffsets is Apply's fence: it locks the offset rows of tps until
// commit, so a claim by another instance either happened before (we see
// it and stop with a FencedError) or waits for this commit (and then
// reads our offsets). It returns the stored rows.
func (s *Store) lockOffsets(ctx context.Context, tx *sql.Tx, owner string, claims map[TP]int64, tps []TP) (map[TP]offsetRow, error) {
	// FORCE INDEX: on a small table the optimizer prefers a scan of the
	// whole index, which locks every partition's row (offsetKeys).
	where, wargs := offsetKeys(s.group, tps)
	rows, err := tx.QueryContext(ctx, "SELECT topic, partition_id, next_offset, owner_id, generation FROM roomflow_sink_offsets FORCE INDEX (PRIMARY) WHERE "+where+" ORDER BY topic, partition_id FOR UPDATE", wargs...)
	if err != nil {
		return nil, fmt.Errorf("lock offsets: %w", err)
	}
	stored := make(map[TP]offsetRow, len(tps))
	for rows.Next() {
		var tp TP
		var o offsetRow
		if err := rows.Scan(&tp.Topic, &tp.Partition, &o.next, &o.owner, &o.gen); err != nil {
			rows.Close()
			return nil, err
		}
		stored[tp] = o
	}
	if err := rows.Close(); err != nil {
		return nil, err
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	var fenced []TP
	for _, tp := range tps {
		o, ok := stored[tp]
		if !ok || o.owner != owner || o.gen != claims[tp] {
			fenced = append(fenced, tp)
		}
	}
	if len(fenced) > 0 {
		return nil, &FencedError{Partitions: fenced}
	}
	return stored, nil
}

// applyNew skips the records an earlier transaction already applied
// (counted in res.Behind) and hands the items of the others to their
// topics' appliers, topic by topic (one lock order for concurrent
// transactions), recording what each did in res.Applied.
func (s *Store) applyNew(ctx context.Context, tx *sql.Tx, recs []Record, stored map[TP]offsetRow, nowMs int64, res *Result) error {
	items := map[string][]any{}
	for _, r := range recs {
		if r.Offset < stored[r.TP].next {
			res.Behind++
			continue
		}
		if r.Item != nil {
			items[r.Topic] = append(items[r.Topic], r.Item)
		}
	}
	atx := &Tx{tx: tx, nowMs: nowMs, chunk: s.chunk}
	for _, topic := range slices.Sorted(maps.Keys(items)) {
		a, err := s.appliers[topic].apply(ctx, atx, items[topic])
		if err != nil {
			return err
		}
		res.Applied[topic] = a
	}
	return nil
}

// storeOffsets writes the next offset of each partition of tps (never
// below the stored one) under owner's claims, in one statement, and
// records them in offsets.
func (s *Store) storeOffsets(ctx context.Context, tx *sql.Tx, owner string, claims map[TP]int64, tps []TP, next map[TP]int64, stored map[TP]offsetRow, offsets map[TP]int64, nowMs int64) error {
	var b strings.Builder
	args := make([]any, 0, len(tps)*7)
	b.WriteString("INSERT INTO roomflow_sink_offsets (consumer_group, topic, partition_id, next_offset, owner_id, generation, updated_at_ms) VALUES ")
	for i, tp := range tps {
		if i > 0 {
			b.WriteByte(',')
		}
		n := max(next[tp], stored[tp].next)
		offsets[tp] = n
		b.WriteString("(?,?,?,?,?,?,?)")
		args = append(args, s.group, tp.Topic, tp.Partition, n, owner, claims[tp], nowMs)
	}
	b.WriteString(" ON DUPLICATE KEY UPDATE next_offset = GREATEST(next_offset, VALUES(next_offset)), updated_at_ms = VALUES(updated_at_ms)")
	if _, err := tx.ExecContext(ctx, b.String(), args...); err != nil {
		return fmt.Errorf("store offsets: %w", err)
	}
	return nil
}

// StoredOffsets returns the next offset the sink's group will apply per
// partition of topic, as committed with the facts in
// roomflow_sink_offsets (partitions never claimed are absent): every
// record below it has been applied (or dead-lettered) exactly once.
func StoredOffsets(ctx context.Context, db *sql.DB, group, topic string) (map[int32]int64, error) {
	rows, err := db.QueryContext(ctx, "SELECT partition_id, next_offset FROM roomflow_sink_offsets WHERE consumer_group = ? AND topic = ?", group, topic)
	if err != nil {
		return nil, fmt.Errorf("mysql sink: read offsets of %s: %w", topic, err)
	}
	defer rows.Close()
	out := map[int32]int64{}
	for rows.Next() {
		var p int32
		var next int64
		if err := rows.Scan(&p, &next); err != nil {
			return nil, err
		}
		out[p] = next
	}
	return out, rows.Err()
}
