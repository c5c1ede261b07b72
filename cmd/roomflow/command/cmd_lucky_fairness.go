package command

import (
	"database/sql"

	"github.com/spf13/cobra"

	"github.com/hyapp/roomflow/internal/config"
	"github.com/hyapp/roomflow/services/luckydraw"
	"github.com/hyapp/roomflow/tools/luckyctl"
)

// luckyFairnessCmd is `roomflow lucky fairness`: the mode schedule of
// provably fair draws and the verification of a revealed day
// (docs/fairness.md).
func luckyFairnessCmd(g *globals) *cobra.Command {
	var o luckyctl.FairnessOptions
	schedule := newCmd("schedule", "Store the randomness mode (crypto or commit_reveal) of an app's days from a day after today on",
		help("lucky-fairness-schedule"), cobra.NoArgs, func(cmd *cobra.Command, _ []string) error {
			if err := luckyctl.CheckFairnessMode(o.Mode); err != nil {
				return err
			}
			return withAdmin(cmd, g, func(cfg *config.Config, a *luckydraw.Admin) error {
				return luckyctl.ScheduleFairness(cmd.Context(), a, cfg, o, cmd.OutOrStdout())
			})
		})
	schedule.Flags().StringVar(&o.Mode, "mode", "", "crypto or commit_reveal")
	schedule.Flags().StringVar(&o.Day, "from", "", "the first day (YYYY-MM-DD; the RFC 3339 start of a short day)")
	verify := newCmd("verify", "Recompute every draw of a revealed commit-reveal day from MySQL and its seed (exit 1 on any difference)",
		help("lucky-fairness-verify"), cobra.NoArgs, func(cmd *cobra.Command, _ []string) error {
			return withDB(cmd, g, func(cfg *config.Config, db *sql.DB) error {
				return luckyctl.VerifyFairness(cmd.Context(), db, cfg, o, cmd.OutOrStdout())
			})
		})
	verify.Flags().StringVar(&o.Day, "day", "", "the day (YYYY-MM-DD; the RFC 3339 start of a short day)")
	for _, c := range []*cobra.Command{schedule, verify} {
		c.Flags().StringVar(&o.AppCode, "app-code", "", "app_code (default: the configured app_code)")
	}
	cmd := &cobra.Command{Use: "fairness", Short: "Schedule and verify provably fair (commit-reveal) draws"}
	cmd.AddCommand(operatorFlags(schedule), verify)
	return cmd
}
