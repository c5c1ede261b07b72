package config_test

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/hyapp/roomflow/internal/cfgerr"
	"github.com/hyapp/roomflow/internal/config"
	"github.com/hyapp/roomflow/internal/kafkax"
	"github.com/hyapp/roomflow/internal/testenv"
)

const kafkaPass = "kafka-Pa55word-9f3a"

func writeTemp(t *testing.T, name, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func getenv(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

// A Strimzi-style kafka block loads: the TLS files become the clients' TLS
// config, the password comes from its file (its newline dropped) or, when
// set, from ROOMFLOW_KAFKA_SASL_PASSWORD, and Cluster carries both.
func TestKafkaSecurityLoads(t *testing.T) {
	p := testenv.NewPKI(t, "kafka.test", true)
	pwFile := writeTemp(t, "password", kafkaPass+"\n")
	cfgFile := writeTemp(t, "roomflow.yaml", fmt.Sprintf(`
kafka:
  brokers: ["kafka-bootstrap:9093"]
  tls:
    enabled: true
    ca_file: %s
    cert_file: %s
    key_file: %s
    server_name: kafka-bootstrap.kafka.svc
  sasl:
    mechanism: SCRAM-SHA-512
    user: roomflow
    password_file: %s
`, p.CAFile, p.ClientCert, p.ClientKey, pwFile))
	cfg, err := config.Load(cfgFile, getenv(nil))
	if err != nil {
		t.Fatal(err)
	}
	c := cfg.Kafka.Cluster(nil, nil)
	if c.TLS == nil || c.TLS.RootCAs == nil || len(c.TLS.Certificates) != 1 || c.TLS.ServerName != "kafka-bootstrap.kafka.svc" || c.TLS.InsecureSkipVerify {
		t.Fatalf("tls: %+v", c.TLS)
	}
	if c.SASL != (kafkax.SASL{Mechanism: kafkax.SASLScramSHA512, User: "roomflow", Password: kafkaPass}) {
		t.Fatalf("sasl from the file: %v (password right: %v)", c.SASL, c.SASL.Password == kafkaPass)
	}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}

	cfg, err = config.Load(cfgFile, getenv(map[string]string{"ROOMFLOW_KAFKA_SASL_PASSWORD": "from-env-1"}))
	if err != nil {
		t.Fatal(err)
	}
	if got := cfg.Kafka.Cluster(nil, nil).SASL.Password; got != "from-env-1" {
		t.Fatalf("ROOMFLOW_KAFKA_SASL_PASSWORD must win over password_file (right one: %v)", got == kafkaPass)
	}
	// The env alone is enough.
	cfg, err = config.Load(writeTemp(t, "env.yaml", "kafka:\n  sasl:\n    mechanism: PLAIN\n    user: u\n"),
		getenv(map[string]string{"ROOMFLOW_KAFKA_SASL_PASSWORD": "from-env-2"}))
	if err != nil {
		t.Fatal(err)
	}
	if s := cfg.Kafka.Cluster(nil, nil).SASL; s.Mechanism != kafkax.SASLPlain || s.Password != "from-env-2" {
		t.Fatalf("env password: %v", s)
	}
}

// The defaults connect in plaintext without SASL, as kfake and the tests
// expect.
func TestKafkaSecurityDefaultsOff(t *testing.T) {
	c := config.Default()
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	k := c.Kafka.Cluster(nil, nil)
	if k.TLS != nil || k.SASL.Enabled() || c.Kafka.TLS.InsecureSkipVerify {
		t.Fatalf("defaults must be plaintext without SASL: %+v", k)
	}
}

// Every kafka.tls and kafka.sasl mistake fails Validate (so the start),
// naming its dotted key, and no message shows the password.
func TestKafkaSecurityValidateNamesTheKey(t *testing.T) {
	p := testenv.NewPKI(t, "kafka.test", true)
	pwFile := writeTemp(t, "password", kafkaPass)
	empty := writeTemp(t, "empty", "\n")
	missing := filepath.Join(t.TempDir(), "missing")
	notPEM := writeTemp(t, "garbage.pem", "not a certificate")
	scram := func(c *config.Config) {
		c.Kafka.SASL = config.KafkaSASLConfig{Mechanism: "SCRAM-SHA-512", User: "roomflow", PasswordFile: pwFile}
	}
	tlsOn := func(c *config.Config) { c.Kafka.TLS = config.KafkaTLSConfig{Enabled: true, CAFile: p.CAFile} }
	cases := []struct {
		key, want string
		mut       func(*config.Config)
	}{
		{"kafka.tls.ca_file", "no such file", func(c *config.Config) { tlsOn(c); c.Kafka.TLS.CAFile = missing }},
		{"kafka.tls.ca_file", "holds no PEM certificate", func(c *config.Config) { tlsOn(c); c.Kafka.TLS.CAFile = notPEM }},
		{"kafka.tls.cert_file", "must be set with key_file", func(c *config.Config) { tlsOn(c); c.Kafka.TLS.KeyFile = p.ClientKey }},
		{"kafka.tls.key_file", "must be set with cert_file", func(c *config.Config) { tlsOn(c); c.Kafka.TLS.CertFile = p.ClientCert }},
		{"kafka.tls.key_file", "no such file", func(c *config.Config) { tlsOn(c); c.Kafka.TLS.CertFile, c.Kafka.TLS.KeyFile = p.ClientCert, missing }},
		{"kafka.tls.cert_file", "not a certificate and its key", func(c *config.Config) { tlsOn(c); c.Kafka.TLS.CertFile, c.Kafka.TLS.KeyFile = p.CAFile, p.ClientKey }},
		{"kafka.tls.enabled", "kafka.tls.ca_file is set", func(c *config.Config) { c.Kafka.TLS.CAFile = p.CAFile }},
		{"kafka.tls.enabled", "kafka.tls.insecure_skip_verify is set", func(c *config.Config) { c.Kafka.TLS.InsecureSkipVerify = true }},
		{"kafka.sasl.mechanism", `must be PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512 (got "GSSAPI")`, func(c *config.Config) { scram(c); c.Kafka.SASL.Mechanism = "GSSAPI" }},
		{"kafka.sasl.mechanism", "must be set", func(c *config.Config) { scram(c); c.Kafka.SASL.Mechanism = "" }},
		{"kafka.sasl.user", "must be set", func(c *config.Config) { scram(c); c.Kafka.SASL.User = "" }},
		{"kafka.sasl.password_file", "ROOMFLOW_KAFKA_SASL_PASSWORD", func(c *config.Config) { scram(c); c.Kafka.SASL.PasswordFile = "" }},
		{"kafka.sasl.password_file", "no such file", func(c *config.Config) { scram(c); c.Kafka.SASL.PasswordFile = missing }},
		{"kafka.sasl.password_file", "is empty", func(c *config.Config) { scram(c); c.Kafka.SASL.PasswordFile = empty }},
	}
	for _, tc := range cases {
		c := config.Default()
		tc.mut(&c)
		err := c.Validate()
		if err == nil {
			t.Errorf("%s (%s): accepted", tc.key, tc.want)
			continue
		}
		if !slices.Contains(cfgerr.Keys(err), tc.key) || !strings.Contains(err.Error(), "config: "+tc.key+": ") || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: want an error naming it (%s), got %v", tc.key, tc.want, err)
		}
		if strings.Contains(err.Error(), kafkaPass) {
			t.Errorf("%s: the error shows the password: %v", tc.key, err)
		}
	}
	// Both valid together, validated twice (a copy's Validate leaves the
	// original as it was).
	c := config.Default()
	tlsOn(&c)
	scram(&c)
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	cp := c
	cp.Kafka.SASL.PasswordFile = empty
	if err := cp.Validate(); err == nil {
		t.Fatal("empty password file accepted")
	}
	if c.Kafka.Cluster(nil, nil).SASL.Password != kafkaPass {
		t.Fatal("validating a copy changed the original's password")
	}
}

