package command

import (
	"time"

	"github.com/spf13/cobra"

	"github.com/hyapp/roomflow/tools/dlq"
)

func dlqCmd(g *globals) *cobra.Command {
	var idle time.Duration
	cmd := &cobra.Command{
		Use:   "dlq",
		Short: "Summarise the dead-letter topic and re-drive fixed records to their source topics",
		Long: `dlq works on kafka.topics.dlq, read with read_committed from its start to
its committed end at the call. 'dlq list' counts the dead letters by stage,
error_reason and source topic with their DLQ offsets; 'dlq redrive' sends
chosen ones back to their source topics in one Kafka transaction. A record
the MySQL sink dead-lettered twice (a batch that never committed) is one
record: letters are told apart by source_topic, source_partition,
source_offset (the relay's by source and source_id). 'roomflow peek dlq'
shows each letter with its headers.`,
	}
	cmd.PersistentFlags().DurationVar(&idle, "idle", 5*time.Second, "stop reading when nothing arrived for this long before the end was reached")
	cmd.AddCommand(dlqListCmd(g, &idle), dlqRedriveCmd(g, &idle))
	return cmd
}

func dlqListCmd(g *globals, idle *time.Duration) *cobra.Command {
	return &cobra.Command{
		Use:   "list",
		Short: "Count dead letters by stage, error_reason and source topic, with their DLQ offsets",
		Long: `list reads every dead letter and prints one line per stage, error_reason
and source topic: the records refused (repeats of one refused record
counted once), the repeats, and the DLQ offsets as partition:first-last.
Records on the topic that are not dead letters are counted as stage "-",
reason not_a_dead_letter.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := g.load()
			if err != nil {
				return err
			}
			return dlq.List(cmd.Context(), cfg, *idle, cmd.OutOrStdout())
		},
	}
}

func dlqRedriveCmd(g *globals, idle *time.Duration) *cobra.Command {
	var o dlq.RedriveOptions
	cmd := &cobra.Command{
		Use:   "redrive",
		Short: "Send chosen dead letters back to their source topics in one Kafka transaction",
		Long: `redrive sends the dead letters chosen by --offsets (DLQ partition:offset or
partition:first-last, comma separated) and the filters --stage, --reason
and --source-topic (all given must match; --all chooses every letter) back
to their source topics: the refused record's key, value and own headers
(event_id, event_type, app_code, ...; no dead-letter header), partitioned
by key as every roomflow producer does, all in one Kafka transaction (a
failure sends none). A repeat of a letter already chosen is sent once.

A letter without a value (the relay keeps none for a payload too large for
the topic, an empty payload is no event) or without a source topic (a
gap_abandoned run of ids) cannot be sent: redrive lists them with the
reason and sends nothing, unless --skip-refused sends the others.
--dry-run lists what would be sent.

Fix the cause first (deploy the fix, or correct the record's source): a
record refused again is dead-lettered again. Every stage dedupes by
event_id, so a letter whose event was applied after all changes nothing,
as long as it is re-driven within the purge.* windows (README, Operations:
Retention).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := g.load()
			if err != nil {
				return err
			}
			return dlq.Redrive(cmd.Context(), cfg, *idle, o, cmd.OutOrStdout())
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&o.Offsets, "offsets", "", "DLQ positions: partition:offset or partition:first-last, comma separated")
	fs.StringVar(&o.Stage, "stage", "", "only letters of this stage (relay, room, mic, sink)")
	fs.StringVar(&o.Reason, "reason", "", "only letters with this error_reason")
	fs.StringVar(&o.SourceTopic, "source-topic", "", "only letters refused from this topic")
	fs.BoolVar(&o.All, "all", false, "choose every letter (with no other selection)")
	fs.BoolVar(&o.DryRun, "dry-run", false, "list what would be sent, send nothing")
	fs.BoolVar(&o.SkipRefused, "skip-refused", false, "send the chosen letters that can be sent even when others cannot")
	fs.StringVar(&o.TransactionalID, "transactional-id", "", "the producer's transactional id (default <kafka.client_id>-dlq-redrive)")
	return cmd
}
