package testenv

import (
	"context"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/testcontainers/testcontainers-go"
	"github.com/testcontainers/testcontainers-go/wait"

	tcmysql "github.com/testcontainers/testcontainers-go/modules/mysql"
)

// dockerAvailable reports whether a Docker engine answers.
func dockerAvailable() bool {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return exec.CommandContext(ctx, "docker", "info").Run() == nil
}

// startKafkaContainer runs a single-node KRaft Kafka (apache/kafka) and
// returns its bootstrap address. testcontainers' kafka module is not served
// at our testcontainers version, so the container is configured here: the
// EXTERNAL listener is advertised on the host port mapped to 9092.
func startKafkaContainer(t testing.TB) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	const hostPort = "19092"
	req := testcontainers.ContainerRequest{
		Image:        "apache/kafka:3.9.1",
		ExposedPorts: []string{hostPort + ":" + hostPort + "/tcp"},
		Env: map[string]string{
			"KAFKA_NODE_ID":                                  "1",
			"KAFKA_PROCESS_ROLES":                            "broker,controller",
			"KAFKA_LISTENERS":                                "EXTERNAL://:" + hostPort + ",CONTROLLER://:9093",
			"KAFKA_ADVERTISED_LISTENERS":                     "EXTERNAL://127.0.0.1:" + hostPort,
			"KAFKA_LISTENER_SECURITY_PROTOCOL_MAP":           "EXTERNAL:PLAINTEXT,CONTROLLER:PLAINTEXT",
			"KAFKA_CONTROLLER_LISTENER_NAMES":                "CONTROLLER",
			"KAFKA_INTER_BROKER_LISTENER_NAME":               "EXTERNAL",
			"KAFKA_CONTROLLER_QUORUM_VOTERS":                 "1@localhost:9093",
			"KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR":         "1",
			"KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR": "1",
			"KAFKA_TRANSACTION_STATE_LOG_MIN_ISR":            "1",
			"KAFKA_GROUP_INITIAL_REBALANCE_DELAY_MS":         "0",
		},
		WaitingFor: wait.ForLog("Kafka Server started").WithStartupTimeout(2 * time.Minute),
	}
	c, err := testcontainers.GenericContainer(ctx, testcontainers.GenericContainerRequest{ContainerRequest: req, Started: true})
	if err != nil {
		t.Fatalf("testenv: kafka container: %v", err)
	}
	t.Cleanup(func() { _ = c.Terminate(context.Background()) })
	return []string{"127.0.0.1:" + hostPort}
}

// MySQL80DSN starts MySQL 8.0 in a container and returns a DSN of an empty
// database on it, for the portability tests of the SQL roomflow runs. It
// needs ROOMFLOW_TESTCONTAINERS=1 and a Docker engine; without them the test
// is skipped with that reason (MariaDB, which always runs here, covers the
// same tests). args are further mysqld options (the relay's binlog mode:
// "--gtid-mode=ON", "--enforce-gtid-consistency=ON").
func MySQL80DSN(t testing.TB, args ...string) string {
	t.Helper()
	if os.Getenv("ROOMFLOW_TESTCONTAINERS") != "1" || !dockerAvailable() {
		t.Skip("MySQL 8.0 runs in a container: needs ROOMFLOW_TESTCONTAINERS=1 and a Docker engine")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c, err := tcmysql.Run(ctx, "mysql:8.0", tcmysql.WithDatabase("roomflow"), tcmysql.WithUsername("root"), tcmysql.WithPassword("roomflow"),
		testcontainers.WithCmdArgs(args...))
	if err != nil {
		t.Fatalf("testenv: mysql 8.0 container: %v", err)
	}
	t.Cleanup(func() { _ = c.Terminate(context.Background()) })
	dsn, err := c.ConnectionString(ctx)
	if err != nil {
		t.Fatalf("testenv: mysql 8.0 dsn: %v", err)
	}
	return dsn
}
