-- Provably fair draws (issue 34, docs/fairness.md). A day's mode and seed
-- per (app_code, day): the row is made once, at least a day ahead, by
-- whichever `roomflow lucky` replica's INSERT IGNORE wins (the others read
-- it) and never changes but for the reveal. seed_sealed is the seed under
-- AES-256-GCM (lucky.fairness.key), empty in crypto mode; commitment is
-- hex SHA-256(seed); revealed_seed is the seed in clear (hex) once
-- revealed, what the API serves; it never holds the key.
CREATE TABLE lucky_fairness_days (
  app_code VARCHAR(32) NOT NULL,
  day_start_ms BIGINT NOT NULL,
  day_end_ms BIGINT NOT NULL,
  day_label VARCHAR(32) NOT NULL,
  mode VARCHAR(16) NOT NULL,
  seed_sealed VARBINARY(128) NOT NULL DEFAULT '',
  commitment CHAR(64) NOT NULL DEFAULT '',
  revealed_seed CHAR(64) NULL,
  committed_at_ms BIGINT NOT NULL,
  revealed_at_ms BIGINT NOT NULL DEFAULT 0,
  PRIMARY KEY (app_code, day_start_ms),
  UNIQUE KEY uk_lucky_fairness_days_label (app_code, day_label)
);
-- `roomflow lucky fairness schedule --mode M --from DAY`: the mode of the
-- days from DAY on (the latest from_day_ms at or before a day wins),
-- copied into lucky_fairness_days when that day is made; a day no row
-- covers takes lucky.randomness.
CREATE TABLE lucky_fairness_schedule (
  app_code VARCHAR(32) NOT NULL,
  from_day_ms BIGINT NOT NULL,
  mode VARCHAR(16) NOT NULL,
  operator VARCHAR(64) NOT NULL DEFAULT '',
  created_at_ms BIGINT NOT NULL,
  PRIMARY KEY (app_code, from_day_ms)
);
-- A draw's fairness material: the user's client_seed, its nonce (0 in
-- crypto mode) and the mode it was drawn in; random_value already holds
-- the value. The nonce counter per (app_code, user, day) is a
-- lucky_risk_counters row (scope_type 'nonce', window_type
-- 'fairness_day'), counted with the risk counters in the draw
-- transaction. The index serves `fairness verify` and the user's own draws.
ALTER TABLE lucky_draw_records
  ADD COLUMN client_seed VARCHAR(64) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL DEFAULT '',
  ADD COLUMN nonce BIGINT NOT NULL DEFAULT 0,
  ADD COLUMN fairness_mode VARCHAR(16) NOT NULL DEFAULT 'crypto',
  ADD KEY idx_lucky_draw_records_app_created (app_code, created_at_ms);
