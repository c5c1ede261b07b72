package imoutbox_test

import (
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/hyapp/roomflow/internal/testenv"
	"github.com/hyapp/roomflow/sinks/imoutbox"
)

// publish-im logs under one component: with Kafka unreachable, the Kafka
// client's warnings carry component=publish-im once, like the publisher's
// own lines. A publisher needs neither a registry nor a logger.
func TestPublisherLogsUnderOneComponent(t *testing.T) {
	e := newEnv(t, false)
	cfg := *e.cfg
	cfg.Kafka.Brokers = []string{testenv.ClosedAddr(t)}

	bare, err := imoutbox.NewPublisher(&cfg, e.db, nil, nil)
	if err != nil {
		t.Fatalf("without a registry and a logger: %v", err)
	}
	testenv.RunUntil(t, bare.Run, time.Second, "nothing", func() bool { return true })

	logs := &testenv.SyncBuffer{}
	p, err := imoutbox.NewPublisher(&cfg, e.db, prometheus.NewRegistry(), slog.New(slog.NewJSONHandler(logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	testenv.RunUntil(t, p.Run, 20*time.Second, "the publisher's Kafka client to warn", func() bool {
		return strings.Contains(logs.String(), "unable to open connection to broker")
	})
	testenv.CheckLogComponent(t, logs.String(), "publish-im")
}
