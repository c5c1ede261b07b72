package relay

import (
	"context"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hyapp/roomflow/internal/kafkax"
)

// CheckBinlogServer runs binlog mode's start-up checks (tests).
func (r *Relay) CheckBinlogServer(ctx context.Context) error {
	_, err := r.checkBinlogServer(ctx)
	return err
}

// StorePosition commits p as relay name's position in topic, as its leader
// would (tests: positions a relay on MariaDB never writes, such as a
// file/offset one).
func StorePosition(ctx context.Context, cluster kafkax.Cluster, topic, name string, p Position) error {
	cl, err := cluster.NewClient(Component+"-test", kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		return err
	}
	defer cl.Close()
	return cl.ProduceSync(ctx, positionRecord(topic, name, EncodePosition(p))).FirstErr()
}
