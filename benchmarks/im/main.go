// Command im benchmarks `roomflow publish-im` against the fake Tencent IM
// server: room_outbox rows and their Kafka records are generated at a fixed
// offered rate over many rooms (as room-service + the relay would), the
// publisher delivers them, and the fake server's records are the
// measurement: accepted calls per second against the 200 calls/s app limit,
// the busiest group's messages per second against the 40/s group limit,
// and publish-to-delivered latency (event occurred_at -> accepted by IM).
//
//	go run ./benchmarks/im -rate 150 -duration 20s          # below the limit: latency
//	go run ./benchmarks/im -rate 400 -duration 20s -hot 5   # saturation + hot rooms
//
// No room-service publishes by itself here, so the fast path claims at once
// (im.fast_path_delay 0); -fast-path-delay 3s measures the default hold.
//
// Needs MariaDB (ROOMFLOW_TEST_MYSQL_DSN, default root@tcp(127.0.0.1:3306)/);
// Kafka is an in-process kfake cluster.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"os"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/protobuf/proto"

	"github.com/hyapp/roomflow/benchmarks/internal/benchkafka"
	"github.com/hyapp/roomflow/internal/config"
	"github.com/hyapp/roomflow/internal/kafkax"
	"github.com/hyapp/roomflow/internal/mysqlx"
	"github.com/hyapp/roomflow/schemas/envelope"
	"github.com/hyapp/roomflow/schemas/roomv1"
	"github.com/hyapp/roomflow/sinks/imoutbox"
	"github.com/hyapp/roomflow/sinks/tencentim"
	"github.com/hyapp/roomflow/sinks/tencentim/imfake"
)

const (
	appID  = 1400000000
	key    = "bench-secret-key"
	admin  = "administrator"
	prefix = "room-"
)

