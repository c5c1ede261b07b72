-- Kafka positions of Kafka->MySQL stages, written in the same MySQL
-- transaction as the facts they cover. owner_id/generation fence a revoked
-- or zombie instance: a commit must match the row's current owner.
CREATE TABLE IF NOT EXISTS roomflow_sink_offsets (
  consumer_group VARCHAR(128) NOT NULL,
  topic VARCHAR(249) NOT NULL,
  partition_id INT NOT NULL,
  next_offset BIGINT NOT NULL DEFAULT 0,
  owner_id VARCHAR(128) NOT NULL DEFAULT '',
  generation BIGINT NOT NULL DEFAULT 0,
  updated_at_ms BIGINT NOT NULL DEFAULT 0,
  PRIMARY KEY (consumer_group, topic, partition_id)
);

-- The sink never regresses a stored session snapshot: it keeps the
-- snapshot's version next to the seed 001 columns (added with a default).
ALTER TABLE user_mic_sessions ADD COLUMN snapshot_version BIGINT NOT NULL DEFAULT 0;
