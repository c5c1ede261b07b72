// Package benchkafka starts the Kafka every benchmark runs on: the brokers
// given with -brokers or -kafka-config (Flags: TLS and SASL as roomflow's
// kafka block), or a fresh kfake cluster, in the benchmark's process
// or in a child process of the benchmark binary (so the broker's CPU and
// heap are not the measured process's). Benchmarks only.
package benchkafka

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
)

// childEnv carries the child's Options (JSON) from Start to RunChild.
const childEnv = "ROOMFLOW_BENCH_KFAKE_CHILD"

// Options shape a kfake cluster.
type Options struct {
	// Brokers is the number of brokers (default 3).
	Brokers int
	// Child runs the cluster in a child process of this binary; its main
	// must call RunChild first.
	Child bool
}

func (o Options) cluster() (*kfake.Cluster, error) {
	n := o.Brokers
	if n <= 0 {
		n = 3
	}
	// A low session floor lets benchmarks measure quick group handovers;
	// it changes nothing for clients that ask for the usual timeouts.
	return kfake.NewCluster(kfake.NumBrokers(n), kfake.GroupMinSessionTimeout(500*time.Millisecond))
}

// Start returns seed brokers and a stop function: the comma-separated
// brokers when not empty (stop does nothing), else a kfake cluster shaped
// by o.
func Start(brokers string, o Options) ([]string, func(), error) {
	if brokers != "" {
		return strings.Split(brokers, ","), func() {}, nil
	}
	if !o.Child {
		c, err := o.cluster()
		if err != nil {
			return nil, nil, fmt.Errorf("kfake: %w", err)
		}
		return c.ListenAddrs(), c.Close, nil
	}
	spec, _ := json.Marshal(o)
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), childEnv+"="+string(spec))
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, nil, err
	}
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "OK ") {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		return nil, nil, fmt.Errorf("kfake child: %q %v", strings.TrimSpace(line), err)
	}
	stop := func() { stdin.Close(); _ = cmd.Wait() }
	return strings.Split(strings.TrimSpace(strings.TrimPrefix(line, "OK ")), ","), stop, nil
}

// RunChild must be the first call of a benchmark's main that Starts a
// child cluster: in that child it serves the cluster until the parent
// exits or stops it (the child's stdin closes), then exits; in any other
// process it returns at once.
func RunChild() {
	spec, ok := os.LookupEnv(childEnv)
	if !ok {
		return
	}
	err := serve(spec)
	if err != nil {
		fmt.Println("ERR", err)
		os.Exit(1)
	}
	os.Exit(0)
}

func serve(spec string) error {
	var o Options
	if err := json.Unmarshal([]byte(spec), &o); err != nil {
		return errors.New("bad " + childEnv)
	}
	c, err := o.cluster()
	if err != nil {
		return err
	}
	defer c.Close()
	fmt.Println("OK " + strings.Join(c.ListenAddrs(), ","))
	_, _ = bufio.NewReader(os.Stdin).ReadString('\n') // returns when the parent closes it or exits
	return nil
}
