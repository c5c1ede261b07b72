package config

import (
	"net/url"

	"github.com/go-sql-driver/mysql"
	"go.yaml.in/yaml/v3"
)

const redacted = "REDACTED"

// Redacted returns a copy safe to print or log: the DSN password, the
// Schema Registry URL's password, the IM secret key, the lucky audit key
// and the fairness keys are replaced, and the Kafka SASL password and TLS
// key Validate loaded are dropped (the copy cannot connect with kafka.tls
// or kafka.sasl set: print it, do not use it).
func (c Config) Redacted() Config {
	c.MySQL.DSN = RedactDSN(c.MySQL.DSN)
	c.Relay.Binlog.DSN = RedactDSN(c.Relay.Binlog.DSN)
	c.SchemaRegistry.URL = redactURL(c.SchemaRegistry.URL)
	if c.IM.SecretKey != "" {
		c.IM.SecretKey = redacted
	}
	if c.Lucky.AuditKey != "" {
		c.Lucky.AuditKey = redacted
	}
	if c.Lucky.Fairness.Key != "" {
		c.Lucky.Fairness.Key = redacted
	}
	if len(c.Lucky.Fairness.OldKeys) > 0 {
		c.Lucky.Fairness.OldKeys = []string{redacted}
	}
	c.Kafka.Brokers = append([]string(nil), c.Kafka.Brokers...)
	c.Kafka.loaded = nil // the SASL password and TLS key; not in the YAML either
	c.SchemaRegistry.secret = nil
	return c
}

// RedactDSN hides the password of a go-sql-driver DSN. A DSN that does not
// parse is hidden whole, since we cannot know where its password is.
func RedactDSN(dsn string) string {
	if dsn == "" {
		return ""
	}
	c, err := mysql.ParseDSN(dsn)
	if err != nil {
		return redacted
	}
	if c.Passwd != "" {
		c.Passwd = redacted
	}
	return c.FormatDSN()
}

// redactURL hides the password of a URL's user info. A URL that does not
// parse is hidden whole, like a DSN.
func redactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return redacted
	}
	if _, ok := u.User.Password(); ok {
		u.User = url.UserPassword(u.User.Username(), redacted)
	}
	return u.String()
}

// YAML renders the redacted effective config.
func (c Config) YAML() ([]byte, error) { return yaml.Marshal(c.Redacted()) }
