package luckydraw

import (
	"context"
	"database/sql"
	"fmt"
	"time"
)

// RecordOwnership records, once, that the draw service owns lucky_pools'
// balances (lucky_pool_owner id 1, owner 'draw_service'): from the
// transaction that inserts it, the stream inflow applier stops adding to
// balances. It is idempotent (a later start, by any instance, keeps the
// first row) and needs only MySQL; `roomflow lucky` calls it before
// serving.
func RecordOwnership(ctx context.Context, db *sql.DB, instanceID string, now time.Time) error {
	if len(instanceID) > 128 {
		instanceID = instanceID[:128]
	}
	if _, err := db.ExecContext(ctx, `INSERT IGNORE INTO lucky_pool_owner (id, owner, instance_id, owned_at_ms)
VALUES (1, 'draw_service', ?, ?)`, instanceID, now.UnixMilli()); err != nil {
		return fmt.Errorf("luckydraw: record pool ownership: %w", err)
	}
	return nil
}
