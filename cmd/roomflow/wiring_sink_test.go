package main

import (
	"errors"
	"log/slog"
	"slices"
	"strings"
	"testing"

	"github.com/hyapp/roomflow/internal/app"
	"github.com/hyapp/roomflow/internal/cfgerr"
	"github.com/hyapp/roomflow/internal/config"
	mysqlsink "github.com/hyapp/roomflow/sinks/mysql"
	"github.com/hyapp/roomflow/sinks/mysql/luckyinflow"
	"github.com/hyapp/roomflow/sinks/mysql/micledger"
	"github.com/hyapp/roomflow/sinks/mysql/statsapi"
)

// sinkWiringDeps are the deps of `roomflow sink` on cfg, every flag at its
// default.
func sinkWiringDeps(cfg config.Config) *app.Deps {
	return app.NewDeps(&cfg, slog.New(slog.DiscardHandler))
}

// sinkErrKeys are the keys of the *cfgerr.FieldError in err.
func sinkErrKeys(err error) []string {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		var out []string
		for _, e := range j.Unwrap() {
			out = append(out, sinkErrKeys(e)...)
		}
		return out
	}
	var fe *cfgerr.FieldError
	if errors.As(err, &fe) {
		return []string{fe.Key}
	}
	return nil
}

// The defaults pass the sink's wiring, and map onto what the components
// would default to themselves.
func TestWiringSinkDefaults(t *testing.T) {
	d := sinkWiringDeps(config.Default())
	c, err := sinkConfig(d)
	if err != nil {
		t.Fatalf("sinkConfig(defaults): %v", err)
	}
	if c.Parallelism != mysqlsink.DefaultParallelism || c.OwnerID != "" || c.InstanceID != "" {
		t.Fatalf("flags at their defaults: parallelism %d, owner %q, instance %q", c.Parallelism, c.OwnerID, c.InstanceID)
	}
	if _, err := sinkStoreConfig(d); err != nil {
		t.Fatalf("sinkStoreConfig(defaults): %v", err)
	}
	if _, err := statsAPIConfig(d); err != nil {
		t.Fatalf("statsAPIConfig(defaults): %v", err)
	}

	// With --instance-id the member is <id>-sink and the owner id the
	// instance id.
	if err := d.Flags.Set("instance-id", "pod-1"); err != nil {
		t.Fatal(err)
	}
	if c, err := sinkConfig(d); err != nil || c.InstanceID != "pod-1-sink" || c.OwnerID != "pod-1" {
		t.Fatalf("--instance-id pod-1: %v, instance %q owner %q", err, c.InstanceID, c.OwnerID)
	}
}

// The components' own defaults equal config.Default()'s values for the
// keys they map from, so a library user gets what `roomflow sink` runs.
func TestWiringSinkComponentDefaultsMatchConfig(t *testing.T) {
	def := config.Default()
	for _, tc := range []struct {
		key       string
		got, want any
	}{
		{"sink.batch_size", mysqlsink.DefaultBatchSize, def.Sink.BatchSize},
		{"sink.flush_interval", mysqlsink.DefaultFlushInterval, def.Sink.FlushInterval.D()},
		{"sink.group", mysqlsink.DefaultGroup, def.Sink.Group},
		{"sink.max_retries", mysqlsink.DefaultMaxRetries, def.Sink.MaxRetries},
		{"kafka.topics.dlq", mysqlsink.DefaultDLQTopic, def.Kafka.Topics.DLQ},
		{"shutdown.timeout", mysqlsink.DefaultShutdownTimeout, def.Shutdown.Timeout.D()},
		{"kafka.topics.mic_ledger", micledger.DefaultTopic, def.Kafka.Topics.MicLedger},
		{"kafka.topics.lucky_pool_inflow", luckyinflow.DefaultTopic, def.Kafka.Topics.LuckyPoolInflow},
		{"api.user_header", statsapi.DefaultUserHeader, def.API.UserHeader},
		{"api.app_code_header", statsapi.DefaultAppCodeHeader, def.API.AppCodeHeader},
	} {
		if tc.got != tc.want {
			t.Errorf("%s: component default %v, config.Default() %v", tc.key, tc.got, tc.want)
		}
	}
	fs := sinkWiringDeps(def).Flags
	if p, err := fs.GetInt("parallelism"); err != nil || p != mysqlsink.DefaultParallelism {
		t.Errorf("--parallelism default %d (%v), mysqlsink.DefaultParallelism %d", p, err, mysqlsink.DefaultParallelism)
	}
}

