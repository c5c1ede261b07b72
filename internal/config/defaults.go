package config

import "time"

// Default returns the configuration every key falls back to.
func Default() Config {
	return Config{
		AppCode:      "hyapp",
		Log:          LogConfig{Level: "info", Format: "json"},
		Metrics:      MetricsConfig{Addr: ":9090"},
		Kafka:        defaultKafka(),
		MySQL:        defaultMySQL(),
		Shutdown:     ShutdownConfig{Timeout: Duration(10 * time.Second), DrainDelay: Duration(5 * time.Second)},
		Relay:        defaultRelay(),
		Process:      defaultProcess(),
		Mic:          defaultMic(),
		Sink:         defaultSink(),
		API:          defaultAPI(),
		OutboxWorker: defaultOutboxWorker(),
		IM:           defaultIM(),
		Lucky:        defaultLucky(),
		Purge:        defaultPurge(),
	}
}

// defaultKafka is the default of the Kafka cluster, its topics and their creation.
func defaultKafka() KafkaConfig {
	return KafkaConfig{
		Brokers:           []string{"127.0.0.1:9092"},
		ClientID:          "roomflow",
		Partitions:        12,
		ReplicationFactor: -1,
		SessionTimeout:    Duration(15 * time.Second),
		TopicRetention:    Duration(168 * time.Hour),
		PublicWireFormat:  WirePlain,
		Topics: Topics{
			RoomEvents:        "hyapp.room.events.v1",
			UserMicEvents:     "hyapp.user.mic-events.v1",
			MicLedger:         "hyapp.user.mic-ledger.v1",
			MicSessionClosed:  "hyapp.user.mic-session-closed.v1",
			MicDailyStats:     "hyapp.user.mic-daily-stats.v1",
			MicLifetimeStats:  "hyapp.user.mic-lifetime-stats.v1",
			MicDailyTotals:    "hyapp.user.mic-daily-totals.v1",
			MicLifetimeTotals: "hyapp.user.mic-lifetime-totals.v1",
			LuckyPoolInflow:   "hyapp.activity.lucky-pool-inflow.v1",
			LuckyEvents:       "hyapp.activity.lucky-events.v1",
			DLQ:               "hyapp.room.events.dlq.v1",
			RelayOffsets:      "roomflow.relay.offsets.v1",
			MicStateChangelog: "roomflow.mic.state-changelog.v1",
		},
	}
}

// defaultMySQL is the default of the MySQL pool.
func defaultMySQL() MySQLConfig {
	return MySQLConfig{
		DSN:          "root@tcp(127.0.0.1:3306)/roomflow",
		MaxOpenConns: 16,
		MaxIdleConns: 16,
		ConnMaxLife:  Duration(30 * time.Minute),
	}
}

// defaultRelay is the default of the outbox relay.
func defaultRelay() RelayConfig {
	return RelayConfig{
		BatchSize:       1000,
		PollInterval:    Duration(100 * time.Millisecond),
		GapMaxAge:       Duration(time.Hour),
		MaxOpenGaps:     100000,
		FailoverTimeout: Duration(15 * time.Second),
		TransactionalID: "roomflow-relay",
		MaxRecordBytes:  1 << 20,
		MaxBatchBytes:   16 << 20,
		Mode:            "poll",
		Binlog:          RelayBinlogConfig{HeartbeatPeriod: Duration(time.Second)},
	}
}

// defaultProcess is the default of the stream processors.
func defaultProcess() ProcessConfig {
	return ProcessConfig{
		CommitInterval: Duration(100 * time.Millisecond),
		CommitRecords:  5000,
		RoomGroup:      "roomflow-room-processor",
		MicGroup:       "roomflow-mic-processor",
		RuleCacheSize:  10000,
	}
}

