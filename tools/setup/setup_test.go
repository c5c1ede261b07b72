package setup_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/sr/srfake"

	"github.com/hyapp/roomflow/internal/cli"
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

// With schema_registry.url set, topics registers the public topics'
// schemas after creating the topics; an unreachable registry fails it as a
// run-time failure (exit 1) naming schema_registry.url, after the topics.
func TestTopicsRegistersSchemas(t *testing.T) {
	fake := srfake.New()
	defer fake.Close()
	cfg := config.Default()
	cfg.Kafka = testenv.NewKafka(t, testenv.NoTopics()).Config
	cfg.SchemaRegistry.URL = fake.URL()
	var out strings.Builder
	if err := setup.Topics(context.Background(), &cfg, &out); err != nil {
		t.Fatal(err)
	}
	for _, s := range cfg.Kafka.Topics.Public() {
		if !strings.Contains(out.String(), s.Name+"-value") || !fake.SubjectExists(s.Name+"-value") {
			t.Errorf("%s-value not registered:\n%s", s.Name, out.String())
		}
	}

	srv := httptest.NewServer(http.NotFoundHandler())
	cfg.SchemaRegistry.URL = srv.URL
	srv.Close()
	out.Reset()
	err := setup.Topics(context.Background(), &cfg, &out)
	if err == nil || !strings.Contains(err.Error(), "schema_registry.url") || cli.ExitCode(err) != cli.ExitFailure {
		t.Fatalf("unreachable registry: err %v (exit %d), want exit %d naming schema_registry.url", err, cli.ExitCode(err), cli.ExitFailure)
	}
	if !strings.Contains(out.String(), "TOPIC") {
		t.Fatalf("the topics are still created and listed first:\n%s", out.String())
	}
}
