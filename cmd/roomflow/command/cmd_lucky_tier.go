package command

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/hyapp/roomflow/internal/cfgerr"
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
		cmd.AddCommand(operatorFlags(&cobra.Command{
			Use:   verb + " GIFT_ID RULE_VERSION TIER_ID",
			Short: verb + " one tier of a published version (draws see it when the command returns)",
			Long:  verb + " " + help("lucky-tier"),
			Args:  cobra.ExactArgs(3),
			RunE: func(cmd *cobra.Command, args []string) error {
				for i, name := range []string{"GIFT_ID", "RULE_VERSION", "TIER_ID"} {
					if args[i] == "" || len(args[i]) > 64 {
						return cfgerr.Usage(fmt.Errorf("%s must be 1-64 bytes (got %q)", name, args[i]))
					}
				}
				_, db, admin, err := luckyAdmin(cmd, g)
				if err != nil {
					return err
				}
				defer db.Close()
				c, err := admin.SetTierEnabled(cmd.Context(), args[0], args[1], args[2], on)
				if err != nil {
					return err
				}
				printChanges(cmd.OutOrStdout(), c)
				return nil
			},
		}))
	}
	return cmd
}
