package command

import (
	"github.com/spf13/cobra"

	"github.com/hyapp/roomflow/internal/config"
	"github.com/hyapp/roomflow/services/luckydraw"
	"github.com/hyapp/roomflow/tools/luckyctl"
)

// luckyTierCmd is `roomflow lucky tier enable|disable GIFT VERSION TIER`:
// the run-time switch of one tier of a published version.
func luckyTierCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "tier",
		Short: "Switch one reward tier of a published rule version on or off at run time",
	}
	for _, on := range []bool{true, false} {
		verb := "enable"
		if !on {
			verb = "disable"
		}
		cmd.AddCommand(operatorFlags(newCmd(verb+" GIFT_ID RULE_VERSION TIER_ID",
			verb+" one tier of a published version (draws see it when the command returns)", verb+" "+help("lucky-tier"), cobra.ExactArgs(3),
			func(cmd *cobra.Command, args []string) error {
				if err := luckyctl.CheckTierArgs(args[0], args[1], args[2]); err != nil {
					return err
				}
				return withAdmin(cmd, g, func(_ *config.Config, admin *luckydraw.Admin) error {
					return printChange(cmd)(admin.SetTierEnabled(cmd.Context(), args[0], args[1], args[2], on))
				})
			})))
	}
	return cmd
}
