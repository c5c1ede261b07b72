-- room_outbox exactly as in shared/design.md (written by room-service).
CREATE TABLE IF NOT EXISTS room_outbox (
  id BIGINT UNSIGNED NOT NULL AUTO_INCREMENT,
  app_code VARCHAR(32) NOT NULL,
  event_id VARCHAR(128) NOT NULL,
  event_type VARCHAR(64) NOT NULL,
  room_id VARCHAR(64) NOT NULL,
  room_version BIGINT NOT NULL DEFAULT 0,
  payload MEDIUMBLOB NOT NULL,
  status VARCHAR(16) NOT NULL DEFAULT 'pending',
  retry_count INT NOT NULL DEFAULT 0,
  last_error VARCHAR(512) NULL,
  worker_id VARCHAR(64) NOT NULL DEFAULT '',
  lock_until_ms BIGINT NOT NULL DEFAULT 0,
  occurred_at_ms BIGINT NOT NULL,
  created_at_ms BIGINT NOT NULL,
  updated_at_ms BIGINT NOT NULL,
  PRIMARY KEY (id),
  UNIQUE KEY uk_room_outbox_event_id (event_id),
  KEY idx_room_outbox_status (status, lock_until_ms, id)
);
