-- Funds applied under an id (`roomflow lucky pools fund --fund-id`): a
-- retry after a timeout or a lost answer funded the pool again. The fund
-- inserts its row in the transaction of the pool upsert and the
-- lucky_admin_log row, so the primary key lets one run of an id apply and
-- makes every other (a retry, a second pod of a Job) find what it applied.
-- fund_id is byte exact like the ids of 0015 and as wide as command_id;
-- scope_id is lucky_pools'. reserve_floor NULL: the fund left the floor
-- as it was. Funds without an id write no row here.
CREATE TABLE IF NOT EXISTS lucky_pool_funds (
  app_code VARCHAR(32) NOT NULL,
  fund_id VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
  scope_type VARCHAR(16) NOT NULL,
  scope_id VARCHAR(64) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
  amount BIGINT NOT NULL,
  reserve_floor BIGINT NULL,
  operator VARCHAR(64) NOT NULL DEFAULT '',
  created_at_ms BIGINT NOT NULL,
  PRIMARY KEY (app_code, fund_id)
);
