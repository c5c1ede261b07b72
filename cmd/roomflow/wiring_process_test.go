package main

import (
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/hyapp/roomflow/internal/app"
	"github.com/hyapp/roomflow/internal/cfgerr"
	"github.com/hyapp/roomflow/internal/config"
)

// processWiring runs every wiring function of `roomflow process` on cfg
// and returns their errors joined.
func processWiring(cfg config.Config) error {
	d := app.NewDeps(&cfg, slog.New(slog.DiscardHandler))
	_, err := processSelection(d)
	_, roomErr := roomConfig(d)
	_, rulesErr := ruleLoaderConfig(d)
	_, micErr := micConfig(d)
	return errors.Join(err, roomErr, rulesErr, micErr)
}

// The defaults pass the processors' wiring.
func TestWiringProcessDefaults(t *testing.T) {
	if err := processWiring(config.Default()); err != nil {
		t.Fatalf("defaults: %v", err)
	}
}

// Every rule of the processors' configs, each with the application key
// its error must name (the cases moved here from internal/config).
func TestWiringProcessNamesTheKey(t *testing.T) {
	cases := []struct {
		key string
		mut func(*config.Config)
	}{
		{"process.commit_interval", func(c *config.Config) { c.Process.CommitInterval = -1 }},
		{"process.commit_records", func(c *config.Config) { c.Process.CommitRecords = -1 }},
		{"process.room_group", func(c *config.Config) { c.Process.RoomGroup = "" }},
		{"process.mic_group", func(c *config.Config) { c.Process.MicGroup = "" }},
		{"process.only", func(c *config.Config) { c.Process.Only = "lucky" }},
		{"process.rule_cache_size", func(c *config.Config) { c.Process.RuleCacheSize = -1 }},
		{"mic.pending_publish_max_age", func(c *config.Config) { c.Mic.PendingPublishMaxAge = -1 }},
		{"mic.publishing_session_max_age", func(c *config.Config) { c.Mic.PublishingSessionMaxAge = -1 }},
		{"mic.compensation_interval", func(c *config.Config) { c.Mic.CompensationInterval = -1 }},
		{"mic.compensation_batch_size", func(c *config.Config) { c.Mic.CompensationBatchSize = -1 }},
		{"mic.closed_session_retention", func(c *config.Config) { c.Mic.ClosedSessionRetention = -1 }},
		{"mic.day_room_retention", func(c *config.Config) { c.Mic.DayRoomRetention = -1 }},
		{"mic.day_room_retention", func(c *config.Config) { c.Mic.DayRoomRetention = config.Duration(time.Hour) }},
		{"shutdown.timeout", func(c *config.Config) { c.Shutdown.Timeout = -1 }},
		{"kafka.brokers", func(c *config.Config) { c.Kafka.Brokers = nil }},
		{"kafka.topics.room_events", func(c *config.Config) { c.Kafka.Topics.RoomEvents = "" }},
		{"kafka.topics.mic_state_changelog", func(c *config.Config) { c.Kafka.Topics.MicStateChangelog = "" }},
		{"kafka.topics.mic_ledger", func(c *config.Config) { c.Kafka.Topics.MicLedger = "" }},
		{"kafka.topics.lucky_pool_inflow", func(c *config.Config) { c.Kafka.Topics.LuckyPoolInflow = "" }},
		{"kafka.topics.dlq", func(c *config.Config) { c.Kafka.Topics.DLQ = "" }},
		{"app_code", func(c *config.Config) { c.AppCode = strings.Repeat("a", 33) }},
	}
	for _, tc := range cases {
		c := config.Default()
		tc.mut(&c)
		err := processWiring(c)
		if err == nil {
			t.Errorf("%s: invalid value accepted", tc.key)
			continue
		}
		if !hasProcessKey(err, tc.key) {
			t.Errorf("%s: error does not name the key: %v", tc.key, err)
		}
		if !strings.Contains(err.Error(), "config: "+tc.key+": ") {
			t.Errorf("%s: message %q does not start with the key", tc.key, err)
		}
	}
}

// A zero setting of the processors is their default, which equals the
// application's: a config that leaves one out (0) is not refused.
func TestWiringProcessZeroIsDefault(t *testing.T) {
	c := config.Default()
	c.Process.CommitInterval, c.Process.CommitRecords, c.Process.RuleCacheSize = 0, 0, 0
	c.Mic = config.MicConfig{CompensationEnabled: true}
	if err := processWiring(c); err != nil {
		t.Fatalf("zero settings: %v", err)
	}
}

// mic.compensation_enabled maps onto DisableCompensation; --instance-id
// onto each processor's transactional id and static member id.
func TestWiringProcessMapping(t *testing.T) {
	c := config.Default()
	c.Mic.CompensationEnabled = false
	d := app.NewDeps(&c, slog.New(slog.DiscardHandler))
	mc, err := micConfig(d)
	if err != nil || !mc.Settings.DisableCompensation {
		t.Fatalf("mic.compensation_enabled=false: %+v %v", mc.Settings, err)
	}
	rc, err := roomConfig(d)
	if err != nil || rc.Runtime.TransactionalID != "" || rc.Runtime.InstanceID != "" {
		t.Fatalf("without --instance-id: %+v %v", rc.Runtime, err)
	}
	if err := d.Flags.Set("instance-id", "pod-1"); err != nil {
		t.Fatal(err)
	}
	rc, _ = roomConfig(d)
	mc, _ = micConfig(d)
	if rc.Runtime.Name != "room" || rc.Runtime.TransactionalID != c.Process.RoomGroup+"-pod-1" || rc.Runtime.InstanceID != "pod-1-room" {
		t.Fatalf("room with --instance-id: %+v", rc.Runtime)
	}
	if mc.Runtime.Name != "mic" || mc.Runtime.TransactionalID != c.Process.MicGroup+"-pod-1" || mc.Runtime.InstanceID != "pod-1-mic" ||
		mc.Runtime.Changelog != c.Kafka.Topics.MicStateChangelog {
		t.Fatalf("mic with --instance-id: %+v", mc.Runtime)
	}
	if mc.Runtime.Kafka.SessionTimeout != c.Kafka.SessionTimeout.D() || mc.Runtime.Registerer == nil {
		t.Fatalf("mic runtime's cluster or metrics: %+v", mc.Runtime)
	}
}

func hasProcessKey(err error, key string) bool {
	if joined, ok := err.(interface{ Unwrap() []error }); ok {
		for _, e := range joined.Unwrap() {
			if hasProcessKey(e, key) {
				return true
			}
		}
		return false
	}
	var fe *cfgerr.FieldError
	return errors.As(err, &fe) && fe.Key == key
}
