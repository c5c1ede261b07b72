-- Seed 003 lucky gift rules, tiers and pools, plus the inflow consumption
-- table of the MySQL sink. lucky_gift_rules adds platform_weight_ppm and
-- room_weight_ppm (design.md); the gift layer takes the remainder.
CREATE TABLE IF NOT EXISTS lucky_gift_rules (
  id BIGINT NOT NULL AUTO_INCREMENT,
  gift_id VARCHAR(64) NOT NULL,
  rule_version VARCHAR(64) NOT NULL,
  gift_price BIGINT NOT NULL DEFAULT 0,
  pool_rate_ppm INT NOT NULL DEFAULT 0,
  target_payout_rate_ppm INT NOT NULL DEFAULT 0,
  max_single_payout BIGINT NOT NULL DEFAULT 0,
  max_user_daily_payout BIGINT NOT NULL DEFAULT 0,
  max_room_hourly_payout BIGINT NOT NULL DEFAULT 0,
  status VARCHAR(16) NOT NULL DEFAULT 'draft',
  effective_at_ms BIGINT NOT NULL DEFAULT 0,
  created_at_ms BIGINT NOT NULL DEFAULT 0,
  updated_at_ms BIGINT NOT NULL DEFAULT 0,
  platform_weight_ppm INT NOT NULL DEFAULT 0,
  room_weight_ppm INT NOT NULL DEFAULT 0,
  PRIMARY KEY (id),
  UNIQUE KEY uk_lucky_gift_rules_version (gift_id, rule_version)
);

CREATE TABLE IF NOT EXISTS lucky_reward_tiers (
  id BIGINT NOT NULL AUTO_INCREMENT,
  gift_id VARCHAR(64) NOT NULL,
  rule_version VARCHAR(64) NOT NULL,
  tier_id VARCHAR(64) NOT NULL,
  reward_type VARCHAR(16) NOT NULL DEFAULT 'none',
  reward_value BIGINT NOT NULL DEFAULT 0,
  probability_ppm INT NOT NULL DEFAULT 0,
  min_pool_balance BIGINT NOT NULL DEFAULT 0,
  enabled BOOLEAN NOT NULL DEFAULT TRUE,
  PRIMARY KEY (id),
  UNIQUE KEY uk_lucky_reward_tiers (gift_id, rule_version, tier_id)
);

CREATE TABLE IF NOT EXISTS lucky_pools (
  app_code VARCHAR(32) NOT NULL,
  scope_type VARCHAR(16) NOT NULL,
  scope_id VARCHAR(64) NOT NULL,
  balance BIGINT NOT NULL DEFAULT 0,
  reserve_floor BIGINT NOT NULL DEFAULT 0,
  total_in BIGINT NOT NULL DEFAULT 0,
  total_out BIGINT NOT NULL DEFAULT 0,
  version BIGINT NOT NULL DEFAULT 0,
  updated_at_ms BIGINT NOT NULL DEFAULT 0,
  PRIMARY KEY (app_code, scope_type, scope_id)
);

CREATE TABLE IF NOT EXISTS lucky_pool_inflow_consumption (
  app_code VARCHAR(32) NOT NULL,
  event_id VARCHAR(160) NOT NULL,
  source_event_id VARCHAR(128) NOT NULL DEFAULT '',
  room_id VARCHAR(64) NOT NULL DEFAULT '',
  gift_id VARCHAR(64) NOT NULL DEFAULT '',
  rule_version VARCHAR(64) NOT NULL DEFAULT '',
  pool_in BIGINT NOT NULL DEFAULT 0,
  platform_in BIGINT NOT NULL DEFAULT 0,
  room_in BIGINT NOT NULL DEFAULT 0,
  gift_in BIGINT NOT NULL DEFAULT 0,
  status VARCHAR(32) NOT NULL DEFAULT 'consumed',
  occurred_at_ms BIGINT NOT NULL DEFAULT 0,
  created_at_ms BIGINT NOT NULL DEFAULT 0,
  PRIMARY KEY (app_code, event_id)
);
