// Package streams runs a Kafka->Kafka processor exactly once: it consumes one
// input topic in a consumer group (read_committed), hands every record of a
// partition, in offset order, to that partition's Task, and commits what the
// task emitted, the task's state changes and the consumed input offsets in
// ONE Kafka transaction (franz-go GroupTransactSession, KIP-447).
//
// # Model
//
// A Processor is a function of (task state, record, explicit time). For each
// assigned input partition the runtime owns one Task: a keyed in-memory Store
// backed by a compacted changelog topic co-partitioned with the input
// (changelog partition N holds the state of input partition N), an emit
// buffer, and the wall-clock timers of Config.Punctuations. All
// tasks of one runtime are driven by a single goroutine (Process needs no
// locking); throughput scales out with partitions and replicas in the same
// group.
//
// A processor sees its task through the Task interface (emit, store, clock,
// context, logger). Local runs the same per-record contract without Kafka;
// rttest.Driver builds on it so processor behaviour tests need no broker.
//
//	rt, err := streams.New(streams.Config{
//		Name:           "room",
//		Input:          "hyapp.room.events.v1",
//		Group:          "roomflow-room-processor",
//		DLQ:            "hyapp.room.events.dlq.v1",
//		Kafka:          kafkax.Cluster{Brokers: brokers, Metrics: reg, Logger: log},
//		CommitInterval: 100 * time.Millisecond, // the default
//		CommitRecords:  5000,                   // the default
//		Registerer:     reg,
//		Logger:         log,
//	}, proc)
//	err = rt.Run(ctx)
//
// # Parts
//
// Runtime is one processing loop (loop.go: Kafka Streams' StreamThread)
// over parts that each keep their own state: txn, the open transaction
// (begin, what it holds, output timestamps, the produce promise, the DLQ
// write, commit or abort); assignment, what the group assigned (its events
// and the tasks with their stores: Kafka Streams' TaskManager); restorer,
// the changelog restore (StoreChangelogReader); punctuator, the timers
// and their LSO gate (PunctuationQueue); and stallTracker, the partitions
// backing off. The loop and the runtime's endTxn, restore and task
// lifecycle are the only code that uses more than one part.
//
// # Transactions and batching
//
// A transaction covers many records: it is committed when it holds
// CommitRecords input records or CommitInterval after its first record or
// punctuation, never once per record. Within a transaction, Store writes are
// buffered per task and applied to the in-memory state only after the
// transaction commits; their changelog records (one per dirty key, the last
// value wins) are produced right before the commit. If the transaction
// aborts — a rebalance happened (GroupTransactSession then refuses to commit),
// a produce failed — the buffered writes are discarded and consumption
// rewinds to the last committed offsets, so the committed state and the
// committed offsets always agree.
//
// # Rejects and the DLQ
//
// Process returning an error made with Reject (a *RejectError) routes the
// input record to the DLQ topic inside the same transaction, built by
// schemas/envelope's DeadLetter: original key, value and headers plus the
// headers `stage` (the processor's name), `error` (reason and detail, at
// most envelope.MaxErrorBytes), `error_reason`, `source_topic`,
// `source_partition` and `source_offset`.
// Records emitted and Store writes made while processing a rejected record
// are discarded; the partition moves on. A *CorruptStateError (CorruptState:
// a state value the processor cannot decode, which no retry can fix) is
// dead-lettered the same way with reason corrupt_state. So is a record
// whose processing emitted a record above MaxRecordBytes (reason
// output_too_large), which the producer would refuse on every retry; a
// letter itself above it goes without its value (payload_bytes gives the
// size), as the relay's payload_too_large does.
//
// # Partition stalls
//
// Any other error (a failing lookup, MySQL down, a bug) stalls only the
// record's partition: the record's emits and writes are undone, the
// partition's fetching is paused and its position set back to the record
// (kgo SetOffsets, which also sets the offset the GroupTransactSession
// commits for it), so the open transaction commits the partition exactly
// up to the records before the failing one and never a record it did not
// process. After a backoff (RetryBackoffMin, doubling up to
// RetryBackoffMax while the same record keeps failing; each wait jittered
// between half of it and all of it) the partition
// resumes from the failing record. The other
// partitions keep processing and committing meanwhile. A record's
// Task.Context ends half the transaction timeout after the transaction's
// first record, so lookups that hang on one partition after another stall
// those partitions instead of holding the transaction open until the
// broker aborts it and fences the producer (which would stop Run). A stalled partition
// shows as roomflow_process_partition_stalled{partition}=1 and an error log
// naming topic, partition, offset, event_id and the error. A failing
// punctuation is undone and retried after the same backoff (the gauge
// shows it too) while its partition's records keep flowing. A transient failure never loses or skips a record; a
// deterministic one stalls one partition instead of corrupting output —
// classify deterministic failures as rejects.
//
// # Restore, revoke, shutdown, fencing
//
// On assignment the runtime restores the task's store before the task
// processes anything or punctuates. It commits a marker record (a reserved
// key; the store never holds it) to the partition's changelog in a
// transaction of its own, then reads the changelog read_committed from its
// start until it reads past its own marker. A read_committed fetch stops
// below any open transaction, so the restore also waits until a previous
// owner's last transaction is committed or aborted (after that owner's
// transaction timeout at worst), and it includes everything committed before
// the marker however long the fetches stall (a leader move retried inside
// kgo looks like silence); there is no time limit and no "quiet tail"
// guess. An open transaction is aborted first (consumption rewinds): the
// marker needs the producer, and committing would also commit the offsets
// of records polled but not yet processed. While any partition restores,
// Ready reports not ready and roomflow_process_restoring_partitions counts
// them; a wait is logged every 10 s with its cause (an open transaction or
// stalled fetches). Input offsets are read with RequireStable, so
// consumption also starts after a previous owner's pending offset commit
// (KIP-447). On revoke or loss the open
// transaction is aborted (GroupTransactSession) and the task and its state
// are dropped. On context cancel (SIGTERM) the open transaction is committed
// within the shutdown timeout, or aborted; never partly. Leaving the group
// gets what is left of that timeout: kgo's leave waits for a JoinGroup in
// flight, which the coordinator may hold up to the rebalance timeout, so
// past the bound the client is closed in the background with a WARN
// (kafkax.CloseWithin) and the broker expires the member after the session
// timeout. A commit whose TxnOffsetCommit fails with an error kgo does not
// retry (REQUEST_TIMED_OUT, ...) is aborted by kgo; the producer stays
// usable (the runtime checks that a transaction can begin again), so the
// runtime rewinds as for any abort (cause commit_error, a WARN with the
// error, a back-off doubling from the retry minimum while commits keep
// failing) instead of stopping. An End error that leaves kgo in the
// transaction or its producer id failed (an EndTxn failure or unknown
// outcome, a fenced producer) stays fatal (*TxnError). A zombie — an
// instance that lost its partitions without noticing — is fenced by the
// group generation in TxnOffsetCommit (KIP-447) and, when it shares the
// transactional id with its replacement (TransactionalID defaults to
// "<group>-<hostname>"), by the producer epoch.
//
// A transaction that carries punctuation output but no consumed input
// offsets has no TxnOffsetCommit for the broker to check; before committing
// one, the runtime confirms its membership and generation with a Heartbeat
// and aborts if the coordinator does not (ILLEGAL_GENERATION,
// UNKNOWN_MEMBER_ID, REBALANCE_IN_PROGRESS, no answer). An instance that
// passes the check and then pauses before its EndTxn (GC, SIGSTOP) is not
// fenced, and commits when it wakes; but it flushed its changelog writes
// before the check, so they precede the marker of the instance that takes
// the partition over, whose restore cannot end before that transaction is
// resolved: it restores the late commit (a timer close, say) and does not
// repeat it. Output that writes no state is not covered by this; punctuation
// output should still use deterministic event ids, which the MySQL sinks
// dedupe.
//
// # Timers
//
// Punctuations compare the clock with times in the state, so they must not
// run on a task that is behind its input: after a restart or a stall the
// records that close a session for real may still wait in the partition.
// At each tick the runtime reads the last stable offsets of the input
// partitions (one ListOffsets read_committed for all tasks, made beside
// the processing loop and bounded by 5s; on error the tick is skipped and
// retried 500ms later, never run blind) and runs a task's due punctuations, with the tick's time, only once the
// task's consume position (after the last polled record, transaction
// markers included; else the committed offset) reaches that offset. Until
// then the tick is deferred, checked again after every poll, and counted
// in punctuations_deferred_total{reason=behind|lso_unavailable}. So what a
// timer does depends only on what Kafka held at the tick.
//
// A punctuation works in bounded batches and catches up with a backlog by
// calling Task.MoreDue: the runtime commits the open transaction at once
// and runs it again, with the same tick time and after the same LSO check,
// in the next transaction, until a run does not call MoreDue; only then is
// it rescheduled one interval later. Each run is its own small transaction
// and the records already fetched for every partition are processed
// between two runs, so 100,000 due sessions close as a thousand commits of
// a hundred, not one huge transaction, and not one batch per interval. A
// transaction that carries no input offsets (punctuation output only) is
// committed on the client after the membership check, without
// GroupTransactSession.End's 500ms pause after an offset-less commit.
//
// # Memory
//
// A transaction produces thousands of short-lived records. Task.NewRecord,
// Task.NewHeaders, Task.Bytes and Task.StringBytes hand out memory
// from a per-runtime arena that is reused once the transaction has ended
// (kgo has then released every record), so emitting costs the garbage
// collector nothing; the runtime's changelog records use it too. Records
// built on the heap work as before. The Store applies writes directly to
// its map and remembers, per key written in the transaction, the value to
// restore on abort and the last value for the changelog.
//
// # Metrics
//
// Registered on Registerer, labelled by processor: roomflow_process_
// records_in_total and records_out_total (per topic, committed
// transactions only; out includes changelog and DLQ records), dlq_total
// (per reason), txn_duration_seconds, txn_commits_total, txn_aborts_total
// (per cause: rebalance, restore, produce, flush, membership,
// unowned_partition, commit_error, shutdown), restore_duration_seconds, restore_records_total
// (counted as read: restore progress), restoring_partitions, state_keys
// and state_bytes (per partition), consumer_lag_records (per partition,
// kadm, every LagInterval; also under the deprecated name consumer_lag
// for one release), punctuations_total (runs per name; each catch-up run
// counts), punctuations_deferred_total
// (per reason), partition_stalled (per owned partition, 1 while stalled) and
// partition_stalls_total (failed attempts, per cause: record, punctuation).
//
// # Time
//
// Task.Now and punctuations read the injected Config.Now (time.Now by default),
// never time.Now directly, so processors stay deterministic and timer tests
// can drive time.
package streams
