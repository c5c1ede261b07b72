package config

import (
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/hyapp/roomflow/internal/cfgerr"
	"github.com/hyapp/roomflow/internal/kafkax"
)

// Validate checks the app-wide keys (app_code, log, metrics, kafka, mysql,
// shutdown, api listeners) and returns all problems joined; each is a
// *cfgerr.FieldError keyed by its dotted key (use errors.As). The keys of
// a component (relay.*, process.*, mic.*, sink.*, outbox_worker.*, im.*)
// are the component's to check: cmd/roomflow's wiring maps them onto its
// Config and validates it there. It never includes secret values.
//
// It also reads the kafka.tls files and the kafka.sasl password (see
// KafkaConfig.Cluster), so a file that is missing or wrong fails here,
// named by its key.
func (c *Config) Validate() error {
	var ch cfgerr.Checks
	bad := ch.Bad
	positive := ch.Positive
	positiveDur := func(key string, v Duration) { ch.PositiveDuration(key, v.D()) }
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
		if !brokerAddr(b) {
			bad("kafka.brokers", "%q is not host:port (a port of 1..65535)", b)
		}
	}
	if c.Kafka.ClientID == "" {
		bad("kafka.client_id", "must be set")
	} else if len(c.Kafka.ClientID) > kafkax.MaxClientIDPrefix {
		bad("kafka.client_id", "must be at most %d bytes: the Kafka client refuses ids over 256 bytes, and each client appends its component to it (got %d)",
			kafkax.MaxClientIDPrefix, len(c.Kafka.ClientID))
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
		if err := cfgerr.TopicName(t.Name); err != nil {
			bad(key, "%v", err)
			continue
		}
		if other, dup := seen[t.Name]; dup {
			bad(key, "topic %q is also used by kafka.topics.%s", t.Name, other)
		}
		seen[t.Name] = t.Key
	}

	c.Kafka.loadSecurity(&ch)
	c.Kafka.validateWireFormat(&ch)
	c.SchemaRegistry.validate(&ch)

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
	c.Shutdown.validateDrainDelay(&ch)

	addr("api.addr", c.API.Addr, false)
	addr("api.app_addr", c.API.AppAddr, false)
	addr("api.grpc_addr", c.API.GRPCAddr, false)
	c.checkClashes(&ch)
	// What needs no file: the serving commands read the files at start.
	ch.Add(cfgerr.Under("api.tls", nil, c.API.TLS.Server().Validate()))

	return ch.Err()
}

// brokerAddr reports whether b is host:port with a port of 1..65535: kgo
// fails its first client on a port it cannot parse, and dials port 0, one
// over 65535 or an empty host for ever.
func brokerAddr(b string) bool {
	host, port, err := net.SplitHostPort(b)
	n, perr := strconv.Atoi(port)
	return err == nil && host != "" && perr == nil && n >= 1 && n <= 65535
}

// checkClashes refuses two listeners of one process on one fixed port
// (port 0 picks a free port per listener, so only fixed ports can clash).
func (c *Config) checkClashes(ch *cfgerr.Checks) {
	sameAddr := func(a, b string) bool { return a != "" && a == b && !strings.HasSuffix(a, ":0") }
	if sameAddr(c.API.AppAddr, c.API.Addr) {
		ch.Bad("api.app_addr", "must differ from api.addr (%q): the app routes trust a gateway header the internal listener must not honour", c.API.Addr)
	}
	if sameAddr(c.API.GRPCAddr, c.API.Addr) || sameAddr(c.API.GRPCAddr, c.API.AppAddr) {
		ch.Bad("api.grpc_addr", "must differ from api.addr and api.app_addr (got %q)", c.API.GRPCAddr)
	}
	// Every serving process binds metrics.addr beside its own listeners:
	// a clash would surface only at the second bind, after MySQL and Kafka.
	for _, l := range []struct{ key, addr string }{{"api.addr", c.API.Addr}, {"api.app_addr", c.API.AppAddr},
		{"api.grpc_addr", c.API.GRPCAddr}, {"lucky.grpc_addr", c.Lucky.GRPCAddr}} {
		if sameAddr(l.addr, c.Metrics.Addr) {
			ch.Bad(l.key, "must differ from metrics.addr (got %q)", l.addr)
		}
	}
}

// StuckMargin is how long after shutdown.timeout (and the drain delay) the
// frame waits for a component before it exits naming it: a pod's
// terminationGracePeriodSeconds must cover shutdown.drain_delay +
// shutdown.timeout + StuckMargin (deploy's TestDeployManifests checks the
// shipped manifests; the budget is not refused here, since a platform may
// give its pods a longer grace).
const StuckMargin = 5 * time.Second

// validateDrainDelay refuses a negative shutdown.drain_delay.
func (s ShutdownConfig) validateDrainDelay(ch *cfgerr.Checks) {
	if d := s.DrainDelay.D(); d < 0 {
		ch.Bad("shutdown.drain_delay", "must be >= 0 (got %s; 0 disables the delay)", d)
	}
}
