-- Exact mic-stats ranges (statsapi Store.Range) read a user's closed
-- sessions that ended at or after from_ms; this covering index makes that
-- an index-only range scan instead of a walk over every session of the user.
ALTER TABLE user_mic_sessions
  ADD KEY idx_user_mic_sessions_user_ended (app_code, user_id, ended_at_ms, seat_started_at_ms, publishing_started_at_ms);
