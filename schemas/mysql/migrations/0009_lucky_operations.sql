-- The lucky draw service in its operators' hands (issue 31).

-- The fence: one row. Every draw transaction first reads it with a shared
-- lock; every operator change first updates it. So a change waits for the
-- draw batches that saw the old state to commit, the batches after it see
-- the new state, and the command returns only then, on every replica.
CREATE TABLE IF NOT EXISTS lucky_fence (
  id TINYINT NOT NULL,
  version BIGINT NOT NULL DEFAULT 0,
  updated_at_ms BIGINT NOT NULL DEFAULT 0,
  PRIMARY KEY (id)
);
INSERT IGNORE INTO lucky_fence (id) VALUES (1);

-- Exactly one outcome per command: a rejected ExecuteLuckyGiftDraw (after
-- room-service's debit) is a lucky_draw_records row with reward_status
-- 'rejected' and its reason, under the same unique (app_code, command_id)
-- and draw_id as a draw, so the idempotency read finds either outcome
-- (a departure from the seed's reward_status list: none, pending,
-- granted, failed).
ALTER TABLE lucky_draw_records ADD COLUMN reject_reason VARCHAR(32) NOT NULL DEFAULT '';

-- Who changed what (roomflow lucky admin-log): one row per change of an
-- operator command, written in the change's transaction.
CREATE TABLE IF NOT EXISTS lucky_admin_log (
  id BIGINT NOT NULL AUTO_INCREMENT,
  app_code VARCHAR(32) NOT NULL DEFAULT '',
  operator VARCHAR(64) NOT NULL DEFAULT '',
  host VARCHAR(255) NOT NULL DEFAULT '',
  command VARCHAR(32) NOT NULL,
  target VARCHAR(200) NOT NULL DEFAULT '',
  old_value VARCHAR(255) NOT NULL DEFAULT '',
  new_value VARCHAR(255) NOT NULL DEFAULT '',
  created_at_ms BIGINT NOT NULL,
  PRIMARY KEY (id),
  KEY idx_lucky_admin_log_created (created_at_ms)
);
