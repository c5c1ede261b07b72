// Package mysqlsink is the engine of `roomflow sink`: it applies Kafka
// topics to MySQL exactly once. It knows nothing about facts: each input
// topic has an Applier, registered in StoreConfig.Appliers with Register,
// that decodes its records and writes their facts, recording every event in
// its own consumption table. `roomflow sink` registers three:
//
//   - micledger: hyapp.user.mic-ledger.v1 (userv1.MicLedgerEntry) into
//     user_mic_event_consumption, user_mic_sessions, user_mic_daily_stats,
//     user_mic_lifetime_stats;
//   - luckyinflow: hyapp.activity.lucky-pool-inflow.v1
//     (activityv1.LuckyPoolInflow) into lucky_pool_inflow_consumption,
//     lucky_pool_inflow_claims, lucky_pool_inflow_daily and lucky_pools;
//   - luckystats: hyapp.activity.lucky-events.v1 (the lucky events of
//     `roomflow lucky`) into lucky_event_consumption,
//     lucky_payout_stats_hourly and lucky_room_stats_hourly.
//
// A new fact stream is a new applier package (Topic, Decode, Apply,
// SharedRows; Consumption does the event_id dedupe) and one Register line
// where the store's config is built (cmd/roomflow's sink wiring); the
// engine, its offsets table and its tests stay as they are.
//
// # Use
//
// A Store (StoreConfig: the group and the appliers) writes to MySQL; a
// Sink (Config: batching, retries, the DLQ topic, the Kafka cluster,
// metrics, logs) consumes the appliers' topics into it:
//
//	ledger, err := micledger.New(micledger.Config{Topic: "hyapp.user.mic-ledger.v1", DefaultAppCode: "hyapp"})
//	...
//	store, err := mysqlsink.NewStore(mysqlsink.StoreConfig{
//		Group:    "roomflow-mysql-sink",
//		Appliers: []mysqlsink.Registration{mysqlsink.Register(ledger)},
//	}, db)
//	...
//	sink, err := mysqlsink.New(mysqlsink.Config{
//		Kafka:      kafkax.Cluster{Brokers: []string{"127.0.0.1:9092"}},
//		Registerer: prometheus.DefaultRegisterer,
//	}, store)
//	...
//	err = sink.Run(ctx)
//
// Zero fields take the defaults documented on Config (those of `roomflow
// sink`); New and NewStore return the fields that do not validate as
// *cfgerr.FieldError, keyed by the field's snake-case name.
//
// # Exactly once
//
// Each batch is one MySQL transaction (Store.Apply) that
//
//  1. locks the batch's rows of roomflow_sink_offsets (SELECT ... FOR
//     UPDATE, by whole primary key: only those rows, so the concurrent
//     transactions of one batch do not wait for each other) and checks
//     that this instance still owns each partition at the generation it
//     claimed; otherwise nothing is written and FencedError names the
//     partitions;
//  2. skips records below the offset stored for their partition (a retry
//     after a commit whose outcome was lost);
//  3. hands each topic's remaining items to its applier (topics in sorted
//     order), which inserts each new (app_code, event_id) into its
//     consumption table (Consumption.Consume: ids already there, or
//     repeated in the batch, are counted as deduplicated and contribute
//     nothing; an optimistic multi-row INSERT that on a duplicate key
//     rolls back to a savepoint and looks the ids up) and writes the facts
//     of the new events, pre-aggregated per row;
//  4. stores the next offset of every partition in the batch.
//
// On assignment (kgo.AdjustFetchOffsetsFn) the sink claims the new
// partitions in roomflow_sink_offsets (owner_id = this instance,
// generation + 1) and starts each at the offset stored there, so a
// revoked or zombie instance can no longer commit, and a claim waits for
// an in-flight commit of the previous owner and then reads its offsets.
// A zombie's fenced batch drops the fenced partitions' records, and the
// sink then replaces its Kafka client: franz-go may rejoin an evicted
// member still owning its old partitions, which nothing would claim again.
// Offsets committed to Kafka are informational only (lag tools).
//
// # Failures
//
// Deadlocks (1213), lock wait timeouts (1205), duplicate keys from a
// concurrent insert (1062) and lost connections roll the transaction back
// and retry the whole batch, up to Config.MaxRetries, with backoff. Records
// an applier's Decode refuses (undecodable, missing ids, values wider than
// their column, ids of byte-exact key columns ending in a space) go to
// Config.DLQTopic with headers naming the error and the source position,
// and their offsets advance with the batch. Any other MySQL error stops the
// sink (Run returns it); nothing of the failed batch was applied, and a
// restart resumes from the stored offsets.
//
// # Throughput
//
// A batch is up to Config.BatchSize records or what arrived within
// Config.FlushInterval. Batches are split by partition into up to
// Config.Parallelism concurrent transactions: the mic ledger is keyed by
// user_id, so its partitions share no row; the partitions of a topic whose
// applier reports SharedRows (the lucky pool inflow: every inflow adds to
// the (platform, global) row; the lucky events: a room's hour gets draws of
// gifts from every partition) stay in one transaction, so a shared row is
// written once per batch. Appliers write rows in primary-key order by
// multi-row statements (Tx.ExecRows).
//
// The read side, the stats HTTP API, is package statsapi.
package mysqlsink
