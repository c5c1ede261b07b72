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
			Long: verb + ` sets lucky_reward_tiers.enabled of one tier, the one column of a
published version that changes at run time (a republish of the same file
is still a no-op). A disabled tier's probability goes to the none tier.
It acts when it returns: it waits (at most --wait) for the draw batches
that read the old value to commit, on every replica, and every draw after
it reads the new one; each draw's candidate_tiers_json records the tier
as it was drawn, so lucky audit replays it. CheckLuckyGift does not read
tiers. Refused (exit 1, nothing written): disabling the none tier, any
tier of a draft or retired version, an unknown gift, version or tier.`,
			Args: cobra.ExactArgs(3),
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
