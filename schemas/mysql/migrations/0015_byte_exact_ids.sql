-- Ids that key rows and that roomflow also keys by their bytes in Go
-- (docs/reliability.md finding 12) become byte exact. They took the
-- server's default collation (utf8mb4_general_ci, utf8mb4_0900_ai_ci on
-- MySQL 8.0), which ignores letter case: "abc" and "ABC" were two ids to
-- the sink's dedupe, the mic processor's state and the draw service, one
-- key to MySQL, so the second's insert failed with a duplicate key on
-- every retry (the sink stopped), two sessions shared a row, and a draw
-- batch failed or panicked on a pool or counter row read back under the
-- other id.
--
-- utf8mb4_bin: the one byte-exact collation MySQL 5.7, 8.0 and MariaDB
-- 10.11 share (0013 uses it already). It still pads trailing spaces
-- ("abc" = "abc "), so every stage refuses an id ending in a space where
-- it takes it in (envelope.CheckID: dead letter padded_id, or
-- InvalidArgument), and roomflow's own ids never end in one.
-- utf8mb4_nopad_bin is MariaDB's alone, utf8mb4_0900_bin MySQL 8.0's, and
-- VARBINARY would change the type of user_mic_sessions, which other teams
-- read. Names, widths, defaults and indexes stay; a comparison with a
-- column or value of another utf8mb4 collation (a join) takes the _bin
-- one, so it works, and is byte exact.
--
-- An ALTER of a primary key column copies its table (docs/operations.md,
-- Migration 0015: time per million rows, what waits meanwhile). Re-run,
-- MODIFY to the same definition changes nothing. On MySQL 8.0, whose
-- default collation does not pad, an ALTER fails with a duplicate key if a
-- table holds two ids that differ only in trailing spaces.
ALTER TABLE user_mic_event_consumption
  MODIFY event_id VARCHAR(160) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
  MODIFY mic_session_id VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL;
ALTER TABLE user_mic_sessions
  MODIFY mic_session_id VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL;
-- draw_id too: a rejection finds the consumption rows of the draw ids it
-- claimed by it, and must find exactly those.
ALTER TABLE lucky_pool_inflow_consumption
  MODIFY event_id VARCHAR(160) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
  MODIFY draw_id VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL DEFAULT '';
ALTER TABLE lucky_pool_inflow_claims
  MODIFY draw_id VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL;
ALTER TABLE lucky_event_consumption
  MODIFY event_id VARCHAR(160) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL;
-- The draw service's keys from its callers: the idempotency key, and the
-- room and gift ids of the pool rows and (inside counter_key) the room
-- and device ids of the risk counters it locks and reads back by key.
ALTER TABLE lucky_draw_records
  MODIFY command_id VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL;
ALTER TABLE lucky_pools
  MODIFY scope_id VARCHAR(64) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL;
ALTER TABLE lucky_risk_counters
  MODIFY counter_key VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL;
