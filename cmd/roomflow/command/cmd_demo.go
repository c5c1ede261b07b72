package command

import (
	"cmp"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/hyapp/roomflow/producers/loadgen"
	"github.com/hyapp/roomflow/tools/demo"
)

// DemoOptions are `roomflow demo`'s defaults: what `roomflow run` starts
// plus the draw service, the IM publisher's keys checked first, and the
// scenario's size.
func DemoOptions() demo.Options {
	o := demo.Options{Scenario: loadgen.DefaultScenario(), Database: "roomflow_demo", Timeout: 3 * time.Minute, LogLevel: "warn",
		Specs: append(components(), luckySpec()),
		Check: CheckPublishIM}
	o.Scenario.EventIDPrefix = "demo"
	o.Scenario.Sessions, o.Scenario.Gifts = 1000, 1500
	return o
}

func demoCmd(*globals) *cobra.Command {
	o := DemoOptions()
	cmd := newCmd("demo", "Run the whole pipeline on embedded Kafka with synthetic load and print a summary", help("demo"), cobra.NoArgs,
		func(cmd *cobra.Command, _ []string) error {
			o.ServerDSN = cmp.Or(os.Getenv("ROOMFLOW_MYSQL_DSN"), "root@tcp(127.0.0.1:3306)/")
			o.Scenario.AppCode = "hyapp"
			o.Out = cmd.OutOrStdout()
			res, err := demo.Run(cmd.Context(), o)
			if err != nil {
				return err
			}
			demo.Print(o.Out, res)
			return nil
		})
	scenarioFlags(cmd.Flags(), &o.Scenario)
	cmd.Flags().Float64Var(&o.Rate, "rate", 5000, "room_outbox insert rate, events/s (0: unthrottled)")
	cmd.Flags().DurationVar(&o.Timeout, "timeout", o.Timeout, "how long to wait for the facts to converge")
	cmd.Flags().BoolVar(&o.Keep, "keep", false, "keep the roomflow_demo database for inspection")
	cmd.Flags().StringVar(&o.LogLevel, "log-level", o.LogLevel, "component log level (info/debug print to stderr)")
	cmd.Flags().StringVar(&o.Database, "database", o.Database, "demo database name (dropped and recreated)")
	return cmd
}
