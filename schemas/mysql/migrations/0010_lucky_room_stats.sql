-- Room-level lucky signals (sinks/mysql/luckystats): per app, room and UTC
-- hour, the draws and their coins from LuckyGiftDrawn, the rejections after
-- room-service's debit and their coins (to refund) from LuckyDrawRejected.
-- payout_ppm is derived (coins_out per coin in, in ppm) so it never
-- disagrees with the sums. `roomflow purge` deletes hours older than
-- purge.lucky_room_stats_hourly by idx_lucky_room_stats_hour.
CREATE TABLE IF NOT EXISTS lucky_room_stats_hourly (
  app_code VARCHAR(32) NOT NULL,
  room_id VARCHAR(64) NOT NULL,
  hour_start_ms BIGINT NOT NULL,
  draws BIGINT NOT NULL DEFAULT 0,
  hits BIGINT NOT NULL DEFAULT 0,
  coins_in BIGINT NOT NULL DEFAULT 0,
  coins_out BIGINT NOT NULL DEFAULT 0,
  rejections BIGINT NOT NULL DEFAULT 0,
  rejected_coins BIGINT NOT NULL DEFAULT 0,
  payout_ppm BIGINT AS (IF(coins_in = 0, 0, coins_out * 1000000 DIV coins_in)) VIRTUAL,
  updated_at_ms BIGINT NOT NULL DEFAULT 0,
  PRIMARY KEY (app_code, room_id, hour_start_ms),
  KEY idx_lucky_room_stats_hour (hour_start_ms)
);
