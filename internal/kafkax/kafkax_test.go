package kafkax_test

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hyapp/roomflow/internal/config"
	"github.com/hyapp/roomflow/internal/kafkax"
	"github.com/hyapp/roomflow/internal/testenv"
)

// Several clients share one registry (as the components of `roomflow run`
// do); each is labelled by its own client id and unregistered on close.
func TestClientMetricsShareRegistry(t *testing.T) {
	k := testenv.NewKafka(t)
	reg := prometheus.NewRegistry()
	a, err := k.Config.Cluster(reg, nil).NewClient("relay")
	if err != nil {
		t.Fatal(err)
	}
	b, err := k.Config.Cluster(reg, nil).NewClient("relay")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kadm.NewClient(a).ListBrokers(ctx(t)); err != nil {
		t.Fatal(err)
	}
	if _, err := kadm.NewClient(b).ListBrokers(ctx(t)); err != nil {
		t.Fatal(err)
	}
	clients := func() map[string]bool {
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		ids := map[string]bool{}
		for _, mf := range mfs {
			if !strings.HasPrefix(mf.GetName(), "roomflow_kafka_") {
				continue
			}
			for _, m := range mf.GetMetric() {
				for _, l := range m.GetLabel() {
					if l.GetName() == "client_id" {
						ids[l.GetValue()] = true
					}
				}
			}
		}
		return ids
	}
	if ids := clients(); len(ids) != 2 {
		t.Fatalf("want metrics of 2 clients, got %v", ids)
	}
	a.Close()
	if ids := clients(); len(ids) != 1 {
		t.Fatalf("closed client's metrics must be unregistered, got %v", ids)
	}
	b.Close()
}

func TestHeartbeatInterval(t *testing.T) {
	for _, c := range []struct{ session, want time.Duration }{
		{1500 * time.Millisecond, 500 * time.Millisecond}, // a third: two beats may be lost
		{6 * time.Second, 2 * time.Second},
		{15 * time.Second, 3 * time.Second}, // never slower than kgo's default
		{45 * time.Second, 3 * time.Second},
	} {
		if got := kafkax.HeartbeatInterval(c.session); got != c.want {
			t.Errorf("HeartbeatInterval(%s) = %s, want %s", c.session, got, c.want)
		}
	}
	if opts := (kafkax.Cluster{}).GroupOpts(); opts != nil {
		t.Errorf("GroupOpts without a session timeout = %d options, want none (kgo defaults)", len(opts))
	}
	if opts := config.Default().Kafka.Cluster(nil, nil).GroupOpts(); len(opts) != 2 {
		t.Errorf("GroupOpts(defaults) = %d options, want session timeout and heartbeat", len(opts))
	}
}

// kgo refuses a client id over 256 bytes, so a kafka.client_id that leaves
// no room for "-<component>-<n>" would stop every command at its first
// client, with kgo's words and exit 1; MaxClientIDPrefix leaves room for
// the longest component name and the restore reader's suffix.
func TestClientIDPrefixLeavesRoom(t *testing.T) {
	long := kafkax.Cluster{Brokers: []string{"127.0.0.1:1"}, ClientID: strings.Repeat("c", 250)}
	if cl, err := long.NewClient("relay"); err == nil || !strings.Contains(err.Error(), "client id length") {
		if cl != nil {
			cl.Close()
		}
		t.Fatalf("a 250-byte prefix: %v, want kgo's client id length error", err)
	}
	c := kafkax.Cluster{Brokers: []string{"127.0.0.1:1"}, ClientID: strings.Repeat("c", kafkax.MaxClientIDPrefix)}
	for _, component := range []string{"totals-bootstrap", "mic-processor"} {
		cl, err := c.NewClient(component, kgo.ClientID(c.ClientID+"-"+component+"-9223372036854775807-restore"))
		if err != nil {
			t.Fatalf("%s at MaxClientIDPrefix: %v", component, err)
		}
		cl.Close()
	}
}
