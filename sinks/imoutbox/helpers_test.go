package imoutbox_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/protobuf/proto"

	"github.com/hyapp/roomflow/internal/kafkax"
	"github.com/hyapp/roomflow/internal/testenv"
	"github.com/hyapp/roomflow/schemas/roomv1"
	"github.com/hyapp/roomflow/sinks/imoutbox"
	"github.com/hyapp/roomflow/sinks/tencentim"
	"github.com/hyapp/roomflow/sinks/tencentim/imfake"
)

const (
	testApp   = 1400000000
	testKey   = "5bd2850fff3ecb11d7c805251c51ee463a25727bddc2385f3fa8bfee1bb93b5e"
	testAdmin = "administrator"
)

type env struct {
	t    *testing.T
	cfg  imoutbox.Config // tests change it before building services and publishers
	db   *sql.DB
	m    *testenv.MySQL
	k    *testenv.Kafka
	fake *imfake.Server
	url  string
	logs *testenv.SyncBuffer
}

// newEnv starts MariaDB (fresh database), kfake (unless noKafka) and the
// fake IM server, with a config whose timings suit tests.
func newEnv(t *testing.T, withKafka bool) *env {
	t.Helper()
	m := testenv.NewMySQL(t)
	var k *testenv.Kafka
	if withKafka {
		k = testenv.NewKafka(t, testenv.Partitions(4))
	}
	fake := imfake.New(imfake.Config{SDKAppID: testApp, AdminIdentifier: testAdmin, SecretKey: testKey})
	srv := httptest.NewServer(fake)
	t.Cleanup(srv.Close)
	cfg := testConfig(t, k, srv.URL)
	e := &env{t: t, cfg: cfg, db: m.DB, m: m, k: k, fake: fake, url: srv.URL, logs: &testenv.SyncBuffer{}}
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		rows, err := m.DB.Query("SELECT status, COUNT(*), MAX(retry_count) FROM room_outbox GROUP BY status")
		if err == nil {
			for rows.Next() {
				var st string
				var n, rc int
				_ = rows.Scan(&st, &n, &rc)
				t.Logf("room_outbox: %s=%d (max retry_count %d)", st, n, rc)
			}
			rows.Close()
		}
		t.Logf("fake IM: %+v", fake.Stats())
		l := e.logs.String()
		if len(l) > 8000 {
			l = l[len(l)-8000:]
		}
		t.Logf("logs:\n%s", l)
	})
	return e
}

// testConfig is a publisher's config on k (nil: an unreachable broker)
// and the fake IM server at imURL, with timings that suit tests; its other
// fields are left to the defaults.
func testConfig(t *testing.T, k *testenv.Kafka, imURL string) imoutbox.Config {
	cfg := imoutbox.Config{
		ServiceConfig: imoutbox.ServiceConfig{
			NodeID:        "test-node",
			GroupIDPrefix: "room-",
			PollInterval:  100 * time.Millisecond,
			// Generous enough that a loaded machine's slow answer is no
			// timeout (a timed-out send is retried, and may be a
			// duplicate); tests of timeouts and lock expiry set their own.
			PublishTimeout: 2 * time.Second,
			ClaimGrace:     300 * time.Millisecond,
			LockTTL:        3 * time.Second,
			DrainTimeout:   5 * time.Second,
			AppCode:        "hyapp",
		},
		IM: tencentim.Config{Endpoint: imURL, SDKAppID: testApp, SecretKey: testKey, AdminIdentifier: testAdmin},
		// No room-service publishes here, so the fast path claims at once;
		// the tests of the delay set it themselves.
		FastPathDelay: 0,
		Group:         testenv.UniqueName(t) + "-im",
		Topic:         "hyapp.room.events.v1",
		Kafka:         kafkax.Cluster{Brokers: []string{testenv.ClosedAddr(t)}},
	}
	if k != nil {
		cfg.Topic, cfg.Kafka = k.Config.Topics.RoomEvents, k.Cluster()
	}
	return cfg
}

func (e *env) logger() *slog.Logger {
	return slog.New(slog.NewJSONHandler(e.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// service is a compensation-side service on its own client.
func (e *env) service() *imoutbox.Service { return e.serviceOn(prometheus.NewRegistry()) }

func (e *env) serviceOn(reg *prometheus.Registry) *imoutbox.Service {
	e.t.Helper()
	c, err := tencentim.New(e.cfg.IM)
	if err != nil {
		e.t.Fatal(err)
	}
	cfg := e.cfg.ServiceConfig
	cfg.Registerer, cfg.Logger = reg, e.logger()
	s, err := imoutbox.NewService(cfg, imoutbox.NewRepo(e.db), c)
	if err != nil {
		e.t.Fatal(err)
	}
	return s
}

// pubMode is what a test publisher runs.
type pubMode int

const (
	fastAndScan pubMode = iota // publish-im as deployed
	fastOnly                   // the compensation scan switched off (imoutbox.FastPathOnly)
	disabled                   // DisableDelivery (outbox_worker.enabled=false)
)

// publisher starts a publish-im in mode and returns its registry and a
// stop function that cancels it and waits for Run.
func (e *env) publisher(mode pubMode) (*prometheus.Registry, func()) {
	e.t.Helper()
	p, reg := e.newPublisher(mode)
	return reg, e.run(p)
}

// publisherConfig is e.cfg in mode, its metrics (the Kafka client's too)
// on reg and its logs (the Kafka client's too) in e.logs.
func (e *env) publisherConfig(mode pubMode, reg prometheus.Registerer) imoutbox.Config {
	cfg := e.cfg
	cfg.DisableDelivery = mode == disabled
	cfg.Registerer, cfg.Logger = reg, e.logger()
	cfg.Kafka.Metrics, cfg.Kafka.Logger = reg, e.logger()
	return cfg
}

func (e *env) newPublisher(mode pubMode) (*imoutbox.Publisher, *prometheus.Registry) {
	e.t.Helper()
	reg := prometheus.NewRegistry()
	p, err := imoutbox.NewPublisher(e.publisherConfig(mode, reg), e.db)
	if err != nil {
		e.t.Fatal(err)
	}
	if mode == fastOnly {
		imoutbox.FastPathOnly(p)
	}
	return p, reg
}

// run runs p until the returned stop function cancels it and waits.
func (e *env) run(p *imoutbox.Publisher) func() {
	e.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					e.t.Errorf("publisher run: %v", err)
				}
			case <-time.After(15 * time.Second):
				e.t.Error("publisher did not stop")
			}
		})
	}
	e.t.Cleanup(stop)
	return stop
}

