-- lucky.outbox_format draw_events (issue 36): one row per draw carrying the
-- draw's lucky events (LuckyGiftDrawn, LuckyPoolChanged x3,
-- LuckyRiskRejected x n, LuckyRewardPending attempt 0), published by the
-- lucky_outbox worker of this release. A table of its own: the claim of an
-- older worker reads lucky_outbox only, so it never sees these rows.
-- events: a protobuf-encoded sequence (field 1, repeated) of (1
-- message_type, 2 event_id, 3 kafka_key, 4 payload); event_count and
-- message_types (comma-separated, distinct) let the backlog gauges count
-- events by message type without decoding. status, retry_count, the lease
-- and last_error work as in lucky_outbox (a row that cannot be decoded is
-- failed with its reason, never produced).
CREATE TABLE IF NOT EXISTS lucky_draw_events (
  draw_id VARCHAR(64) NOT NULL,
  app_code VARCHAR(32) NOT NULL DEFAULT '',
  events MEDIUMBLOB NOT NULL,
  event_count INT NOT NULL,
  message_types VARCHAR(255) NOT NULL,
  status VARCHAR(16) NOT NULL DEFAULT 'pending',
  retry_count INT NOT NULL DEFAULT 0,
  next_retry_at_ms BIGINT NOT NULL DEFAULT 0,
  lock_until_ms BIGINT NOT NULL DEFAULT 0,
  worker_id VARCHAR(64) NOT NULL DEFAULT '',
  last_error VARCHAR(512) NULL,
  created_at_ms BIGINT NOT NULL,
  updated_at_ms BIGINT NOT NULL,
  PRIMARY KEY (draw_id),
  KEY idx_lucky_draw_events_due (status, next_retry_at_ms)
);
