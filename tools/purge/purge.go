// Package purge is what `roomflow purge` does beyond its flags: it reads
// the brokers' retention of the topics each consumption table dedupes and
// the relay's committed position, checks the purge.* windows against
// them (sinks/mysql/retention), runs one pass and prints what it did per
// table.
package purge

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/hyapp/roomflow/internal/config"
	"github.com/hyapp/roomflow/internal/kafkax"
	"github.com/hyapp/roomflow/producers/relay"
	"github.com/hyapp/roomflow/sinks/mysql/retention"
)

// Options are a pass's: DryRun counts and deletes nothing; DB opens
// MySQL once the config is known valid; Registerer and Logger get the
// pass's metrics and lines.
type Options struct {
	DryRun     bool
	DB         func(context.Context) (*sql.DB, error)
	Registerer prometheus.Registerer
	Logger     *slog.Logger
}

// kafkaTimeout bounds each of purge's Kafka reads (the brokers' topic
// configs, the relay's position): a cluster that does not answer fails
// the pass instead of hanging the CronJob.
const kafkaTimeout = 2 * time.Minute

// Run checks the windows against the brokers' retention, then runs one
// pass and prints what it did per table to w. A window shorter than its
// topics' retention stops it with an error naming the key.
func Run(ctx context.Context, app *config.Config, o Options, w io.Writer) error {
	var topics []string
	for _, ts := range retention.ReplayTopics(app.Kafka.Topics) {
		topics = append(topics, ts...)
	}
	kctx, cancel := context.WithTimeout(ctx, kafkaTimeout)
	replay, err := topicRetention(kctx, app, o.Logger, topics)
	cancel()
	if err != nil {
		return fmt.Errorf("purge: %w", err)
	}
	relayedBelow := func(ctx context.Context) (uint64, bool, error) {
		ctx, cancel := context.WithTimeout(ctx, kafkaTimeout)
		defer cancel()
		pos, found, err := relay.ReadCommittedPosition(ctx, app.Kafka.Cluster(nil, o.Logger), app.Kafka.Topics.RelayOffsets, app.Relay.TransactionalID)
		return pos.RelayedBelow(), found, err
	}
	c, err := retention.ConfigFrom(app, replay, retention.Config{RelayedBelow: relayedBelow, DryRun: o.DryRun,
		Registerer: o.Registerer, Logger: o.Logger})
	if err != nil {
		return err
	}
	db, err := o.DB(ctx)
	if err != nil {
		return err
	}
	p, err := retention.New(c, db)
	if err != nil {
		return err
	}
	start := time.Now()
	res, err := p.Run(ctx)
	Print(w, res, o.DryRun)
	if err != nil {
		return err
	}
	var total int64
	for _, r := range res {
		total += r.Rows
	}
	o.Logger.Info("purge done", "component", "purge", "rows", total, "dry_run", o.DryRun, "duration", time.Since(start))
	return nil
}

// Print writes a pass's result as a table: per table the rows deleted (or
// that would be, dry), the cut-off time, and a note (why it was skipped,
// or room_outbox's id bound).
func Print(w io.Writer, res []retention.TableResult, dryRun bool) {
	verb := "DELETED"
	if dryRun {
		verb = "WOULD_DELETE"
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "TABLE\t%s\tOLDER_THAN\tNOTE\n", verb)
	for _, r := range res {
		older, note := "-", r.Skipped
		if r.Skipped == "" {
			older = time.UnixMilli(r.BeforeMs).UTC().Format(time.RFC3339)
			if r.Table == retention.RoomOutbox {
				note = "delivered, id < " + strconv.FormatUint(r.BelowID, 10)
			}
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\n", r.Table, r.Rows, older, note)
	}
	tw.Flush()
}

// topicRetention is kafkax.TopicRetention on a client of purge's own.
func topicRetention(ctx context.Context, app *config.Config, log *slog.Logger, topics []string) (map[string]time.Duration, error) {
	cl, err := app.Kafka.Cluster(nil, log).NewClient("purge")
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	return kafkax.TopicRetention(ctx, kadm.NewClient(cl), topics...)
}
