package relay

import "context"

// CheckBinlogServer runs binlog mode's start-up checks (tests).
func (r *Relay) CheckBinlogServer(ctx context.Context) error {
	_, err := r.checkBinlogServer(ctx)
	return err
}
