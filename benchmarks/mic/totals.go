package main

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hyapp/roomflow/internal/config"
	"github.com/hyapp/roomflow/processors/mic"
	"github.com/hyapp/roomflow/processors/streams"
)

// Totals (issue 35). -totals=false runs the mic processor with
// mic.totals_enabled=false (make bench-compare A_ARGS=-totals=false
// B_ARGS=-totals=true); with it on, every changelog the benchmark's mic
// runs use gets the bootstrap markers first (markTotals), so closes keep
// and publish the totals as after `roomflow totals bootstrap`.
//
// -totals-users N measures the state of N users' totals: the changelog is
// filled as `roomflow totals bootstrap` fills it (each user's lifetime
// totals and one day, in the partition of the user's input partition, and
// the markers, written by newCfg); a fresh instance restores it. Reported: the restore time
// and the heap per user after restore.
var totalsOn = true

// markTotals writes the bootstrap marker of an empty database to every
// partition of changelog.
func markTotals(ctx context.Context, cfg *config.Config, changelog string) error {
	if !totalsOn {
		return nil
	}
	recs := make([]*kgo.Record, cfg.Kafka.Partitions)
	for p := range recs {
		recs[p] = &kgo.Record{Topic: changelog, Partition: int32(p), Key: []byte(mic.KeyTotalsBootstrap),
			Value: streams.ChangelogValue(mic.EncodeBootstrapMarker(0))}
	}
	return produceTo(ctx, cfg, recs, manual)
}

// manual places each record on the partition it names.
var manual = kgo.RecordPartitioner(kgo.ManualPartitioner())

// produceTo produces recs (with opts on the client, such as a
// partitioner) and waits for all of them.
func produceTo(ctx context.Context, cfg *config.Config, recs []*kgo.Record, opts ...kgo.Opt) error {
	cl, err := cfg.Kafka.Cluster(nil, nil).NewClient("bench-producer", append(opts,
		kgo.ProducerLinger(5*time.Millisecond), kgo.MaxBufferedRecords(200_000))...)
	if err != nil {
		return err
	}
	defer cl.Close()
	errc := make(chan error, 1)
	for _, r := range recs {
		cl.Produce(ctx, r, func(_ *kgo.Record, err error) {
			if err != nil {
				select {
				case errc <- err:
				default:
				}
			}
		})
	}
	if err := cl.Flush(ctx); err != nil {
		return err
	}
	select {
	case err := <-errc:
		return err
	default:
		return nil
	}
}

// totalsRun fills the changelog with users' totals and measures a restore.
func totalsRun(ctx context.Context, cfg *config.Config, users int, partitions int32, log *slog.Logger) error {
	r := rand.New(rand.NewPCG(5, 6))
	now := time.Now().UnixMilli()
	today := mic.DayOf(now)
	hash := kgo.StickyKeyPartitioner(nil).ForTopic("")
	recs := make([]*kgo.Record, 0, 100_000)
	var valueBytes int
	for i := range users {
		user := int64(10_000_000 + i)
		first := now - r.Int64N(400*mic.DayMs)
		t := mic.Totals{SeatOccupiedMs: r.Int64N(2_000 * 3_600_000), SessionCount: 1 + r.Int64N(2_000), FirstMicAtMs: first,
			LastMicAtMs: now - r.Int64N(3_600_000)}
		t.MicOnlineMs = t.SeatOccupiedMs * 9 / 10
		d := mic.DayTotals{Day: today, SeatOccupiedMs: r.Int64N(8 * 3_600_000), SessionCount: 1 + r.Int64N(5), RoomCount: 1 + r.Int64N(3),
			FirstMicAtMs: today*mic.DayMs + r.Int64N(3_600_000)}
		d.MicOnlineMs, d.LastMicAtMs = d.SeatOccupiedMs*9/10, d.FirstMicAtMs+d.SeatOccupiedMs
		t.Days = []mic.DayTotals{d}
		v := t.AppendBinary(nil)
		valueBytes += len(v)
		p := int32(hash.Partition(&kgo.Record{Key: []byte(strconv.FormatInt(user, 10))}, int(partitions)))
		recs = append(recs, &kgo.Record{Topic: cfg.Kafka.Topics.MicStateChangelog, Partition: p,
			Key: []byte(mic.TotalsKey("hyapp", user)), Value: streams.ChangelogValue(v)})
		if len(recs) == cap(recs) {
			if err := produceTo(ctx, cfg, recs, manual); err != nil {
				return err
			}
			recs = recs[:0]
		}
	}
	if err := produceTo(ctx, cfg, recs, manual); err != nil {
		return err
	}
	fmt.Printf("\ntotals state: %d users, each with lifetime totals and one day (%.1f bytes of value per user)\n",
		users, float64(valueBytes)/float64(users))
	return restoreRun(ctx, cfg, users, partitions, log, "user with totals", 5, 150)
}
