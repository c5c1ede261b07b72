package relay

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/hyapp/roomflow/internal/cfgerr"
	"github.com/hyapp/roomflow/internal/kafkax"
)

// TestConfigMode: poll is the default and needs no binlog settings;
// binlog mode requires a server id and a DSN, each refusal names its key,
// and a DSN's password never appears in an error.
func TestConfigMode(t *testing.T) {
	base := Config{TransactionalID: "r", Topic: "events", DLQTopic: "dlq", OffsetsTopic: "offsets",
		Kafka: kafkax.Cluster{Brokers: []string{"127.0.0.1:1"}}}
	if err := base.Validate(); err != nil {
		t.Fatalf("poll mode without binlog settings: %v", err)
	}
	c := base
	c.setDefaults()
	if c.Mode != ModePoll || c.Binlog.HeartbeatPeriod != DefaultHeartbeatPeriod {
		t.Fatalf("defaults: mode %q heartbeat %s", c.Mode, c.Binlog.HeartbeatPeriod)
	}
	ok := base
	ok.Mode, ok.Binlog = ModeBinlog, BinlogConfig{DSN: "repl:pw@tcp(db:3306)/roomflow", ServerID: 4242}
	if err := ok.Validate(); err != nil {
		t.Fatalf("valid binlog config: %v", err)
	}
	for key, mut := range map[string]func(*Config){
		"mode":                    func(c *Config) { c.Mode = "cdc" },
		"binlog.server_id":        func(c *Config) { c.Binlog.ServerID = 0 },
		"binlog.dsn":              func(c *Config) { c.Binlog.DSN = "" },
		"binlog.heartbeat_period": func(c *Config) { c.Binlog.HeartbeatPeriod = 10 * time.Microsecond },
	} {
		c := ok
		mut(&c)
		err := c.Validate()
		var fe *cfgerr.FieldError
		if !errors.As(err, &fe) || fe.Key != key {
			t.Errorf("%s: err = %v, want a field error keyed %s", key, err, key)
		}
	}
	c = ok
	c.Binlog.DSN = "repl:hunter2@tcp(db:3306/roomflow" // unbalanced: does not parse
	err := c.Validate()
	if err == nil || strings.Contains(err.Error(), "hunter2") {
		t.Fatalf("bad DSN: %v (must fail without the password)", err)
	}
	// Binlog settings are not checked in poll mode.
	c = base
	c.Binlog.HeartbeatPeriod = -1
	if err := c.Validate(); err != nil {
		t.Fatalf("poll mode checked binlog settings: %v", err)
	}
}
