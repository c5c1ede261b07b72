// Command totals measures `roomflow totals bootstrap` (tools/totals) on a
// database with history: -users users, each with a user_mic_lifetime_stats
// row and two user_mic_daily_stats rows (today, bootstrapped, and ten days
// ago, out of mic.day_totals_retention), onto kfake (3 brokers in a child
// process, so this process holds only the bootstrap) or -brokers.
//
//	go run ./benchmarks/totals -users 1000000
//
// Reported: the bootstrap's wall and CPU time, the peak Go heap above the
// heap before it (sampled every 10 ms), and what it wrote.
package main

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"runtime"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/hyapp/roomflow/benchmarks/internal/benchkafka"
	"github.com/hyapp/roomflow/internal/config"
	"github.com/hyapp/roomflow/internal/kafkax"
	"github.com/hyapp/roomflow/internal/mysqlx"
	"github.com/hyapp/roomflow/tools/totals"
)

func main() {
	benchkafka.RunChild()
	users := flag.Int("users", 1_000_000, "users with history")
	partitions := flag.Int("partitions", 6, "partitions per topic")
	serverDSN := flag.String("mysql", "root@tcp(127.0.0.1:3306)/", "MySQL server DSN (a scratch database is created and dropped)")
	kafkaFlags := benchkafka.RegisterFlags(nil, "kfake with 3 brokers in a child process")
	flag.Parse()
	if err := run(*users, int32(*partitions), *serverDSN, kafkaFlags); err != nil {
		fmt.Fprintln(os.Stderr, "benchmark:", err)
		os.Exit(1)
	}
}

func run(users int, partitions int32, serverDSN string, kafkaFlags *benchkafka.Flags) error {
	ctx := context.Background()
	kconn, stop, err := kafkaFlags.Connect(config.Default().Kafka, benchkafka.Options{Child: true})
	if err != nil {
		return err
	}
	defer stop()
	var b [3]byte
	_, _ = rand.Read(b[:])
	scratch, err := mysqlx.NewScratch(ctx, serverDSN, "totalsbench_"+hex.EncodeToString(b[:]), true)
	if err != nil {
		return err
	}
	defer scratch.Drop(context.Background()) //nolint:errcheck // best effort
	cfg := config.Default()
	cfg.Kafka = kconn
	cfg.Kafka.Partitions, cfg.Kafka.ReplicationFactor = partitions, -1
	cfg.MySQL.DSN = scratch.DSN
	db, err := mysqlx.Open(ctx, cfg.MySQL)
	if err != nil {
		return err
	}
	defer db.Close()
	cl, err := cfg.Kafka.Cluster(nil, nil).NewClient("bench-admin")
	if err != nil {
		return err
	}
	_, err = kafkax.EnsureTopics(ctx, kadm.NewClient(cl), cfg.TopicLayout())
	cl.Close()
	if err != nil {
		return err
	}
	t0 := time.Now()
	if err := fill(ctx, db, users); err != nil {
		return err
	}
	fmt.Printf("totals bootstrap benchmark: %d users (%d lifetime + %d daily rows written in %.1f s), %d partitions, brokers %s\n",
		users, users, 2*users, time.Since(t0).Seconds(), partitions, benchkafka.Describe(kconn))

	var ms runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&ms)
	heap0 := ms.HeapAlloc
	var peak atomic.Uint64
	done := make(chan struct{})
	go func() {
		var m runtime.MemStats
		for {
			runtime.ReadMemStats(&m)
			if m.HeapAlloc > peak.Load() {
				peak.Store(m.HeapAlloc)
			}
			select {
			case <-done:
				return
			case <-time.After(10 * time.Millisecond):
			}
		}
	}()
	c0, w0 := cpuTime(), time.Now()
	res, err := totals.Bootstrap(ctx, totals.ConfigFrom(&cfg, slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))), db)
	wall, cpu := time.Since(w0), cpuTime()-c0
	close(done)
	if err != nil {
		return err
	}
	fmt.Printf("  bootstrap: %d users, %d daily totals, %d transactions in %.2f s wall, %.2f CPU-s; peak heap %.0f MB above the %.0f MB before\n",
		res.Users, res.Days, res.Transactions, wall.Seconds(), cpu.Seconds(), float64(peak.Load()-heap0)/1e6, float64(heap0)/1e6)
	return nil
}

// fill writes the users' rows in multi-row INSERTs of 2,000 users.
func fill(ctx context.Context, db *sql.DB, users int) error {
	now := time.Now()
	today, old := now.Format(time.DateOnly), now.AddDate(0, 0, -10).Format(time.DateOnly)
	dayStart := now.Truncate(24 * time.Hour).UnixMilli()
	for lo := 0; lo < users; lo += 2000 {
		var life, daily strings.Builder
		life.WriteString("INSERT INTO user_mic_lifetime_stats (app_code, user_id, seat_occupied_ms, mic_online_ms, session_count, first_mic_at_ms, last_mic_at_ms, updated_at_ms) VALUES ")
		daily.WriteString("INSERT INTO user_mic_daily_stats (app_code, user_id, stat_date, seat_occupied_ms, mic_online_ms, session_count, room_count, first_mic_at_ms, last_mic_at_ms, updated_at_ms) VALUES ")
		for u := lo; u < min(lo+2000, users); u++ {
			if u > lo {
				life.WriteByte(',')
				daily.WriteByte(',')
			}
			id := 10_000_000 + u
			fmt.Fprintf(&life, "('hyapp',%d,%d,%d,%d,%d,%d,%d)", id, 3_600_000+u*37, 3_000_000+u*31, 1+u%900,
				now.AddDate(-1, 0, 0).UnixMilli()+int64(u), now.UnixMilli()-int64(u), now.UnixMilli())
			fmt.Fprintf(&daily, "('hyapp',%d,'%s',%d,%d,2,1,%d,%d,%d),('hyapp',%d,'%s',%d,%d,1,1,%d,%d,%d)",
				id, today, 1_800_000+u%1000, 1_700_000+u%1000, dayStart+int64(u%3_600_000), dayStart+7_200_000, now.UnixMilli(),
				id, old, 900_000, 800_000, dayStart-10*86_400_000, dayStart-10*86_400_000+900_000, now.UnixMilli())
		}
		for _, q := range []string{life.String(), daily.String()} {
			if _, err := db.ExecContext(ctx, q); err != nil {
				return err
			}
		}
	}
	return nil
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
