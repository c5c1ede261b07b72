package imoutbox_test

import (
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/hyapp/roomflow/internal/kafkax"
	"github.com/hyapp/roomflow/internal/testenv"
	"github.com/hyapp/roomflow/sinks/imoutbox"
	"github.com/hyapp/roomflow/sinks/tencentim"
)

// publish-im logs under one component: with Kafka unreachable, the Kafka
// client's warnings carry component=publish-im once, like the publisher's
// own lines. A publisher needs neither a registry nor a logger.
func TestPublisherLogsUnderOneComponent(t *testing.T) {
	e := newEnv(t, false)
	cfg := e.cfg
	cfg.Kafka = kafkax.Cluster{Brokers: []string{testenv.ClosedAddr(t)}}

	bare, err := imoutbox.NewPublisher(cfg, e.db)
	if err != nil {
		t.Fatalf("without a registry and a logger: %v", err)
	}
	testenv.RunUntil(t, bare.Run, time.Second, "nothing", func() bool { return true })

	logs := &testenv.SyncBuffer{}
	log := slog.New(slog.NewJSONHandler(logs, nil))
	cfg.Registerer, cfg.Logger, cfg.Kafka.Logger = prometheus.NewRegistry(), log, log
	p, err := imoutbox.NewPublisher(cfg, e.db)
	if err != nil {
		t.Fatal(err)
	}
	testenv.RunUntil(t, p.Run, 20*time.Second, "the publisher's Kafka client to warn", func() bool {
		return strings.Contains(logs.String(), "unable to open connection to broker")
	})
	testenv.CheckLogComponent(t, logs.String(), "publish-im")
}

// The IM client's zero fields take its defaults (a library user gives the
// credentials only): the publisher delivers with them.
func TestPublisherIMDefaults(t *testing.T) {
	// With Kafka: the scan sends the rooms of the partitions the fast path owns.
	e := newEnv(t, true)
	e.cfg.IM = tencentim.Config{Endpoint: e.url, SDKAppID: testApp, SecretKey: testKey} // admin: "administrator"
	e.insert(time.Second, gift("defaults", "r1", 1))
	_, stop := e.publisher(fastAndScan)
	testenv.Eventually(t, 20*time.Second, "the row delivered", func() bool { return e.row("defaults").Status == "delivered" })
	stop()
}