// A KafkaConfig whose security never went through Validate must not
// connect without it.
func TestKafkaSecurityClusterNeedsValidate(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("Cluster with unvalidated kafka.sasl must panic")
		}
	}()
	c := config.Default()
	c.Kafka.SASL = config.KafkaSASLConfig{Mechanism: "PLAIN", User: "u"}
	c.Kafka.Cluster(nil, nil)
}

// The password (from the env or its file) and the client key are never in
// `roomflow config`'s YAML nor in a printed Config; the file names are.
func TestKafkaSecurityRedacted(t *testing.T) {
	p := testenv.NewPKI(t, "kafka.test", true)
	keyPEM, err := os.ReadFile(p.ClientKey)
	if err != nil {
		t.Fatal(err)
	}
	keyLine := strings.Split(string(keyPEM), "\n")[1]
	for name, env := range map[string]map[string]string{
		"file": nil,
		"env":  {"ROOMFLOW_KAFKA_SASL_PASSWORD": kafkaPass},
	} {
		pwFile := writeTemp(t, "pw", kafkaPass)
		if env != nil {
			pwFile = ""
		}
		cfg, err := config.Load(writeTemp(t, "roomflow.yaml", fmt.Sprintf(
			"kafka:\n  tls:\n    enabled: true\n    ca_file: %s\n    cert_file: %s\n    key_file: %s\n  sasl:\n    mechanism: SCRAM-SHA-256\n    user: roomflow\n    password_file: %q\n",
			p.CAFile, p.ClientCert, p.ClientKey, pwFile)), getenv(env))
		if err != nil {
			t.Fatal(err)
		}
		if cfg.Kafka.Cluster(nil, nil).SASL.Password != kafkaPass {
			t.Fatalf("%s: password not loaded", name)
		}
		out, err := cfg.YAML()
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range []string{string(out), fmt.Sprintf("%+v", *cfg), fmt.Sprintf("%#v", *cfg), fmt.Sprintf("%+v", cfg.Kafka.Cluster(nil, nil))} {
			if strings.Contains(s, kafkaPass) || strings.Contains(s, keyLine) {
				t.Fatalf("%s: a secret is printed:\n%s", name, s)
			}
		}
		if !strings.Contains(string(out), "mechanism: SCRAM-SHA-256") || !strings.Contains(string(out), "key_file: "+p.ClientKey) {
			t.Fatalf("%s: the keys must still be shown:\n%s", name, out)
		}
	}
}