func main() {
	rate := flag.Int("rate", 150, "offered events per second over all rooms")
	hotRate := flag.Int("hot-rate", 80, "extra events per second offered to each hot room")
	hot := flag.Int("hot", 0, "hot rooms (each gets -hot-rate events/s on top)")
	rooms := flag.Int("rooms", 2000, "rooms")
	dur := flag.Duration("duration", 20*time.Second, "load duration")
	partitions := flag.Int("partitions", 12, "partitions of the room events topic")
	delay := flag.Duration("fast-path-delay", 0, "im.fast_path_delay")
	flag.Parse()
	if err := run(*rate, *hot, *hotRate, *rooms, *partitions, *dur, *delay); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

func run(rate, hot, hotRate, rooms, partitions int, dur, delay time.Duration) error {
	ctx := context.Background()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))

	fake := imfake.New(imfake.Config{SDKAppID: appID, AdminIdentifier: admin, SecretKey: key})
	url, stopFake, err := fake.Listen("127.0.0.1:0")
	if err != nil {
		return err
	}
	defer stopFake()

	brokers, stopKafka, err := benchkafka.Start("", benchkafka.Options{Brokers: 1})
	if err != nil {
		return err
	}
	defer stopKafka()

	dsn := os.Getenv("ROOMFLOW_TEST_MYSQL_DSN")
	if dsn == "" {
		dsn = "root@tcp(127.0.0.1:3306)/"
	}
	scratch, err := mysqlx.NewScratch(ctx, dsn, fmt.Sprintf("bench_im_%d", time.Now().UnixNano()), true)
	if err != nil {
		return err
	}
	defer scratch.Drop(context.Background()) //nolint:errcheck // benchmark teardown

	cfg := config.Default()
	cfg.Metrics.Addr = ""
	cfg.MySQL.DSN = scratch.DSN
	cfg.Kafka.Brokers = brokers
	cfg.Kafka.Partitions = int32(partitions)
	cfg.IM.Endpoint, cfg.IM.SDKAppID, cfg.IM.SecretKey, cfg.IM.AdminIdentifier, cfg.IM.GroupIDPrefix = url, appID, key, admin, prefix
	cfg.IM.FastPathDelay = config.Duration(delay)
	if err := cfg.Validate(); err != nil {
		return err
	}
	db, err := mysqlx.Open(ctx, cfg.MySQL)
	if err != nil {
		return err
	}
	defer db.Close()
	kcl, err := kgo.NewClient(kgo.SeedBrokers(cfg.Kafka.Brokers...), kgo.ProducerLinger(2*time.Millisecond))
	if err != nil {
		return err
	}
	defer kcl.Close()
	if _, err := kafkax.EnsureTopics(ctx, kadm.NewClient(kcl), cfg.Kafka.Layout()); err != nil {
		return err
	}

	tr := &timingTransport{next: http.DefaultTransport.(*http.Transport).Clone()}
	tr.next.MaxIdleConnsPerHost = 128
	reg := prometheus.NewRegistry()
	// The publisher as `roomflow publish-im` wires it from cfg, on a
	// transport of the benchmark's own that times the calls.
	ow, im := cfg.OutboxWorker, cfg.IM
	pub, err := imoutbox.NewPublisher(imoutbox.Config{
		ServiceConfig: imoutbox.ServiceConfig{
			GroupIDPrefix: im.GroupIDPrefix, PollInterval: ow.PollInterval.D(), BatchSize: ow.BatchSize,
			PublishTimeout: ow.PublishTimeout.D(), ClaimGrace: ow.ClaimGrace.D(), LockTTL: ow.LockTTL.D(),
			DrainTimeout: cfg.Shutdown.Timeout.D(), AppCode: cfg.AppCode, Registerer: reg, Logger: log,
		},
		IM: tencentim.Config{Endpoint: im.Endpoint, SDKAppID: im.SDKAppID, AdminIdentifier: im.AdminIdentifier, SecretKey: im.SecretKey,
			UserSigTTL: im.UserSigTTL.D(), MaxCallsPerSecond: im.MaxCallsPerSecond, MaxMessagesPerGroupPerSecond: im.MaxMessagesPerGroupPerSecond,
			MaxMessageBytes: im.MaxMessageBytes, HTTPClient: &http.Client{Transport: tr}},
		FastPathDelay: im.FastPathDelay.D(), Group: ow.Group, Topic: cfg.Kafka.Topics.RoomEvents,
		Kafka: cfg.Kafka.Cluster(reg, log),
	}, db)
	if err != nil {
		return err
	}
	pctx, stopPub := context.WithCancel(ctx)
	defer stopPub()
	pubDone := make(chan error, 1)
	go func() { pubDone <- pub.Run(pctx) }()
	time.Sleep(time.Second) // group join

	// Generate: every 10 ms, a batch of rows (one multi-row INSERT, as
	// room-service commits them) and the same bytes to Kafka (as the relay).
	total := rate + hot*hotRate
	fmt.Printf("offered %d events/s (%d over %d rooms + %d hot rooms x %d/s) for %s; limits: %d calls/s per app, %d msgs/s per group\n",
		total, rate, rooms, hot, hotRate, dur, cfg.IM.MaxCallsPerSecond, cfg.IM.MaxMessagesPerGroupPerSecond)
	const tick = 10 * time.Millisecond
	start := time.Now()
	var seq int64
	produced := map[string]time.Time{}
	roomVer := map[string]int64{}
	var genErr error
	for t := time.NewTicker(tick); time.Since(start) < dur; <-t.C {
		n := int(float64(total)*time.Since(start).Seconds()) - int(seq)
		if n <= 0 {
			continue
		}
		now := time.Now().UnixMilli()
		var sb strings.Builder
		args := make([]any, 0, n*8)
		recs := make([]*kgo.Record, 0, n)
		for i := 0; i < n; i++ {
			seq++
			var room string
			if hot > 0 && rand.IntN(total) < hot*hotRate {
				room = fmt.Sprintf("hot%d", rand.IntN(hot))
			} else {
				room = fmt.Sprintf("r%04d", rand.IntN(rooms))
			}
			roomVer[room]++
			id := fmt.Sprintf("bench-%d", seq)
			typ, payload := "RoomGiftSent", proto.Message(&roomv1.RoomGiftSent{SenderUserId: seq, TargetUserId: 9, GiftId: "rose", GiftCount: 1, CoinSpent: 10})
			if seq%3 == 0 {
				typ, payload = "RoomMicChanged", &roomv1.RoomMicChanged{UserId: seq, SeatNo: 1, Action: "up", MicSessionId: id}
			}
			p, _ := proto.Marshal(payload)
			raw, _ := proto.Marshal(&roomv1.EventEnvelope{EventId: id, EventType: typ, AppCode: "hyapp", RoomId: room, RoomVersion: roomVer[room], OccurredAtMs: now, Payload: p})
			if i > 0 {
				sb.WriteString(",")
			}
			sb.WriteString("('hyapp',?,?,?,?,?,?,?,?)")
			args = append(args, id, typ, room, roomVer[room], raw, now, now, now)
			recs = append(recs, &kgo.Record{Topic: cfg.Kafka.Topics.RoomEvents, Key: []byte(room), Value: raw})
		}
		if _, err := db.Exec(`INSERT INTO room_outbox (app_code, event_id, event_type, room_id, room_version, payload, occurred_at_ms, created_at_ms, updated_at_ms) VALUES `+sb.String(), args...); err != nil {
			genErr = err
			break
		}
		pt := time.Now()
		for _, r := range recs {
			produced[string(r.Value)] = pt
			kcl.Produce(ctx, r, func(_ *kgo.Record, err error) {
				if err != nil {
					fmt.Fprintln(os.Stderr, "produce:", err)
				}
			})
		}
	}
	genEnd := time.Now()
	if genErr != nil {
		return genErr
	}
	kcl.Flush(ctx)
	// Drain: wait until every row is delivered (or 5 minutes).
	for deadline := time.Now().Add(5 * time.Minute); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		var left int
		if err := db.QueryRow(`SELECT COUNT(*) FROM room_outbox WHERE status <> 'delivered'`).Scan(&left); err != nil {
			return err
		}
		if left == 0 {
			break
		}
	}
	drained := time.Now()
	stopPub()
	if err := <-pubDone; err != nil {
		return err
	}
	byID := map[string]time.Time{}
	for raw, t := range produced {
		var env envelope.View
		_ = env.Parse([]byte(raw))
		byID[string(env.EventID)] = t
	}
	if err := report(fake, seq, byID, start, genEnd, drained, cfg.IM.MaxCallsPerSecond, cfg.IM.MaxMessagesPerGroupPerSecond); err != nil {
		return err
	}
	if mfs, err := reg.Gather(); err == nil {
		for _, mf := range mfs {
			if !strings.HasPrefix(mf.GetName(), "roomflow_im_outbox_claims") && !strings.HasPrefix(mf.GetName(), "roomflow_im_outbox_events") {
				continue
			}
			for _, m := range mf.GetMetric() {
				var ls []string
				for _, lp := range m.GetLabel() {
					ls = append(ls, lp.GetName()+"="+lp.GetValue())
				}
				fmt.Printf("  %s{%s} %.0f\n", mf.GetName(), strings.Join(ls, ","), m.GetCounter().GetValue())
			}
		}
	}
	fmt.Printf("client side (request start times): max calls in any sliding 1s window %d  (limit %d: %.3f)\n",
		tr.maxWindow(), cfg.IM.MaxCallsPerSecond, float64(tr.maxWindow())/float64(cfg.IM.MaxCallsPerSecond))
	return nil
}

