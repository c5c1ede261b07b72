package mysqlsink_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/go-sql-driver/mysql"

	"github.com/hyapp/roomflow/internal/cfgerr/cfgerrtest"
	"github.com/hyapp/roomflow/internal/config"
	"github.com/hyapp/roomflow/internal/testenv"
	mysqlsink "github.com/hyapp/roomflow/sinks/mysql"
	"github.com/hyapp/roomflow/sinks/mysql/micledger"
)

// The defaults map onto the sink's own defaults and keep what the process
// gives; every bad value is refused under the key or flag it came from.
func TestConfigFrom(t *testing.T) {
	def := config.Default()
	c, err := mysqlsink.ConfigFrom(&def, mysqlsink.Config{OwnerID: "pod-1", InstanceID: "pod-1-sink", Parallelism: 3})
	if err != nil {
		t.Fatalf("defaults: %v", err)
	}
	if c.BatchSize != mysqlsink.DefaultBatchSize || c.FlushInterval != mysqlsink.DefaultFlushInterval || c.Group != mysqlsink.DefaultGroup ||
		c.MaxRetries != mysqlsink.DefaultMaxRetries || c.DLQTopic != mysqlsink.DefaultDLQTopic || c.ShutdownTimeout != mysqlsink.DefaultShutdownTimeout ||
		c.OwnerID != "pod-1" || c.InstanceID != "pod-1-sink" || c.Parallelism != 3 || c.Registerer != nil || c.Kafka.Metrics != nil {
		t.Errorf("mapped %+v", c)
	}
	for _, tc := range []struct {
		key string
		mut func(*config.Config, *mysqlsink.Config)
	}{
		{"sink.batch_size", func(c *config.Config, _ *mysqlsink.Config) { c.Sink.BatchSize = -5 }},
		{"sink.flush_interval", func(c *config.Config, _ *mysqlsink.Config) { c.Sink.FlushInterval = -1 }},
		{"sink.max_retries", func(c *config.Config, _ *mysqlsink.Config) { c.Sink.MaxRetries = -1 }},
		{"kafka.topics.dlq", func(c *config.Config, _ *mysqlsink.Config) { c.Kafka.Topics.DLQ = "bad topic!" }},
		{"shutdown.timeout", func(c *config.Config, _ *mysqlsink.Config) { c.Shutdown.Timeout = -1 }},
		{"kafka.brokers", func(c *config.Config, _ *mysqlsink.Config) { c.Kafka.Brokers = nil }},
		{"--parallelism", func(_ *config.Config, o *mysqlsink.Config) { o.Parallelism = -1 }},
		{"--owner-id", func(_ *config.Config, o *mysqlsink.Config) { o.OwnerID = strings.Repeat("o", 129) }},
	} {
		cfg, own := config.Default(), mysqlsink.Config{}
		tc.mut(&cfg, &own)
		_, err := mysqlsink.ConfigFrom(&cfg, own)
		cfgerrtest.NamesKey(t, tc.key, err)
	}
}

// An applier's errors name its topic key and app_code; two appliers on
// one topic name kafka.topics.
func TestApplierAndStoreConfigFrom(t *testing.T) {
	cfg := config.Default()
	ml, err := mysqlsink.ApplierConfigFrom(&cfg, "kafka.topics.mic_ledger", cfg.Kafka.Topics.MicLedger)
	if err != nil || ml.Topic != cfg.Kafka.Topics.MicLedger || ml.DefaultAppCode != cfg.AppCode {
		t.Fatalf("defaults: %+v %v", ml, err)
	}
	_, err = mysqlsink.ApplierConfigFrom(&cfg, "kafka.topics.lucky_events", "bad topic!")
	cfgerrtest.NamesKey(t, "kafka.topics.lucky_events", err)
	bad := cfg
	bad.AppCode = strings.Repeat("a", 33)
	_, err = mysqlsink.ApplierConfigFrom(&bad, "kafka.topics.mic_ledger", cfg.Kafka.Topics.MicLedger)
	cfgerrtest.NamesKey(t, "app_code", err)

	a, err := micledger.New(ml)
	if err != nil {
		t.Fatal(err)
	}
	if c, err := mysqlsink.StoreConfigFrom(&cfg, mysqlsink.Register(a)); err != nil || c.Group != cfg.Sink.Group {
		t.Fatalf("one applier: %+v %v", c, err)
	}
	_, err = mysqlsink.StoreConfigFrom(&cfg, mysqlsink.Register(a), mysqlsink.Register(a))
	cfgerrtest.NamesKey(t, "kafka.topics", err)
}

// sink.group is roomflow_sink_offsets.consumer_group, VARCHAR(128): MariaDB
// refuses a longer one (strict mode: every claim of the sink would fail,
// after it had joined its Kafka group), so the key is refused at start; a
// group of 128 characters, multi-byte ones included, claims and is stored
// whole.
func TestSinkGroupFitsItsColumn(t *testing.T) {
	m := testenv.NewMySQL(t)
	ctx := context.Background()
	insert := func(group string) error {
		_, err := m.DB.ExecContext(ctx, `INSERT INTO roomflow_sink_offsets (consumer_group, topic, partition_id) VALUES (?, 't', 0)`, group)
		return err
	}
	var me *mysql.MySQLError
	if err := insert(strings.Repeat("g", 129)); !errors.As(err, &me) || me.Number != 1406 {
		t.Fatalf("a 129-character consumer_group: %v, want MySQL error 1406 (data too long)", err)
	}

	cfg := config.Default()
	ml, err := mysqlsink.ApplierConfigFrom(&cfg, "kafka.topics.mic_ledger", cfg.Kafka.Topics.MicLedger)
	if err != nil {
		t.Fatal(err)
	}
	a, err := micledger.New(ml)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Sink.Group = strings.Repeat("g", 129)
	_, err = mysqlsink.StoreConfigFrom(&cfg, mysqlsink.Register(a))
	cfgerrtest.NamesKey(t, "sink.group", err)

	cfg.Sink.Group = strings.Repeat("组", 128) // 384 bytes, 128 characters
	sc, err := mysqlsink.StoreConfigFrom(&cfg, mysqlsink.Register(a))
	if err != nil {
		t.Fatalf("128 characters: %v", err)
	}
	st, err := mysqlsink.NewStore(sc, m.DB)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Claim(ctx, "owner", []mysqlsink.TP{{Topic: cfg.Kafka.Topics.MicLedger}}, 1); err != nil {
		t.Fatalf("claim under a 128-character group: %v", err)
	}
	var stored string
	if err := m.DB.QueryRowContext(ctx, `SELECT consumer_group FROM roomflow_sink_offsets WHERE owner_id = 'owner'`).Scan(&stored); err != nil || stored != cfg.Sink.Group {
		t.Fatalf("stored group %q (%v), want the 128 characters whole", stored, err)
	}
}
