package command

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/sr/srfake"

	"github.com/hyapp/roomflow/internal/cli"
	"github.com/hyapp/roomflow/internal/config"
	"github.com/hyapp/roomflow/internal/schemareg"
	"github.com/hyapp/roomflow/internal/testenv"
)

// `roomflow schemas register` registers a subject per public topic and a
// second run changes nothing; an unreachable registry is a run-time
// failure (exit 1) naming schema_registry.url.
func TestSchemasRegisterCommand(t *testing.T) {
	fake := srfake.New()
	defer fake.Close()
	cfg := "log:\n  level: error\nschema_registry:\n  url: " + fake.URL() + "\n"
	first, err := runCLI(t, cfg, "schemas", "register")
	if err != nil {
		t.Fatalf("%v\n%s", err, first)
	}
	for _, s := range config.Default().Kafka.Topics.Public() {
		if !strings.Contains(first, s.Name+"-value") || !strings.Contains(first, "BACKWARD_TRANSITIVE") {
			t.Errorf("%s-value not listed:\n%s", s.Name, first)
		}
	}
	if second, err := runCLI(t, cfg, "schemas", "register"); err != nil || second != first {
		t.Fatalf("second run (%v) differs:\n%s\nfirst:\n%s", err, second, first)
	}

	srv := httptest.NewServer(http.NotFoundHandler())
	srv.Close()
	out, err := runCLI(t, "schema_registry:\n  url: "+srv.URL+"\n", "schemas", "register")
	if err == nil || !strings.Contains(err.Error(), "schema_registry.url") || cli.ExitCode(err) != cli.ExitFailure {
		t.Fatalf("unreachable registry: %v (exit %d)\n%s", err, cli.ExitCode(err), out)
	}
}

// A writer in confluent mode waits for its schema ids, not ready
// meanwhile (the migrate Job has not registered them yet), and is ready
// once they are found; in plain mode it needs no registry.
func TestPublicFramesWaitUntilRegistered(t *testing.T) {
	fake := srfake.New()
	defer fake.Close()
	cfg := config.Default()
	cfg.Kafka.PublicWireFormat = config.WireConfluent
	cfg.SchemaRegistry.URL = fake.URL()
	d := newDeps(&cfg, slog.New(slog.DiscardHandler))
	type result struct {
		frames schemareg.Frames
		err    error
	}
	done := make(chan result, 1)
	go func() {
		f, err := publicFrames(context.Background(), d, "mic-processor", "mic_session_closed", "mic_daily_stats", "mic_lifetime_stats")
		done <- result{f, err}
	}()
	deadline := time.Now().Add(10 * time.Second)
	for d.Health.Ready() == nil {
		if time.Now().After(deadline) {
			t.Fatal("ready before the schema ids were found")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := d.Health.Ready(); !strings.Contains(err.Error(), "schema-ids-mic-processor") {
		t.Fatalf("readiness: %v", err)
	}
	select {
	case r := <-done:
		t.Fatalf("returned before the schemas were registered: %+v", r)
	case <-time.After(300 * time.Millisecond):
	}
	cl, err := schemareg.New(cfg.SchemaRegistry, schemareg.Builtin())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cl.Register(context.Background(), cfg.Kafka.Topics.Public()); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-done:
		if r.err != nil || !r.frames.Confluent() || d.Health.Ready() != nil {
			t.Fatalf("after registering: %v, confluent %v, ready %v", r.err, r.frames.Confluent(), d.Health.Ready())
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the ids were never found")
	}

	cfg.Kafka.PublicWireFormat = config.WirePlain
	cfg.SchemaRegistry.URL = ""
	if f, err := publicFrames(context.Background(), newDeps(&cfg, slog.New(slog.DiscardHandler)), "x", "lucky_events"); err != nil || f.Confluent() {
		t.Fatalf("plain: %v %v", f.Confluent(), err)
	}
}

// The totals bootstrap is a one-shot Job: in confluent mode with the
// totals topics' schemas not registered it fails (exit 1) naming
// schema_registry.url within its bound, where a writer would wait.
func TestTotalsBootstrapSchemaWaitEnds(t *testing.T) {
	fake := srfake.New()
	defer fake.Close()
	m := testenv.NewMySQL(t)
	defer func(w time.Duration) { bootstrapSchemaWait = w }(bootstrapSchemaWait)
	bootstrapSchemaWait = 500 * time.Millisecond
	cfg := "mysql:\n  dsn: \"" + m.DSN + "\"\nlog:\n  level: error\nkafka:\n  public_wire_format: confluent\nschema_registry:\n  url: " + fake.URL() + "\n"
	start := time.Now()
	_, err := runCLI(t, cfg, "totals", "bootstrap")
	if err == nil || !strings.Contains(err.Error(), "schema_registry.url") || cli.ExitCode(err) != cli.ExitFailure {
		t.Fatalf("got %v (exit %d), want exit 1 naming schema_registry.url", err, cli.ExitCode(err))
	}
	if took := time.Since(start); took > 20*time.Second {
		t.Fatalf("took %s", took)
	}
}
