package command

import (
	"github.com/spf13/cobra"

	"github.com/hyapp/roomflow/internal/config"
	"github.com/hyapp/roomflow/tools/peek"
)

func peekCmd(g *globals) *cobra.Command {
	o := peek.Defaults
	cmd := newCmd("peek TOPIC", "Print records of a roomflow topic as JSON lines, decoded by type (read_committed)", help("peek"), cobra.ExactArgs(1),
		g.withConfig(func(cmd *cobra.Command, args []string, cfg *config.Config) error {
			return peek.Run(cmd.Context(), cfg, args[0], o, cmd.OutOrStdout())
		}))
	fs := cmd.Flags()
	fs.Int32Var(&o.Partition, "partition", o.Partition, "only this partition (-1: all)")
	fs.StringVar(&o.Offset, "offset", o.Offset, "where to begin in each partition: start, end, an offset N, or -N for its last N records")
	fs.IntVar(&o.Count, "count", o.Count, "stop after this many records (0: no limit)")
	fs.BoolVar(&o.Follow, "follow", o.Follow, "keep printing new records until interrupted")
	fs.DurationVar(&o.Idle, "idle", o.Idle, "without --follow, stop when nothing arrived for this long before the end was reached")
	return cmd
}
