package command

import (
	"time"

	"github.com/spf13/cobra"

	"github.com/hyapp/roomflow/internal/config"
	"github.com/hyapp/roomflow/tools/verify"
)

func verifyCmd(g *globals) *cobra.Command {
	var o verify.Options
	cmd := newCmd("verify", "Recompute facts from the room event log and diff them against MySQL", help("verify"), cobra.NoArgs,
		g.withConfig(func(cmd *cobra.Command, args []string, cfg *config.Config) error {
			return verify.Run(cmd.Context(), cfg, o, cmd.OutOrStdout())
		}))
	cmd.Flags().DurationVar(&o.Idle, "idle", 3*time.Second, "stop reading after the topic was idle this long")
	cmd.Flags().BoolVar(&o.Timers, "timers", false, "wall-clock traffic (loadgen --live, --duration): predict the mic timers' closes (mic.*_max_age); run it once those ages passed since the last event")
	return cmd
}
