// Package testenv gives integration tests real infrastructure: a Kafka
// cluster and a fresh MySQL database with roomflow's migrations applied.
//
// Kafka, in order of preference:
//   - ROOMFLOW_KAFKA_BROKERS (comma separated): a real cluster; every test
//     gets its own topic prefix so tests never share data;
//   - ROOMFLOW_TESTCONTAINERS=1 with a Docker engine answering: a Kafka
//     container started through testcontainers-go;
//   - otherwise an in-process franz-go kfake cluster of 3 brokers, which
//     speaks the real wire protocol (transactions, groups, read_committed).
//
// MySQL: ROOMFLOW_TEST_MYSQL_DSN (default root@tcp(127.0.0.1:3306)/) names
// a server; each test gets its own database, dropped afterwards. A test that
// needs MySQL fails, never skips, when the server is absent.
//
// It also holds the helpers several packages' tests share, so each does
// not grow its own copy: Eventually and RunUntil (waiting), Metric and
// Total (reading Prometheus series), Kafka.DrainCommitted (reading topics
// read_committed to the end), ChildCommand (re-executing the test binary),
// SyncBuffer, ClosedAddr and CheckLogComponent.
package testenv

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hyapp/roomflow/internal/config"
	"github.com/hyapp/roomflow/internal/kafkax"
)

// Kafka is a cluster for one test.
type Kafka struct {
	Brokers []string
	// Fake is the in-process cluster, for fault injection (Fault, Control)
	// and restarts; nil on a real cluster or a container.
	Fake *kfake.Cluster
	// Config has Brokers, Partitions and per-test Topics set; topics exist.
	Config config.KafkaConfig
}

// KafkaOpt tunes NewKafka.
type KafkaOpt func(*kafkaOpts)

type kafkaOpts struct {
	partitions int32
	fakeOpts   []kfake.Opt
	noTopics   bool
}

// Partitions sets the partition count of the test's topics (default 6).
func Partitions(n int32) KafkaOpt { return func(o *kafkaOpts) { o.partitions = n } }

// FakeOpts passes options to kfake (ignored on a real cluster).
func FakeOpts(opts ...kfake.Opt) KafkaOpt {
	return func(o *kafkaOpts) { o.fakeOpts = append(o.fakeOpts, opts...) }
}

// NoTopics leaves topic creation to the test (for `roomflow topics` tests).
func NoTopics() KafkaOpt { return func(o *kafkaOpts) { o.noTopics = true } }

// NewKafka returns a cluster with the design's topics created under a
// prefix unique to this test.
func NewKafka(t testing.TB, opts ...KafkaOpt) *Kafka {
	t.Helper()
	o := kafkaOpts{partitions: 6}
	for _, f := range opts {
		f(&o)
	}
	k := &Kafka{Config: config.Default().Kafka}
	switch {
	case os.Getenv("ROOMFLOW_KAFKA_BROKERS") != "":
		for _, b := range strings.Split(os.Getenv("ROOMFLOW_KAFKA_BROKERS"), ",") {
			k.Brokers = append(k.Brokers, strings.TrimSpace(b))
		}
	case os.Getenv("ROOMFLOW_TESTCONTAINERS") == "1" && dockerAvailable():
		k.Brokers = startKafkaContainer(t)
	default:
		c, err := kfake.NewCluster(append([]kfake.Opt{kfake.NumBrokers(3)}, o.fakeOpts...)...)
		if err != nil {
			t.Fatalf("testenv: kfake: %v", err)
		}
		t.Cleanup(c.Close)
		k.Fake = c
		k.Brokers = c.ListenAddrs()
	}
	k.Config.Brokers = k.Brokers
	k.Config.Partitions = o.partitions
	k.Config.ReplicationFactor = -1
	k.Config.Topics = k.Config.Topics.WithPrefix(UniqueName(t) + ".")
	if !o.noTopics {
		adm := k.Admin(t)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := kafkax.EnsureTopics(ctx, adm, k.Config.Layout()); err != nil {
			t.Fatalf("testenv: create topics: %v", err)
		}
	}
	return k
}

// Client returns a client on the cluster, closed at cleanup.
func (k *Kafka) Client(t testing.TB, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(k.Brokers...)}, opts...)...)
	if err != nil {
		t.Fatalf("testenv: kafka client: %v", err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// Admin returns a kadm client on the cluster.
func (k *Kafka) Admin(t testing.TB) *kadm.Client { return kadm.NewClient(k.Client(t)) }

var unsafe = regexp.MustCompile(`[^a-z0-9]+`)

// UniqueName is a short lower-case name unique to this test run, usable as
// a topic prefix, group id or database name.
func UniqueName(t testing.TB) string {
	n := strings.Trim(unsafe.ReplaceAllString(strings.ToLower(t.Name()), "_"), "_")
	if len(n) > 40 {
		n = n[len(n)-40:]
	}
	var b [4]byte
	_, _ = rand.Read(b[:])
	return "t_" + n + "_" + hex.EncodeToString(b[:])
}

// Cluster is how components under test reach k: its brokers and the
// default group session, no metrics, no logs.
func (k *Kafka) Cluster() kafkax.Cluster { return k.Config.Cluster(nil, nil) }
