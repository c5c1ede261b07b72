package config

import (
	"net/url"
	"os"
	"strings"

	"github.com/hyapp/roomflow/internal/cfgerr"
)

// The values of kafka.public_wire_format.
const (
	// WirePlain is a public record's value as the bare protobuf message.
	WirePlain = "plain"
	// WireConfluent is the Confluent wire format: magic byte 0, the schema
	// id, the message indexes, then the message (docs/data-team.md).
	WireConfluent = "confluent"
)

// SchemaRegistryConfig is schema_registry: the Confluent-compatible Schema
// Registry the public topics' value schemas are registered in (`roomflow
// schemas register`, `roomflow topics`) and, in kafka.public_wire_format
// confluent, the writers look their schema ids up in. Empty URL: none.
type SchemaRegistryConfig struct {
	// URL is the registry's base URL, http or https.
	URL string `yaml:"url"`
	// User is the basic-auth user; the password is a secret and never in
	// the YAML: env ROOMFLOW_SCHEMA_REGISTRY_PASSWORD, else PasswordFile.
	User         string `yaml:"user"`
	PasswordFile string `yaml:"password_file"`
	// TLS: a CA for an https registry with a private CA, and a client
	// certificate for mutual TLS; read when a client is built.
	TLS ClientTLSConfig `yaml:"tls"`

	// secret is the password Validate loaded, behind a pointer so that
	// printing a Config never shows it.
	secret *registrySecret
}

type registrySecret struct {
	env      string // ROOMFLOW_SCHEMA_REGISTRY_PASSWORD, set by applyEnv
	password string // the password in effect
}

// Password is the basic-auth password Validate loaded ("" without one).
func (s SchemaRegistryConfig) Password() string {
	if s.secret == nil {
		return ""
	}
	return s.secret.password
}

// validate checks schema_registry.* into ch and loads the password: the
// environment's, else password_file's (one trailing newline dropped).
func (s *SchemaRegistryConfig) validate(ch *cfgerr.Checks) {
	sec := &registrySecret{}
	if s.secret != nil {
		sec.env = s.secret.env
	}
	defer func() { s.secret = sec }()
	if s.URL == "" {
		if s.User != "" || s.PasswordFile != "" || s.TLS.Enabled() {
			ch.Bad("schema_registry.url", "must be set when other schema_registry keys are")
		}
		return
	}
	if u, err := url.Parse(s.URL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		ch.Bad("schema_registry.url", "must be an http or https URL (got %q)", redactURL(s.URL))
	} else if u.Scheme == "http" && s.TLS.Enabled() {
		// Over http the TLS files would be ignored and the password sent in clear.
		ch.Bad("schema_registry.url", "must be https when schema_registry.tls is set (got %q)", redactURL(s.URL))
	}
	switch {
	case sec.env != "":
		sec.password = sec.env
	case s.PasswordFile != "":
		raw, err := os.ReadFile(s.PasswordFile)
		pw := strings.TrimSuffix(strings.TrimSuffix(string(raw), "\n"), "\r")
		switch {
		case err != nil:
			ch.Bad("schema_registry.password_file", "cannot read: %v", err)
		case pw == "":
			ch.Bad("schema_registry.password_file", "%s is empty", s.PasswordFile)
		default:
			sec.password = pw
		}
	}
	if sec.password != "" && s.User == "" {
		ch.Bad("schema_registry.user", "must be set with a password (schema_registry.password_file or ROOMFLOW_SCHEMA_REGISTRY_PASSWORD)")
	}
	ch.Add(cfgerr.Under("schema_registry.tls", nil, s.TLS.Files().Validate()))
}

// validateWireFormat checks kafka.public_wire_format. Its pairing with
// schema_registry.url is the writers' to check at their start, not
// `roomflow config`'s: the readers of both formats need no registry.
func (k KafkaConfig) validateWireFormat(ch *cfgerr.Checks) {
	switch k.PublicWireFormat {
	case "", WirePlain, WireConfluent: // "": the default, like every key
	default:
		ch.Bad("kafka.public_wire_format", "must be %s or %s (got %q)", WirePlain, WireConfluent, k.PublicWireFormat)
	}
}

// Confluent reports whether the public topics are written framed
// (kafka.public_wire_format confluent).
func (k KafkaConfig) Confluent() bool { return k.PublicWireFormat == WireConfluent }
