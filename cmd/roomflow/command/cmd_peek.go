package command

import (
	"github.com/spf13/cobra"

	"github.com/hyapp/roomflow/tools/peek"
)

func peekCmd(g *globals) *cobra.Command {
	o := peek.Defaults
	cmd := &cobra.Command{
		Use:   "peek TOPIC",
		Short: "Print records of a roomflow topic as JSON lines, decoded by type (read_committed)",
		Long: `peek prints the records of TOPIC, one JSON object per line: topic,
partition, offset, timestamp_ms, key, headers, and the value decoded with
protojson (proto field names) as "value" with its type in "type". TOPIC is a
topic name or a kafka.topics key (mic_session_closed, dlq, ...).

It reads with isolation.level=read_committed, as every consumer of the
pipeline must: records of aborted transactions never show. The type comes
from the topic (room events and mic events: EventEnvelope, whose payload is
also decoded by event_type as "payload"; mic_ledger: MicLedgerEntry; the
public mic topics and lucky_pool_inflow: their message; lucky_events: the
lucky event its event_type header names, LuckyGiftDrawn, LuckyRewardGranted,
LuckyRewardPending, LuckyPoolChanged or LuckyRiskRejected), else from the
event_type header of a record whose content-type is
application/x-protobuf. Dead letters (kafka.topics.dlq), the internal
compacted topics and anything undecodable show the raw value as
"value_base64" (with "decode_error" when decoding failed).

Without --follow it stops at the end of the committed log as of its start
(or when nothing arrived for --idle); --count stops after that many records.

  roomflow peek mic_session_closed --offset -5       # last 5 per partition
  roomflow peek hyapp.room.events.dlq.v1 --partition 3 --offset 1200 --count 1
  roomflow peek mic_lifetime_stats --offset end --follow | jq .value`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg, err := g.load()
			if err != nil {
				return err
			}
			return peek.Run(cmd.Context(), cfg, args[0], o, cmd.OutOrStdout())
		},
	}
	fs := cmd.Flags()
	fs.Int32Var(&o.Partition, "partition", o.Partition, "only this partition (-1: all)")
	fs.StringVar(&o.Offset, "offset", o.Offset, "where to begin in each partition: start, end, an offset N, or -N for its last N records")
	fs.IntVar(&o.Count, "count", o.Count, "stop after this many records (0: no limit)")
	fs.BoolVar(&o.Follow, "follow", o.Follow, "keep printing new records until interrupted")
	fs.DurationVar(&o.Idle, "idle", o.Idle, "without --follow, stop when nothing arrived for this long before the end was reached")
	return cmd
}