// Each bad value is reported by the wiring function under the dotted key
// (or flag) it came from. These checks lived in internal/config before.
func TestWiringSinkKeys(t *testing.T) {
	type wiring func(d *app.Deps) error
	sink := func(d *app.Deps) error { _, err := sinkConfig(d); return err }
	store := func(d *app.Deps) error { _, err := sinkStoreConfig(d); return err }
	api := func(d *app.Deps) error { _, err := statsAPIConfig(d); return err }
	cases := []struct {
		key  string
		wire wiring
		mut  func(c *config.Config)
		flag [2]string
	}{
		{"sink.batch_size", sink, func(c *config.Config) { c.Sink.BatchSize = -5 }, [2]string{}},
		{"sink.flush_interval", sink, func(c *config.Config) { c.Sink.FlushInterval = -1 }, [2]string{}},
		{"sink.max_retries", sink, func(c *config.Config) { c.Sink.MaxRetries = -1 }, [2]string{}},
		{"kafka.topics.dlq", sink, func(c *config.Config) { c.Kafka.Topics.DLQ = "bad topic!" }, [2]string{}},
		{"shutdown.timeout", sink, func(c *config.Config) { c.Shutdown.Timeout = -1 }, [2]string{}},
		{"kafka.brokers", sink, func(c *config.Config) { c.Kafka.Brokers = nil }, [2]string{}},
		{"--parallelism", sink, nil, [2]string{"parallelism", "-1"}},
		{"--owner-id", sink, nil, [2]string{"owner-id", strings.Repeat("o", 129)}},
		{"app_code", store, func(c *config.Config) { c.AppCode = strings.Repeat("a", 33) }, [2]string{}},
		{"kafka.topics", store, func(c *config.Config) { c.Kafka.Topics.LuckyPoolInflow = c.Kafka.Topics.MicLedger }, [2]string{}},
		{"app_code", api, func(c *config.Config) { c.AppCode = "" }, [2]string{}},
		{"api.user_header", api, func(c *config.Config) { c.API.UserHeader = "X User" }, [2]string{}},
		{"api.app_code_header", api, func(c *config.Config) { c.API.AppCodeHeader = "X-App:Code" }, [2]string{}},
		{"api.app_code_header", api, func(c *config.Config) { c.API.AppCodeHeader = "x-user-id" }, [2]string{}},
	}
	for _, tc := range cases {
		cfg := config.Default()
		if tc.mut != nil {
			tc.mut(&cfg)
		}
		d := sinkWiringDeps(cfg)
		if tc.flag[0] != "" {
			if err := d.Flags.Set(tc.flag[0], tc.flag[1]); err != nil {
				t.Fatal(err)
			}
		}
		err := tc.wire(d)
		if err == nil {
			t.Errorf("%s: invalid value accepted", tc.key)
			continue
		}
		if !slices.Contains(sinkErrKeys(err), tc.key) {
			t.Errorf("%s: error does not name the key: %v", tc.key, err)
		}
		if !strings.Contains(err.Error(), "config: "+tc.key+": ") {
			t.Errorf("%s: message %q does not start with the key", tc.key, err)
		}
	}
}

// `roomflow sink` stops at start on a bad sink value, before it opens
// MySQL or Kafka, naming the key.
func TestSinkCommandRefusesBadConfig(t *testing.T) {
	// Nothing listens on the DSN's address: the command must not get that far.
	p := writeConfig(t, "log:\n  level: error\nmetrics:\n  addr: \"\"\nsink:\n  batch_size: -5\n"+
		"mysql:\n  dsn: \"nobody@tcp("+sinkFreeAddr(t)+")/none\"\n")
	root := newRoot()
	root.SetArgs([]string{"--config", p, "sink"})
	err := root.Execute()
	if err == nil || !strings.Contains(err.Error(), "config: sink.batch_size: ") {
		t.Fatalf("roomflow sink with sink.batch_size -5: %v, want a sink.batch_size error", err)
	}
	if strings.Contains(err.Error(), "mysql:") {
		t.Fatalf("roomflow sink opened MySQL before checking its config: %v", err)
	}
}
