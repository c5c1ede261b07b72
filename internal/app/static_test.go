package app

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hyapp/roomflow/internal/config"
	"github.com/hyapp/roomflow/internal/testenv"
)

// A component that fails, or stops because another failed, leaves no
// group; one stopped by the process leaves with each static member it
// has, and skips the dynamic ones.
func TestLeavingOnStop(t *testing.T) {
	k := testenv.NewKafka(t, testenv.NoTopics())
	cfg := config.Default()
	cfg.Kafka = k.Config
	var logs bytes.Buffer
	d := &Deps{Config: &cfg, Log: slog.New(slog.NewTextHandler(&logs, nil))}
	// A static member in the group, for the leave to find.
	cl, err := kgo.NewClient(kgo.SeedBrokers(k.Brokers...), kgo.ConsumerGroup("g"), kgo.ConsumeTopics("t"),
		kgo.InstanceID("pod-1-sink"), kgo.AllowAutoTopicCreation())
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	members := []StaticMember{{Group: "g", ID: "pod-1-sink"}, {Group: "g2"}}

	boom := errors.New("boom")
	failing := ComponentFunc(func(context.Context) error { return boom })
	if err := LeavingOnStop(d, "sink", failing, members...).Run(context.Background()); !errors.Is(err, boom) {
		t.Fatalf("a failure must be returned: %v", err)
	}
	ctx, cancel := context.WithCancelCause(context.Background())
	cancel(boom) // another component failed
	waiting := ComponentFunc(func(ctx context.Context) error { <-ctx.Done(); return nil })
	if err := LeavingOnStop(d, "sink", waiting, members...).Run(ctx); err != nil {
		t.Fatal(err)
	}
	if logs.Len() != 0 {
		t.Fatalf("nothing may leave after a failure:\n%s", logs.String())
	}
	ctx, stop := context.WithCancel(context.Background())
	stop() // the process is being stopped
	if err := LeavingOnStop(d, "sink", waiting, members...).Run(ctx); err != nil {
		t.Fatal(err)
	}
	if got := logs.String(); strings.Count(got, "instance_id=") != 1 || !strings.Contains(got, "instance_id=pod-1-sink") {
		t.Fatalf("want one leave (or attempt) of pod-1-sink only:\n%s", got)
	}
}
