package command

import (
	"time"

	"github.com/spf13/cobra"

	"github.com/hyapp/roomflow/internal/config"
	"github.com/hyapp/roomflow/tools/dlq"
)

func dlqCmd(g *globals) *cobra.Command {
	var idle time.Duration
	cmd := &cobra.Command{
		Use:   "dlq",
		Short: "Summarise the dead-letter topic and re-drive fixed records to their source topics",
		Long:  help("dlq"),
	}
	cmd.PersistentFlags().DurationVar(&idle, "idle", 5*time.Second, "stop reading when nothing arrived for this long before the end was reached")
	cmd.AddCommand(dlqListCmd(g, &idle), dlqRedriveCmd(g, &idle))
	return cmd
}

func dlqListCmd(g *globals, idle *time.Duration) *cobra.Command {
	return newCmd("list", "Count dead letters by stage, error_reason and source topic, with their DLQ offsets", help("dlq-list"), cobra.NoArgs,
		g.withConfig(func(cmd *cobra.Command, args []string, cfg *config.Config) error {
			return dlq.List(cmd.Context(), cfg, *idle, cmd.OutOrStdout())
		}))
}

func dlqRedriveCmd(g *globals, idle *time.Duration) *cobra.Command {
	var o dlq.RedriveOptions
	cmd := newCmd("redrive", "Send chosen dead letters back to their source topics in one Kafka transaction", help("dlq-redrive"), cobra.NoArgs,
		g.withConfig(func(cmd *cobra.Command, args []string, cfg *config.Config) error {
			return dlq.Redrive(cmd.Context(), cfg, *idle, o, cmd.OutOrStdout())
		}))
	fs := cmd.Flags()
	fs.StringVar(&o.Offsets, "offsets", "", "DLQ positions: partition:offset or partition:first-last, comma separated")
	fs.StringVar(&o.Stage, "stage", "", "only letters of this stage (relay, room, mic, sink)")
	fs.StringVar(&o.Reason, "reason", "", "only letters with this error_reason")
	fs.StringVar(&o.SourceTopic, "source-topic", "", "only letters refused from this topic")
	fs.BoolVar(&o.All, "all", false, "choose every letter (with no other selection)")
	fs.BoolVar(&o.DryRun, "dry-run", false, "list what would be sent, send nothing")
	fs.BoolVar(&o.SkipRefused, "skip-refused", false, "send the chosen letters that can be sent even when others cannot")
	fs.BoolVar(&o.PastWindow, "past-window", false, "also send letters dead-lettered longer ago than the purge.* window of a table they feed (only letters never re-driven before)")
	fs.StringVar(&o.TransactionalID, "transactional-id", "", "the producer's transactional id (default <kafka.client_id>-dlq-redrive)")
	return cmd
}
