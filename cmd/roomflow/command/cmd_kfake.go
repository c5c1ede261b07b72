package command

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/hyapp/roomflow/tools/fakekafka"
)

// kfakeCmd runs franz-go's kfake, a Kafka-protocol broker, for local use:
// the demo, benchmarks and trying commands from a terminal without a
// cluster. Not for production: it keeps data in memory unless --data-dir.
func kfakeCmd() *cobra.Command {
	var (
		listen  string
		brokers int
		dataDir string
	)
	cmd := newCmd("kfake", "Run an in-memory Kafka-protocol broker (franz-go kfake) for local use", help("kfake"), cobra.NoArgs,
		func(cmd *cobra.Command, _ []string) error {
			c, err := fakekafka.Start(listen, brokers, dataDir)
			if err != nil {
				return err
			}
			defer c.Close()
			fmt.Fprintln(cmd.OutOrStdout(), "kfake listening:", c.ListenAddrs())
			<-cmd.Context().Done()
			return nil
		})
	cmd.Flags().StringVar(&listen, "listen", "127.0.0.1:9092", "address of the first broker")
	cmd.Flags().IntVar(&brokers, "brokers", 1, "number of brokers")
	cmd.Flags().StringVar(&dataDir, "data-dir", "", "persist to this directory (empty: memory only)")
	return cmd
}
