// Package fakekafka is what `roomflow kfake` does beyond its flags: it
// starts franz-go's kfake, a Kafka-protocol broker with transactions,
// consumer groups and read_committed, on chosen addresses for local use
// (the demo, benchmarks, trying commands without a cluster). Not for
// production: it keeps data in memory unless given a directory.
package fakekafka

import (
	"fmt"
	"net"
	"strconv"

	"github.com/twmb/franz-go/pkg/kfake"
)

// Start starts brokers brokers, the first listening on listen
// (host:port) and each further one on the next port of the same host;
// with dataDir it persists there. A listen address that is not host:port
// is an error naming --listen.
func Start(listen string, brokers int, dataDir string) (*kfake.Cluster, error) {
	host, portStr, err := net.SplitHostPort(listen)
	if err != nil {
		return nil, fmt.Errorf("--listen: %w", err)
	}
	port, err := strconv.Atoi(portStr)
	if err != nil {
		return nil, fmt.Errorf("--listen: %w", err)
	}
	ports := make([]int, brokers)
	for i := range ports {
		ports[i] = port + i
	}
	opts := []kfake.Opt{kfake.NumBrokers(brokers), kfake.Ports(ports...),
		kfake.ListenFn(func(network, addr string) (net.Listener, error) {
			_, p, _ := net.SplitHostPort(addr)
			return net.Listen(network, net.JoinHostPort(host, p))
		})}
	if dataDir != "" {
		opts = append(opts, kfake.DataDir(dataDir))
	}
	return kfake.NewCluster(opts...)
}