// defaultMic is the default of the mic processor's timers, compensation and retention.
func defaultMic() MicConfig {
	return MicConfig{
		PendingPublishMaxAge:    Duration(2 * time.Minute),
		PublishingSessionMaxAge: Duration(12 * time.Hour),
		CompensationEnabled:     true,
		CompensationInterval:    Duration(60 * time.Second),
		CompensationBatchSize:   100,
		ClosedSessionRetention:  Duration(7 * 24 * time.Hour),
		DayRoomRetention:        Duration(48 * time.Hour),
		TotalsEnabled:           true,
		DayTotalsRetention:      Duration(72 * time.Hour),
	}
}

// defaultSink is the default of the MySQL sink.
func defaultSink() SinkConfig {
	return SinkConfig{
		BatchSize:     2000,
		FlushInterval: Duration(50 * time.Millisecond),
		Group:         "roomflow-mysql-sink",
		MaxRetries:    10,
	}
}

// defaultAPI is the default of the query API.
func defaultAPI() APIConfig {
	return APIConfig{
		Addr:          ":8080",
		AppAddr:       ":8081",
		GRPCAddr:      ":13005",
		UserHeader:    "X-User-Id",
		AppCodeHeader: "X-App-Code",
	}
}

// defaultOutboxWorker is the default of the IM outbox worker.
func defaultOutboxWorker() OutboxWorkerConfig {
	return OutboxWorkerConfig{
		Enabled:        true,
		PollInterval:   Duration(time.Second),
		BatchSize:      100,
		PublishTimeout: Duration(3 * time.Second),
		RetryStrategy:  "fixed_interval",
		ClaimGrace:     Duration(5 * time.Second),
		LockTTL:        Duration(30 * time.Second),
		Group:          "roomflow-im-publisher",
	}
}

// defaultIM is the default of the Tencent IM client and the fast path.
func defaultIM() IMConfig {
	return IMConfig{
		Endpoint:                     "https://adminapisgp.im.qcloud.com",
		AdminIdentifier:              "administrator",
		GroupIDPrefix:                "",
		UserSigTTL:                   Duration(24 * time.Hour),
		MaxCallsPerSecond:            200,
		MaxMessagesPerGroupPerSecond: 40,
		MaxMessageBytes:              12 * 1024,
		FastPathDelay:                Duration(3 * time.Second),
		ScanFallbackAfter:            Duration(time.Minute),
	}
}

// defaultLucky is the default of the lucky draw service.
func defaultLucky() LuckyConfig {
	return LuckyConfig{
		GRPCAddr:             ":13006",
		WalletGRPCAddr:       "wallet-service:13004",
		DrawTimeout:          Duration(300 * time.Millisecond),
		WalletCreditTimeout:  Duration(500 * time.Millisecond),
		OutboxBatchSize:      100,
		OutboxPollInterval:   Duration(500 * time.Millisecond),
		OutboxMaxRetries:     20,
		OutboxLockTTL:        Duration(30 * time.Second),
		OutboxFormat:         "rows",
		ReplacedVersionGrace: Duration(10 * time.Second),
		PublishPayoutBandPPM: 100_000,
		Switches:             LuckySwitches{GlobalLuckyGiftEnabled: true, LargeTierEnabled: true, WalletCreditDispatch: true},
		Randomness:           "crypto",
		Fairness:             LuckyFairnessConfig{RevealGrace: Duration(time.Hour), DayLength: Duration(24 * time.Hour)},
	}
}

// defaultPurge is the default of the purge of old consumption and stats rows.
func defaultPurge() PurgeConfig {
	return PurgeConfig{
		BatchSize:                  1000,
		BatchPause:                 Duration(10 * time.Millisecond),
		UserMicEventConsumption:    Duration(30 * 24 * time.Hour),
		LuckyPoolInflowConsumption: Duration(30 * 24 * time.Hour),
		LuckyEventConsumption:      Duration(30 * 24 * time.Hour),
		LuckyRoomStatsHourly:       Duration(90 * 24 * time.Hour),
		RoomOutbox:                 PurgeRoomOutboxConfig{Age: Duration(7 * 24 * time.Hour)},
	}
}
