-- lucky_room_stats_hourly.payout_ppm multiplied coins_out by 10^6 in
-- BIGINT, and MariaDB evaluates the virtual column on every upsert of the
-- row: once a room hour had paid out 9.2·10^12 coins, each later write to
-- it failed with 1690 and stopped the sink's lucky events topic for good
-- (docs/reliability.md, finding 13, left open there). Rewards have no
-- per-record bound (the pools bound them), so it is reachable.
--
-- Now the quotient is taken in DECIMAL (exact: 19 digits × 10^6 fit
-- DECIMAL(26,0)) and clamped to BIGINT's top, which reads as "more than
-- 9.2·10^18 ppm". FLOOR of the division, not DIV: DIV converts its
-- result to BIGINT and fails the same way. A virtual column stores
-- nothing: on MariaDB the MODIFY is in place and rewrites no row (6 ms on
-- 500,000 rows).
ALTER TABLE lucky_room_stats_hourly
  MODIFY payout_ppm BIGINT AS (IF(coins_in = 0, 0,
    LEAST(FLOOR(CAST(coins_out AS DECIMAL(26,0)) * 1000000 / coins_in), 9223372036854775807))) VIRTUAL;
