package config

import (
	"crypto/tls"
	"os"
	"strings"

	"github.com/hyapp/roomflow/internal/cfgerr"
	"github.com/hyapp/roomflow/internal/kafkax"
)

// kafkaSecrets is what kafka.tls and kafka.sasl load: the client TLS
// config (with the mTLS key) and the SASL password.
type kafkaSecrets struct {
	envPassword string // ROOMFLOW_KAFKA_SASL_PASSWORD, set by applyEnv
	password    string // the password in effect: envPassword, else password_file's
	tls         *tls.Config
}

// loadSecurity validates kafka.tls and kafka.sasl into ch and stores
// what they load in k.loaded (a fresh value each call, so a copied Config
// validated again never changes the original's).
func (k *KafkaConfig) loadSecurity(ch *cfgerr.Checks) {
	sec := &kafkaSecrets{}
	if k.loaded != nil {
		sec.envPassword = k.loaded.envPassword
	}
	t := k.TLS
	if t.Enabled {
		tc, err := kafkax.TLSFiles{CAFile: t.CAFile, CertFile: t.CertFile, KeyFile: t.KeyFile,
			ServerName: t.ServerName, InsecureSkipVerify: t.InsecureSkipVerify}.Load()
		ch.Add(cfgerr.Under("kafka.tls", nil, err))
		sec.tls = tc
	} else {
		// A CA or a client certificate without enabled would silently
		// connect in plaintext.
		for _, f := range []struct {
			key string
			set bool
		}{{"ca_file", t.CAFile != ""}, {"cert_file", t.CertFile != ""}, {"key_file", t.KeyFile != ""},
			{"server_name", t.ServerName != ""}, {"insecure_skip_verify", t.InsecureSkipVerify}} {
			if f.set {
				ch.Bad("kafka.tls.enabled", "is false while kafka.tls.%s is set: set enabled: true or remove it", f.key)
			}
		}
	}

	s := k.SASL
	fileOK := true
	switch {
	case sec.envPassword != "":
		sec.password = sec.envPassword
	case s.PasswordFile != "":
		raw, err := os.ReadFile(s.PasswordFile)
		// One trailing newline is the file's, not the password's.
		pw := strings.TrimSuffix(strings.TrimSuffix(string(raw), "\n"), "\r")
		switch {
		case err != nil:
			ch.Bad("kafka.sasl.password_file", "cannot read: %v", err)
			fileOK = false
		case pw == "":
			ch.Bad("kafka.sasl.password_file", "%s is empty", s.PasswordFile)
			fileOK = false
		default:
			sec.password = pw
		}
	}
	auth := kafkax.SASL{Mechanism: s.Mechanism, User: s.User, Password: sec.password}
	if s.Mechanism != "" && auth.Password == "" {
		if fileOK {
			ch.Bad("kafka.sasl.password_file", "must be set, or ROOMFLOW_KAFKA_SASL_PASSWORD, with kafka.sasl.mechanism %s", s.Mechanism)
		}
		auth.Password = "-" // reported above; let Validate check the other fields
	}
	ch.Add(cfgerr.Under("kafka.sasl", nil, auth.Validate()))
	k.loaded = sec
}

// WithConnection returns k with the brokers, TLS and SASL of from, what
// from's Validate loaded included: how a tool that keeps its own topics
// and partitions (the benchmarks' -kafka-config) connects to a configured
// cluster. from must have passed Validate (config.Load validates).
func (k KafkaConfig) WithConnection(from KafkaConfig) KafkaConfig {
	k.Brokers = append([]string(nil), from.Brokers...)
	k.TLS, k.SASL, k.loaded = from.TLS, from.SASL, from.loaded
	return k
}
