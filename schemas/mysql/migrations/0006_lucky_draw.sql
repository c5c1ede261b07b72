-- Seed 003's draw service (roomflow lucky): draw records, risk counters,
-- the lucky outbox, run-time switches, pool ownership and inflow claims.
-- Seed columns keep their names; every added column has a default.

-- lucky_pools.funded: coins operators added (roomflow lucky pools fund), so
-- balance = funded + total_in - total_out holds per pool.
ALTER TABLE lucky_pools ADD COLUMN funded BIGINT NOT NULL DEFAULT 0;

CREATE TABLE IF NOT EXISTS lucky_draw_records (
  draw_id VARCHAR(64) NOT NULL,
  app_code VARCHAR(32) NOT NULL DEFAULT '',
  command_id VARCHAR(128) NOT NULL,
  request_id VARCHAR(128) NOT NULL DEFAULT '',
  billing_receipt_id VARCHAR(128) NOT NULL DEFAULT '',
  room_id VARCHAR(64) NOT NULL,
  sender_user_id BIGINT NOT NULL,
  target_user_id BIGINT NOT NULL DEFAULT 0,
  device_id VARCHAR(128) NOT NULL DEFAULT '',
  gift_id VARCHAR(64) NOT NULL,
  gift_count INT NOT NULL DEFAULT 0,
  coin_spent BIGINT NOT NULL DEFAULT 0,
  heat_value BIGINT NOT NULL DEFAULT 0,
  rule_version VARCHAR(64) NOT NULL,
  pool_in BIGINT NOT NULL DEFAULT 0,
  platform_in BIGINT NOT NULL DEFAULT 0,
  room_in BIGINT NOT NULL DEFAULT 0,
  gift_in BIGINT NOT NULL DEFAULT 0,
  -- draw: this draw added the inflow to lucky_pools; stream: the sink had
  -- already (the gift event landed before its draw committed).
  inflow_applied_by VARCHAR(16) NOT NULL DEFAULT 'draw',
  candidate_tiers_json JSON NOT NULL,
  selected_tier_id VARCHAR(64) NOT NULL,
  tier_type VARCHAR(16) NOT NULL DEFAULT 'none',
  reward_coins BIGINT NOT NULL DEFAULT 0,
  platform_out BIGINT NOT NULL DEFAULT 0,
  room_out BIGINT NOT NULL DEFAULT 0,
  gift_out BIGINT NOT NULL DEFAULT 0,
  random_value BIGINT NOT NULL DEFAULT 0,
  random_digest VARCHAR(64) NOT NULL,
  pool_snapshot_json JSON NOT NULL,
  risk_snapshot_json JSON NOT NULL,
  reward_id VARCHAR(80) NOT NULL DEFAULT '',
  reward_status VARCHAR(16) NOT NULL DEFAULT 'none',
  credit_receipt_id VARCHAR(128) NOT NULL DEFAULT '',
  created_at_ms BIGINT NOT NULL,
  updated_at_ms BIGINT NOT NULL,
  PRIMARY KEY (draw_id),
  UNIQUE KEY uk_lucky_draw_records_command (app_code, command_id),
  KEY idx_lucky_draw_records_created (created_at_ms),
  KEY idx_lucky_draw_records_reward (reward_status, created_at_ms)
);

-- counter_key = app_code|scope_type|scope_id|window_type|window_start_ms.
CREATE TABLE IF NOT EXISTS lucky_risk_counters (
  counter_key VARCHAR(255) NOT NULL,
  app_code VARCHAR(32) NOT NULL DEFAULT '',
  scope_type VARCHAR(16) NOT NULL,
  scope_id VARCHAR(128) NOT NULL,
  window_type VARCHAR(16) NOT NULL,
  payout_coins BIGINT NOT NULL DEFAULT 0,
  draw_count BIGINT NOT NULL DEFAULT 0,
  hit_count BIGINT NOT NULL DEFAULT 0,
  window_start_ms BIGINT NOT NULL,
  window_end_ms BIGINT NOT NULL,
  updated_at_ms BIGINT NOT NULL DEFAULT 0,
  PRIMARY KEY (counter_key)
);

