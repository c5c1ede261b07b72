package benchkafka

import (
	"flag"
	"fmt"
	"os"
	"strings"

	"github.com/hyapp/roomflow/internal/config"
)

// Flags are the Kafka flags of every benchmark that can run on a real
// cluster, registered once here so each benchmark connects, secured or
// not, the way roomflow does:
//
//	-brokers host:port,...  seed brokers (plaintext unless -kafka-config)
//	-kafka-config FILE      a roomflow config file: its kafka.brokers,
//	                        kafka.tls and kafka.sasl, with roomflow's env
//	                        overrides (ROOMFLOW_KAFKA_BROKERS,
//	                        ROOMFLOW_KAFKA_SASL_PASSWORD)
//
// With neither, the benchmark runs on kfake.
type Flags struct {
	brokers, config string
}

// RegisterFlags adds -brokers and -kafka-config to fs (flag.CommandLine
// when nil); kfake says what runs when neither is given.
func RegisterFlags(fs *flag.FlagSet, kfake string) *Flags {
	if fs == nil {
		fs = flag.CommandLine
	}
	f := &Flags{}
	fs.StringVar(&f.brokers, "brokers", "", "Kafka brokers, plaintext unless -kafka-config (empty: "+kfake+")")
	fs.StringVar(&f.config, "kafka-config", "", "roomflow config file whose kafka.brokers, kafka.tls and kafka.sasl to connect with (env overrides as for roomflow; -brokers replaces its brokers)")
	return f
}

// Connect returns base (the benchmark's topics and partitions) with the
// brokers and security the flags name, and a stop function: the
// -kafka-config file's connection, validated as roomflow validates it
// (a missing CA or password file fails here, naming its key), with
// -brokers in place of its brokers when given; or -brokers in plaintext;
// or, with neither, a kfake cluster shaped by o.
func (f *Flags) Connect(base config.KafkaConfig, o Options) (config.KafkaConfig, func(), error) {
	if f.config != "" {
		cfg, err := config.Load(f.config, os.Getenv)
		if err != nil {
			return base, nil, fmt.Errorf("-kafka-config: %w", err)
		}
		k := base.WithConnection(cfg.Kafka)
		if f.brokers != "" {
			k.Brokers = strings.Split(f.brokers, ",")
		}
		return k, func() {}, nil
	}
	seeds, stop, err := Start(f.brokers, o)
	if err != nil {
		return base, nil, err
	}
	base.Brokers = seeds
	return base, stop, nil
}

// Describe is how the benchmark connects, for its report (never a
// password).
func Describe(k config.KafkaConfig) string {
	s := fmt.Sprint(k.Brokers)
	if k.TLS.Enabled {
		s += " TLS"
	}
	if k.SASL.Mechanism != "" {
		s += " SASL " + k.SASL.Mechanism
	}
	return s
}
