-- Seed 001 allows a mic_session_id of 128 bytes; the timer close's ledger
-- event id "MicSessionCompensated:{mic_session_id}" is then 150 bytes
-- (processors/mic MaxDerivedEventIDLen). It is stored as the consumption
-- row's event_id and as the session's closed_event_id and last_event_id, so
-- these columns grow to 160. Widening a VARCHAR is re-runnable (MODIFY to
-- the same definition is a no-op) and keeps every existing value.
ALTER TABLE user_mic_event_consumption MODIFY event_id VARCHAR(160) NOT NULL;
ALTER TABLE user_mic_sessions MODIFY closed_event_id VARCHAR(160) NOT NULL DEFAULT '',
  MODIFY last_event_id VARCHAR(160) NOT NULL;
