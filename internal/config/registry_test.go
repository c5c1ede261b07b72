package config_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/hyapp/roomflow/internal/cfgerr"
	"github.com/hyapp/roomflow/internal/config"
)

// schema_registry loads its password from the environment (winning) or
// password_file, never prints it, and names the key that is wrong.
func TestSchemaRegistryConfig(t *testing.T) {
	const pw = "sr-Pa55-7c1e"
	file := writeTemp(t, "roomflow.yaml", fmt.Sprintf("schema_registry:\n  url: https://registry.example:8081\n  user: roomflow\n  password_file: %s\n",
		writeTemp(t, "pw", pw+"\n")))
	cfg, err := config.Load(file, getenv(nil))
	if err != nil || cfg.SchemaRegistry.Password() != pw {
		t.Fatalf("password_file: %v (got the right one: %v)", err, cfg != nil && cfg.SchemaRegistry.Password() == pw)
	}
	cfg, err = config.Load(file, getenv(map[string]string{"ROOMFLOW_SCHEMA_REGISTRY_PASSWORD": "from-env"}))
	if err != nil || cfg.SchemaRegistry.Password() != "from-env" {
		t.Fatalf("ROOMFLOW_SCHEMA_REGISTRY_PASSWORD must win: %v", err)
	}
	out, _ := cfg.YAML()
	if strings.Contains(string(out), "from-env") || strings.Contains(string(out), pw) || !strings.Contains(string(out), "public_wire_format: plain") {
		t.Fatalf("config output:\n%s", out)
	}

	for _, tc := range []struct{ yaml, key string }{
		{"schema_registry:\n  url: ftp://x\n", "schema_registry.url"},
		{"schema_registry:\n  user: u\n", "schema_registry.url"},
		{"schema_registry:\n  url: http://r:8081\n  password_file: /nonexistent/pw\n  user: u\n", "schema_registry.password_file"},
		{"schema_registry:\n  url: http://r:8081\n  tls:\n    cert_file: c.pem\n", "schema_registry.tls.key_file"},
		// TLS files over http would be ignored, the password sent in clear.
		{"schema_registry:\n  url: http://r:8081\n  tls:\n    ca_file: " + writeTemp(t, "ca.pem", "x") + "\n", "schema_registry.url"},
		{"kafka:\n  public_wire_format: avro\n", "kafka.public_wire_format"},
	} {
		_, err := config.Load(writeTemp(t, "c.yaml", tc.yaml), getenv(nil))
		if !slices.Contains(cfgerr.Keys(err), tc.key) {
			t.Errorf("%q: %v, want key %s", tc.yaml, err, tc.key)
		}
	}
	cfg, err = config.Load(writeTemp(t, "c.yaml", "kafka:\n  public_wire_format: confluent\n"), getenv(nil))
	if err != nil || !cfg.Kafka.Confluent() {
		t.Fatalf("confluent without a registry is the writers' to refuse, not Load's: %v", err)
	}
}

// A password in schema_registry.url's user info is redacted in `roomflow
// config`'s output and never in the error of a URL that is refused.
func TestSchemaRegistryURLPasswordRedacted(t *testing.T) {
	const pw = "sr-url-Pa55"
	cfg, err := config.Load(writeTemp(t, "c.yaml", "schema_registry:\n  url: https://roomflow:"+pw+"@registry.example:8081\n"), getenv(nil))
	if err != nil {
		t.Fatal(err)
	}
	out, _ := cfg.YAML()
	if strings.Contains(string(out), pw) || !strings.Contains(string(out), "registry.example:8081") {
		t.Fatalf("config output:\n%s", out)
	}
	_, err = config.Load(writeTemp(t, "c.yaml", "schema_registry:\n  url: ftp://roomflow:"+pw+"@registry.example\n"), getenv(nil))
	if !slices.Contains(cfgerr.Keys(err), "schema_registry.url") || strings.Contains(err.Error(), pw) {
		t.Fatalf("err = %v, want one naming schema_registry.url without the password", err)
	}
}
