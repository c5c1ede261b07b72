// Package mysqlsink is `roomflow sink`: it applies the mic ledger
// (hyapp.user.mic-ledger.v1, userv1.MicLedgerEntry) and the lucky pool
// inflow (hyapp.activity.lucky-pool-inflow.v1, activityv1.LuckyPoolInflow)
// to MySQL exactly once.
//
// # Exactly once
//
// Each batch is one MySQL transaction (Store.Apply) that
//
//  1. locks the batch's rows of roomflow_sink_offsets (SELECT ... FOR
//     UPDATE) and checks that this instance still owns each partition at
//     the generation it claimed; otherwise nothing is written and
//     FencedError names the partitions;
//  2. skips records below the offset stored for their partition (a retry
//     after a commit whose outcome was lost);
//  3. inserts each new (app_code, event_id) into user_mic_event_consumption
//     or lucky_pool_inflow_consumption; ids already there are counted as
//     deduplicated and contribute nothing (an optimistic multi-row INSERT;
//     on a duplicate key it rolls back to a savepoint and looks the ids up);
//  4. applies the facts of the new events, pre-aggregated per row
//     (BuildFacts): user_mic_sessions upserted only by a higher
//     snapshot_version, user_mic_daily_stats and user_mic_lifetime_stats
//     incremented (first_mic_at_ms MIN ignoring 0, last_mic_at_ms MAX),
//     lucky_pools balance and total_in incremented with version + 1;
//  5. stores the next offset of every partition in the batch.
//
// Consumption rows keep the event's time as created_at_ms (occurred_at_ms;
// the processing time only when the entry has none), so a replay into an
// empty database reproduces them; consumed_at_ms and updated_at_ms are the
// processing time. Daily and lifetime updated_at_ms are the newest event
// time that touched the row, for the same reason.
//
// On assignment (kgo.AdjustFetchOffsetsFn) the sink claims the new
// partitions in roomflow_sink_offsets (owner_id = this instance,
// generation + 1) and starts each at the offset stored there, so a
// revoked or zombie instance can no longer commit, and a claim waits for
// an in-flight commit of the previous owner and then reads its offsets.
// Offsets committed to Kafka are informational only (lag tools).
//
// # Failures
//
// Deadlocks (1213), lock wait timeouts (1205), duplicate keys from a
// concurrent insert (1062) and lost connections roll the transaction back
// and retry the whole batch, up to sink.max_retries, with backoff. Records
// that can never be applied (undecodable, missing ids, values wider than
// their column) go to kafka.topics.dlq with headers naming the error and
// the source position, and their offsets advance with the batch. Any other
// MySQL error stops the sink (Run returns it); nothing of the failed batch
// was applied, and a restart resumes from the stored offsets.
//
// # Throughput
//
// A batch is up to sink.batch_size records or what arrived within
// sink.flush_interval. Batches are split by partition into up to
// WithParallelism concurrent transactions: partitions share no
// consumption key, session, daily or lifetime row (the ledger is keyed by
// user_id); all lucky pool inflow partitions stay in one transaction so
// the hot (platform, global) row is written once per batch. Rows are
// written in primary-key order by multi-row statements.
//
// The read side, the stats HTTP API, is package statsapi.
package mysqlsink
