-- A rejected Execute whose gift the sink had already streamed takes that
-- inflow back in its transaction (issue 31, docs/reliability.md finding
-- 8): it finds the sink's consumption row by draw_id. The claim and the
-- consumption row of such a gift read 'reversed' (claimed_by, status:
-- both VARCHAR, no schema change).
ALTER TABLE lucky_pool_inflow_consumption ADD KEY idx_lucky_pool_inflow_draw (app_code, draw_id);