type event struct {
	ID, Type, Room string
	Version        int64
	Payload        proto.Message
	NoAppCode      bool // the envelope leaves app_code out (the configured one)
}

func (ev event) envelope() *roomv1.EventEnvelope {
	p, _ := proto.Marshal(ev.Payload)
	app := "hyapp"
	if ev.NoAppCode {
		app = ""
	}
	return &roomv1.EventEnvelope{EventId: ev.ID, EventType: ev.Type, AppCode: app, RoomId: ev.Room,
		RoomVersion: ev.Version, OccurredAtMs: time.Now().UnixMilli(), Payload: p}
}

func gift(id, room string, v int64) event {
	return event{ID: id, Type: "RoomGiftSent", Room: room, Version: v, Payload: &roomv1.RoomGiftSent{SenderUserId: 1, TargetUserId: 2, GiftId: "rose", GiftCount: 1}}
}

// insert writes rows as room-service does (status pending), created
// createdAgo in the past; it returns the stored envelope bytes by event id.
func (e *env) insert(createdAgo time.Duration, evs ...event) map[string][]byte {
	e.t.Helper()
	out := map[string][]byte{}
	now := time.Now().Add(-createdAgo).UnixMilli()
	for _, ev := range evs {
		raw, _ := proto.Marshal(ev.envelope())
		out[ev.ID] = raw
		if _, err := e.db.Exec(`INSERT INTO room_outbox (app_code, event_id, event_type, room_id, room_version, payload, occurred_at_ms, created_at_ms, updated_at_ms)
			VALUES ('hyapp', ?, ?, ?, ?, ?, ?, ?, ?)`, ev.ID, ev.Type, ev.Room, ev.Version, raw, now, now, now); err != nil {
			e.t.Fatal(err)
		}
	}
	return out
}

// produce writes the stored bytes to the room events topic as the relay does.
func (e *env) produce(raws map[string][]byte, order []event) {
	e.t.Helper()
	cl := e.k.Client(e.t)
	var recs []*kgo.Record
	for _, ev := range order {
		recs = append(recs, &kgo.Record{Topic: e.cfg.Topic, Key: []byte(ev.Room), Value: raws[ev.ID],
			Headers: []kgo.RecordHeader{{Key: "event_id", Value: []byte(ev.ID)}, {Key: "event_type", Value: []byte(ev.Type)}}})
	}
	if err := cl.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
		e.t.Fatal(err)
	}
}

type rowState struct {
	Status     string
	RetryCount int
	LastError  sql.NullString
	WorkerID   string
	LockUntil  int64
}

func (e *env) row(id string) rowState {
	e.t.Helper()
	var r rowState
	if err := e.db.QueryRow(`SELECT status, retry_count, last_error, worker_id, lock_until_ms FROM room_outbox WHERE event_id = ?`, id).
		Scan(&r.Status, &r.RetryCount, &r.LastError, &r.WorkerID, &r.LockUntil); err != nil {
		e.t.Fatalf("row %s: %v", id, err)
	}
	return r
}

func (e *env) countStatus(status string) int {
	var n int
	if err := e.db.QueryRow(`SELECT COUNT(*) FROM room_outbox WHERE status = ?`, status).Scan(&n); err != nil {
		e.t.Fatal(err)
	}
	return n
}

func ids(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s-%04d", prefix, i)
	}
	return out
}

// metric is testenv.Metric on reg with labels as a map; 0 if no series
// matches.
func metric(t *testing.T, reg *prometheus.Registry, name string, labels map[string]string) float64 {
	t.Helper()
	var pairs []string
	for k, v := range labels {
		pairs = append(pairs, k, v)
	}
	v, _ := testenv.Metric(reg, name, pairs...)
	return v
}

// checkRoomOrder fails the test unless the fake IM accepted each room's
// messages in increasing room_version.
func (e *env) checkRoomOrder() {
	e.t.Helper()
	last := map[string]int64{}
	for _, a := range e.fake.Accepted() {
		var d struct {
			RoomVersion int64 `json:"room_version"`
		}
		if err := json.Unmarshal([]byte(a.Data), &d); err != nil {
			e.t.Fatal(err)
		}
		if d.RoomVersion <= last[a.GroupID] {
			e.t.Fatalf("%s: version %d after %d", a.GroupID, d.RoomVersion, last[a.GroupID])
		}
		last[a.GroupID] = d.RoomVersion
	}
}
