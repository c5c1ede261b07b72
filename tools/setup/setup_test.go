package setup_test

import (
	"context"
	"strings"
	"testing"

	"github.com/hyapp/roomflow/internal/config"
	"github.com/hyapp/roomflow/internal/testenv"
	"github.com/hyapp/roomflow/tools/setup"
)

// Topics creates every topic of the layout once, and a second run finds
// them all.
func TestTopics(t *testing.T) {
	cfg := config.Default()
	cfg.Kafka = testenv.NewKafka(t, testenv.NoTopics()).Config
	var first, second strings.Builder
	if err := setup.Topics(context.Background(), &cfg, &first); err != nil {
		t.Fatal(err)
	}
	if err := setup.Topics(context.Background(), &cfg, &second); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(first.String()), "\n")
	if len(lines) != len(cfg.Kafka.Topics.List())+1 || !strings.HasPrefix(lines[0], "TOPIC") {
		t.Fatalf("first run:\n%s", first.String())
	}
	for _, l := range lines[1:] {
		if !strings.HasSuffix(l, "true") {
			t.Errorf("first run did not create: %q", l)
		}
	}
	for _, l := range strings.Split(strings.TrimSpace(second.String()), "\n")[1:] {
		if !strings.HasSuffix(l, "false") {
			t.Errorf("second run created again: %q", l)
		}
	}
}
