package config

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"
	"golang.org/x/net/http/httpguts"
)

// FieldError is an invalid configuration value. Key is the YAML path
// ("relay.batch_size") so an operator knows exactly what to fix.
type FieldError struct {
	Key string
	Msg string
}

func (e *FieldError) Error() string { return "config: " + e.Key + ": " + e.Msg }

// Validate checks every key and returns all problems joined; each is a
// *FieldError (use errors.As). It never includes secret values.
func (c *Config) Validate() error {
	var errs []error
	bad := func(key, format string, args ...any) {
		errs = append(errs, &FieldError{Key: key, Msg: fmt.Sprintf(format, args...)})
	}
	positive := func(key string, v int) {
		if v <= 0 {
			bad(key, "must be > 0 (got %d)", v)
		}
	}
	positiveDur := func(key string, v Duration) {
		if v <= 0 {
			bad(key, "must be a positive duration (got %s)", v)
		}
	}
	headerName := func(key, v string) {
		if !httpguts.ValidHeaderFieldName(v) {
			bad(key, "must be an HTTP header name (got %q)", v)
		}
	}
	addr := func(key, v string, required bool) {
		if v == "" {
			if required {
				bad(key, "must be set")
			}
			return
		}
		if _, _, err := net.SplitHostPort(v); err != nil {
			bad(key, "must be host:port (got %q)", v)
		}
	}

	if c.AppCode == "" || len(c.AppCode) > 32 {
		bad("app_code", "must be 1..32 bytes (got %d)", len(c.AppCode))
	}
	switch strings.ToLower(c.Log.Level) {
	case "debug", "info", "warn", "error":
	default:
		bad("log.level", "must be debug, info, warn or error (got %q)", c.Log.Level)
	}
	switch c.Log.Format {
	case "json", "text":
	default:
		bad("log.format", "must be json or text (got %q)", c.Log.Format)
	}
	addr("metrics.addr", c.Metrics.Addr, false)

	if len(c.Kafka.Brokers) == 0 {
		bad("kafka.brokers", "must list at least one broker")
	}
	for _, b := range c.Kafka.Brokers {
		if _, _, err := net.SplitHostPort(b); err != nil {
			bad("kafka.brokers", "%q is not host:port", b)
		}
	}
	if c.Kafka.ClientID == "" {
		bad("kafka.client_id", "must be set")
	}
	if c.Kafka.Partitions <= 0 {
		bad("kafka.partitions", "must be > 0 (got %d)", c.Kafka.Partitions)
	}
	if c.Kafka.ReplicationFactor == 0 || c.Kafka.ReplicationFactor < -1 {
		bad("kafka.replication_factor", "must be -1 (broker default) or >= 1 (got %d)", c.Kafka.ReplicationFactor)
	}
	if c.Kafka.SessionTimeout.D() < time.Second || c.Kafka.SessionTimeout.D() > 30*time.Minute {
		bad("kafka.session_timeout", "must be between 1s and 30m (got %s)", c.Kafka.SessionTimeout)
	}
	seen := map[string]string{}
	for _, t := range c.Kafka.Topics.List() {
		key := "kafka.topics." + t.Key
		if err := validTopicName(t.Name); err != nil {
			bad(key, "%v", err)
			continue
		}
		if other, dup := seen[t.Name]; dup {
			bad(key, "topic %q is also used by kafka.topics.%s", t.Name, other)
		}
		seen[t.Name] = t.Key
	}

	if c.MySQL.DSN == "" {
		bad("mysql.dsn", "must be set")
	} else if _, err := mysql.ParseDSN(c.MySQL.DSN); err != nil {
		bad("mysql.dsn", "is not a valid go-sql-driver DSN (user:pass@tcp(host:port)/db)")
	}
	positive("mysql.max_open_conns", c.MySQL.MaxOpenConns)
	if c.MySQL.MaxIdleConns < 0 {
		bad("mysql.max_idle_conns", "must be >= 0 (got %d)", c.MySQL.MaxIdleConns)
	}
	positiveDur("mysql.conn_max_lifetime", c.MySQL.ConnMaxLife)
	positiveDur("shutdown.timeout", c.Shutdown.Timeout)

	positive("relay.batch_size", c.Relay.BatchSize)
	positiveDur("relay.poll_interval", c.Relay.PollInterval)
	positiveDur("relay.gap_max_age", c.Relay.GapMaxAge)
	positive("relay.max_open_gaps", c.Relay.MaxOpenGaps)
	positiveDur("relay.failover_timeout", c.Relay.FailoverTimeout)
	if c.Relay.FailoverTimeout > 0 && c.Relay.FailoverTimeout.D() < time.Second {
		bad("relay.failover_timeout", "must be at least 1s (got %s)", c.Relay.FailoverTimeout)
	}
	if c.Relay.TransactionalID == "" {
		bad("relay.transactional_id", "must be set")
	}
	positive("relay.max_record_bytes", c.Relay.MaxRecordBytes)
	positive("relay.max_batch_bytes", c.Relay.MaxBatchBytes)
	for typ, topic := range c.Relay.Routes {
		if typ == "" {
			bad("relay.routes", "has an empty event_type")
		}
		if err := validTopicName(topic); err != nil {
			bad("relay.routes."+typ, "%v", err)
		}
	}

	positive("sink.batch_size", c.Sink.BatchSize)
	positiveDur("sink.flush_interval", c.Sink.FlushInterval)
	if c.Sink.Group == "" {
		bad("sink.group", "must be set")
	}
	positive("sink.max_retries", c.Sink.MaxRetries)
	addr("api.addr", c.API.Addr, false)
	addr("api.app_addr", c.API.AppAddr, false)
	addr("api.grpc_addr", c.API.GRPCAddr, false)
	// Port 0 picks a free port per listener, so only fixed ports can clash.
	sameAddr := func(a, b string) bool { return a != "" && a == b && !strings.HasSuffix(a, ":0") }
	if sameAddr(c.API.AppAddr, c.API.Addr) {
		bad("api.app_addr", "must differ from api.addr (%q): the app routes trust a gateway header the internal listener must not honour", c.API.Addr)
	}
	if sameAddr(c.API.GRPCAddr, c.API.Addr) || sameAddr(c.API.GRPCAddr, c.API.AppAddr) {
		bad("api.grpc_addr", "must differ from api.addr and api.app_addr (got %q)", c.API.GRPCAddr)
	}
	headerName("api.user_header", c.API.UserHeader)
	headerName("api.app_code_header", c.API.AppCodeHeader)
	if strings.EqualFold(c.API.UserHeader, c.API.AppCodeHeader) {
		bad("api.app_code_header", "must differ from api.user_header (%q)", c.API.UserHeader)
	}

	// outbox_worker: seed 000 — <= 0 falls back (done in normalize), but an
	// unknown retry strategy must stop the process.
	switch c.OutboxWorker.RetryStrategy {
	case "", "fixed_interval":
	default:
		bad("outbox_worker.retry_strategy", "must be empty or fixed_interval (got %q)", c.OutboxWorker.RetryStrategy)
	}
	positiveDur("outbox_worker.claim_grace", c.OutboxWorker.ClaimGrace)
	if c.OutboxWorker.ClaimGrace > 0 && c.OutboxWorker.ClaimGrace < c.IM.FastPathDelay {
		bad("outbox_worker.claim_grace", "must be at least im.fast_path_delay (%s), or the scan sends rows room-service is still publishing itself", c.IM.FastPathDelay)
	}
	positiveDur("outbox_worker.lock_ttl", c.OutboxWorker.LockTTL)
	if c.OutboxWorker.LockTTL > 0 && c.OutboxWorker.LockTTL <= c.OutboxWorker.PublishTimeout {
		bad("outbox_worker.lock_ttl", "must exceed outbox_worker.publish_timeout (%s), or a live claim could be stolen", c.OutboxWorker.PublishTimeout)
	}
	if c.OutboxWorker.Group == "" {
		bad("outbox_worker.group", "must be set")
	}

	if u, err := url.Parse(c.IM.Endpoint); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		bad("im.endpoint", "must be an http(s) base URL (got %q)", c.IM.Endpoint)
	}
	if c.IM.SDKAppID < 0 || c.IM.SDKAppID > 1<<32-1 {
		bad("im.sdk_app_id", "must be a uint32 (got %d)", c.IM.SDKAppID)
	}
	if c.IM.AdminIdentifier == "" {
		bad("im.admin_identifier", "must be set")
	}
	positiveDur("im.usersig_ttl", c.IM.UserSigTTL)
	if c.IM.UserSigTTL > 0 && c.IM.UserSigTTL.D() < 10*time.Minute {
		bad("im.usersig_ttl", "must be at least 10m so a sig can be renewed before it expires (got %s)", c.IM.UserSigTTL)
	}
	positive("im.max_calls_per_second", c.IM.MaxCallsPerSecond)
	positive("im.max_messages_per_group_per_second", c.IM.MaxMessagesPerGroupPerSecond)
	positive("im.max_message_bytes", c.IM.MaxMessageBytes)
	if c.IM.FastPathDelay < 0 || c.IM.FastPathDelay.D() > 10*time.Minute {
		bad("im.fast_path_delay", "must be between 0 (claim at once) and 10m (got %s)", c.IM.FastPathDelay)
	}
	return errors.Join(errs...)
}

// ValidateIM is the extra check of commands that call Tencent IM: the
// credentials must be present. Other commands run without them.
func (c *Config) ValidateIM() error {
	var errs []error
	if c.IM.SDKAppID == 0 {
		errs = append(errs, &FieldError{Key: "im.sdk_app_id", Msg: "must be set to call Tencent IM"})
	}
	if c.IM.SecretKey == "" {
		errs = append(errs, &FieldError{Key: "im.secret_key", Msg: "must be set to call Tencent IM"})
	}
	return errors.Join(errs...)
}

func validTopicName(name string) error {
	if name == "" || len(name) > 249 || name == "." || name == ".." {
		return fmt.Errorf("invalid topic name %q", name)
	}
	for _, r := range name {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == '-') {
			return fmt.Errorf("invalid topic name %q: only [a-zA-Z0-9._-]", name)
		}
	}
	return nil
}