func report(fake *imfake.Server, generated int64, produced map[string]time.Time, start, genEnd, drained time.Time, appLimit, groupLimit int) error {
	acc := fake.Accepted()
	st := fake.Stats()
	perEvent := map[string]int{}
	var lat, plat []time.Duration
	perSec := map[int64]int{}
	for _, a := range acc {
		perEvent[a.EventID]++
		perSec[a.At.Unix()]++
		if t, ok := produced[a.EventID]; ok {
			plat = append(plat, a.At.Sub(t))
		}
	}
	// Latency needs occurred_at: it is inside Data.
	for _, a := range acc {
		i := strings.Index(a.Data, `"occurred_at_ms":`)
		if i < 0 {
			continue
		}
		var ms int64
		fmt.Sscan(a.Data[i+len(`"occurred_at_ms":`):], &ms)
		lat = append(lat, a.At.Sub(time.UnixMilli(ms)))
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	sort.Slice(plat, func(i, j int) bool { return plat[i] < plat[j] })
	pctOf := func(l []time.Duration, p float64) time.Duration {
		if len(l) == 0 {
			return 0
		}
		return l[min(len(l)-1, int(p*float64(len(l))))].Round(100 * time.Microsecond)
	}
	pct := func(p float64) time.Duration { return pctOf(lat, p) }
	// Steady-state throughput: full seconds strictly inside the load.
	var secs []int
	for s := start.Unix() + 2; s < genEnd.Unix()-1; s++ {
		secs = append(secs, perSec[s])
	}
	sort.Ints(secs)
	mean := 0.0
	for _, v := range secs {
		mean += float64(v)
	}
	if len(secs) > 0 {
		mean /= float64(len(secs))
	}
	dups := 0
	for _, n := range perEvent {
		if n > 1 {
			dups++
		}
	}
	fmt.Printf("generated %d events in %s; all delivered %s after load end\n", generated, genEnd.Sub(start).Round(time.Millisecond), drained.Sub(genEnd).Round(time.Millisecond))
	fmt.Printf("IM accepted %d distinct events (%d accepted twice), %d requests, %d duplicates absorbed, %d MsgFreqCtrl drops, %d rejected\n",
		len(perEvent), dups, st.Requests, st.Duplicates, st.Dropped, st.Rejected)
	if len(secs) > 0 {
		fmt.Printf("accepted calls/s during load: mean %.1f, min %d, max %d  (limit %d: mean/limit %.3f)\n", mean, secs[0], secs[len(secs)-1], appLimit, mean/float64(appLimit))
	}
	fmt.Printf("max calls in one second %d / in any sliding 1s window %d  (limit %d: %.3f)\n", st.MaxAppPerSecond, st.MaxAppWindow, appLimit, float64(st.MaxAppWindow)/float64(appLimit))
	fmt.Printf("max msgs to one group in one second %d / any sliding 1s window %d  (limit %d: %.3f)\n", st.MaxGroupPerSecond, st.MaxGroupWindow, groupLimit, float64(st.MaxGroupWindow)/float64(groupLimit))
	fmt.Printf("publish-to-delivered (occurred_at -> IM accepted): p50 %s p90 %s p99 %s max %s  (p99 / 100ms target: %.2f)\n",
		pct(.5), pct(.9), pct(.99), pct(1), float64(pct(.99))/float64(100*time.Millisecond))
	fmt.Printf("Kafka produce -> IM accepted: p50 %s p90 %s p99 %s max %s  (p99 / 100ms target: %.2f)\n",
		pctOf(plat, .5), pctOf(plat, .9), pctOf(plat, .99), pctOf(plat, 1), float64(pctOf(plat, .99))/float64(100*time.Millisecond))
	if int64(len(perEvent)) != generated {
		return fmt.Errorf("%d events generated, %d accepted", generated, len(perEvent))
	}
	return nil
}

// timingTransport records when each request starts, to show the client's
// own pacing separately from arrival jitter at the (in-process) server.
type timingTransport struct {
	next   *http.Transport
	mu     sync.Mutex
	starts []time.Time
}

func (t *timingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	t.mu.Lock()
	t.starts = append(t.starts, time.Now())
	t.mu.Unlock()
	return t.next.RoundTrip(r)
}

func (t *timingTransport) maxWindow() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	best, j := 0, 0
	for i := range t.starts {
		for t.starts[i].Sub(t.starts[j]) >= time.Second {
			j++
		}
		best = max(best, i-j+1)
	}
	return best
}