-- event_type: reward_credit (a wallet credit to make) or activity_event (a
-- lucky event for kafka.topics.lucky_events); message_type names the
-- payload's message, kafka_key the record key (gift_id).
CREATE TABLE IF NOT EXISTS lucky_outbox (
  event_id VARCHAR(160) NOT NULL,
  app_code VARCHAR(32) NOT NULL DEFAULT '',
  event_type VARCHAR(32) NOT NULL,
  message_type VARCHAR(64) NOT NULL DEFAULT '',
  aggregate_id VARCHAR(64) NOT NULL,
  kafka_key VARCHAR(128) NOT NULL DEFAULT '',
  payload MEDIUMBLOB NOT NULL,
  status VARCHAR(16) NOT NULL DEFAULT 'pending',
  retry_count INT NOT NULL DEFAULT 0,
  next_retry_at_ms BIGINT NOT NULL DEFAULT 0,
  lock_until_ms BIGINT NOT NULL DEFAULT 0,
  worker_id VARCHAR(64) NOT NULL DEFAULT '',
  last_error VARCHAR(512) NULL,
  created_at_ms BIGINT NOT NULL,
  updated_at_ms BIGINT NOT NULL,
  PRIMARY KEY (event_id),
  KEY idx_lucky_outbox_due (status, next_retry_at_ms),
  KEY idx_lucky_outbox_aggregate (aggregate_id)
);

-- Operator overrides of the kill switches (roomflow lucky switch): a row
-- wins over lucky.switches.* until `switch NAME default` deletes it.
-- scope_id is '' for global switches, the room_id for room_scope_paused.
CREATE TABLE IF NOT EXISTS lucky_switches (
  app_code VARCHAR(32) NOT NULL,
  name VARCHAR(64) NOT NULL,
  scope_id VARCHAR(64) NOT NULL DEFAULT '',
  enabled BOOLEAN NOT NULL,
  updated_at_ms BIGINT NOT NULL DEFAULT 0,
  PRIMARY KEY (app_code, name, scope_id)
);

-- Who writes lucky_pools: one row, inserted by `roomflow lucky` at its
-- first start. Absent: the stream inflow (sink) writes the balances.
CREATE TABLE IF NOT EXISTS lucky_pool_owner (
  id TINYINT NOT NULL,
  owner VARCHAR(32) NOT NULL,
  instance_id VARCHAR(128) NOT NULL DEFAULT '',
  owned_at_ms BIGINT NOT NULL,
  PRIMARY KEY (id)
);

-- A gift's inflow enters lucky_pools exactly once: whichever of its draw
-- transaction and the sink inserts its draw_id here first adds it.
CREATE TABLE IF NOT EXISTS lucky_pool_inflow_claims (
  app_code VARCHAR(32) NOT NULL,
  draw_id VARCHAR(128) NOT NULL,
  claimed_by VARCHAR(16) NOT NULL,
  created_at_ms BIGINT NOT NULL DEFAULT 0,
  PRIMARY KEY (app_code, draw_id)
);

-- Daily inflow facts per pool scope, by the gift event's occurred_at_ms
-- (UTC), written by the sink whoever owns the balances.
CREATE TABLE IF NOT EXISTS lucky_pool_inflow_daily (
  app_code VARCHAR(32) NOT NULL,
  stat_date DATE NOT NULL,
  scope_type VARCHAR(16) NOT NULL,
  scope_id VARCHAR(64) NOT NULL,
  inflow BIGINT NOT NULL DEFAULT 0,
  gift_count BIGINT NOT NULL DEFAULT 0,
  updated_at_ms BIGINT NOT NULL DEFAULT 0,
  PRIMARY KEY (app_code, stat_date, scope_type, scope_id)
);

ALTER TABLE lucky_pool_inflow_consumption ADD COLUMN draw_id VARCHAR(128) NOT NULL DEFAULT '';

-- Hourly payout facts per gift and rule version from LuckyGiftDrawn
-- (sinks/mysql/luckystats), and the event ids it applied.
CREATE TABLE IF NOT EXISTS lucky_payout_stats_hourly (
  app_code VARCHAR(32) NOT NULL,
  gift_id VARCHAR(64) NOT NULL,
  rule_version VARCHAR(64) NOT NULL,
  hour_start_ms BIGINT NOT NULL,
  draws BIGINT NOT NULL DEFAULT 0,
  hits BIGINT NOT NULL DEFAULT 0,
  coins_in BIGINT NOT NULL DEFAULT 0,
  coins_out BIGINT NOT NULL DEFAULT 0,
  target_payout_rate_ppm BIGINT NOT NULL DEFAULT 0,
  updated_at_ms BIGINT NOT NULL DEFAULT 0,
  PRIMARY KEY (app_code, gift_id, rule_version, hour_start_ms),
  -- the payout gauges read the last hours of every gift (PayoutCollector)
  KEY idx_lucky_payout_stats_hour (app_code, hour_start_ms)
);

CREATE TABLE IF NOT EXISTS lucky_event_consumption (
  app_code VARCHAR(32) NOT NULL,
  event_id VARCHAR(160) NOT NULL,
  event_type VARCHAR(64) NOT NULL DEFAULT '',
  created_at_ms BIGINT NOT NULL DEFAULT 0,
  PRIMARY KEY (app_code, event_id)
);
