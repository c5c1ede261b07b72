package command

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/hyapp/roomflow/internal/app"
	"github.com/hyapp/roomflow/internal/kafkax"
	"github.com/hyapp/roomflow/producers/relay"
	"github.com/hyapp/roomflow/sinks/mysql/retention"
)

func purgeCmd(g *globals) *cobra.Command {
	var dryRun bool
	cmd := &cobra.Command{
		Use:   "purge",
		Short: "Delete consumption rows and room-level lucky facts older than purge.* windows (and, if enabled, relayed delivered room_outbox rows), then exit",
		Long:  help("purge"),
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			d, err := g.deps()
			if err != nil {
				return err
			}
			defer d.Close()
			return purge(cmd.Context(), d, dryRun, cmd.OutOrStdout())
		},
	}
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "count the rows that would be deleted, delete nothing")
	return cmd
}

// purge checks the windows against the brokers' retention, then runs one
// pass and prints what it did per table.
func purge(ctx context.Context, d *app.Deps, dryRun bool, w io.Writer) error {
	cfg := d.Config
	var topics []string
	for _, ts := range purgeTopics(cfg.Kafka.Topics) {
		topics = append(topics, ts...)
	}
	kctx, cancel := context.WithTimeout(ctx, kafkaTimeout)
	replay, err := topicRetention(kctx, d, topics)
	cancel()
	if err != nil {
		return fmt.Errorf("purge: %w", err)
	}
	relayedBelow := func(ctx context.Context) (uint64, bool, error) {
		ctx, cancel := context.WithTimeout(ctx, kafkaTimeout)
		defer cancel()
		pos, found, err := relay.ReadCommittedPosition(ctx, cfg.Kafka.Cluster(nil, d.Log), cfg.Kafka.Topics.RelayOffsets, cfg.Relay.TransactionalID)
		return pos.RelayedBelow(), found, err
	}
	c, err := purgeConfig(d, replay, relayedBelow)
	if err != nil {
		return err
	}
	c.DryRun = dryRun
	db, err := d.DB(ctx)
	if err != nil {
		return err
	}
	p, err := retention.New(c, db)
	if err != nil {
		return err
	}
	start := time.Now()
	res, err := p.Run(ctx)
	printPurge(w, res, dryRun)
	if err != nil {
		return err
	}
	var total int64
	for _, r := range res {
		total += r.Rows
	}
	d.Log.Info("purge done", "component", "purge", "rows", total, "dry_run", dryRun, "duration", time.Since(start))
	return nil
}

// kafkaTimeout bounds each of purge's Kafka reads (the brokers' topic
// configs, the relay's position): a cluster that does not answer fails
// the pass instead of hanging the CronJob.
const kafkaTimeout = 2 * time.Minute

func printPurge(w io.Writer, res []retention.TableResult, dryRun bool) {
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
func topicRetention(ctx context.Context, d *app.Deps, topics []string) (map[string]time.Duration, error) {
	cl, err := d.Config.Kafka.Cluster(nil, d.Log).NewClient("purge")
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	return kafkax.TopicRetention(ctx, kadm.NewClient(cl), topics...)
}
