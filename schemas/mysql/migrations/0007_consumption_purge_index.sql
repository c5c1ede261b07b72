-- `roomflow purge` (sinks/mysql/retention) deletes consumption rows older
-- than its windows in small batches by their processing time: these
-- indexes make each batch a range scan of the oldest rows instead of a
-- full walk of the table. user_mic_event_consumption.updated_at_ms and the
-- lucky tables' created_at_ms are written once, with the sink's batch
-- time (never the event's time).
ALTER TABLE user_mic_event_consumption ADD KEY idx_user_mic_event_purge (updated_at_ms);
ALTER TABLE lucky_pool_inflow_consumption ADD KEY idx_lucky_pool_inflow_purge (created_at_ms);
ALTER TABLE lucky_event_consumption ADD KEY idx_lucky_event_purge (created_at_ms);
