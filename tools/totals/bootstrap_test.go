package totals

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/protobuf/proto"

	"github.com/hyapp/roomflow/internal/config"
	"github.com/hyapp/roomflow/internal/schemareg"
	"github.com/hyapp/roomflow/internal/testenv"
	"github.com/hyapp/roomflow/processors/mic"
	"github.com/hyapp/roomflow/processors/mic/micproc"
	"github.com/hyapp/roomflow/processors/streams"
	"github.com/hyapp/roomflow/processors/streams/rttest"
	"github.com/hyapp/roomflow/schemas/envelope"
	"github.com/hyapp/roomflow/schemas/userv1"
)

var now = time.Date(2026, 12, 7, 3, 0, 0, 0, time.UTC)

const users = 60

type fixture struct {
	k   *testenv.Kafka
	m   *testenv.MySQL
	cfg *config.Config
}

// newFixture is a cluster with the topics and a database whose facts hold
// users 1..users: a lifetime row each, a daily row today and one 10 days
// ago (out of mic.day_totals_retention: not bootstrapped).
func newFixture(t *testing.T) *fixture {
	k := testenv.NewKafka(t, testenv.Partitions(3))
	m := testenv.NewMySQL(t)
	cfg := testenv.Config(t, k, m)
	today, old := now.Format(time.DateOnly), now.AddDate(0, 0, -10).Format(time.DateOnly)
	for u := int64(1); u <= users; u++ {
		if _, err := m.DB.Exec("INSERT INTO user_mic_lifetime_stats (app_code, user_id, seat_occupied_ms, mic_online_ms, session_count, first_mic_at_ms, last_mic_at_ms, updated_at_ms) VALUES (?, ?, ?, ?, 2, ?, ?, 7)",
			cfg.AppCode, u, 1000*u, 900*u, now.AddDate(0, 0, -10).UnixMilli(), now.UnixMilli()-u); err != nil {
			t.Fatal(err)
		}
		for _, d := range []string{old, today} {
			if _, err := m.DB.Exec("INSERT INTO user_mic_daily_stats (app_code, user_id, stat_date, seat_occupied_ms, mic_online_ms, session_count, room_count, first_mic_at_ms, last_mic_at_ms, updated_at_ms) VALUES (?, ?, ?, ?, ?, 1, 1, ?, ?, 7)",
				cfg.AppCode, u, d, 500*u, 450*u, now.Truncate(24*time.Hour).UnixMilli()+u, now.UnixMilli()-u); err != nil {
				t.Fatal(err)
			}
		}
	}
	return &fixture{k: k, m: m, cfg: cfg}
}

func (f *fixture) config(t *testing.T) Config {
	c := ConfigFrom(f.cfg, nil)
	c.Now = func() time.Time { return now }
	c.Idle = 2 * time.Second
	c.BatchSize = 7
	return c
}

func (f *fixture) run(t *testing.T, c Config) (Result, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	return Bootstrap(ctx, c, f.m.DB)
}

// check reads the changelog and the totals topics: each user's totals in
// the changelog partition of its input partition, decoding to its rows
// (today only among the days), the markers of every partition, and the
// totals topics' last values equal to the rows.
func (f *fixture) check(t *testing.T, firstDay int64) {
	t.Helper()
	tp := f.cfg.Kafka.Topics
	hash := kgo.StickyKeyPartitioner(nil).ForTopic("")
	state := map[string]*kgo.Record{}
	markers := map[int32]int64{}
	for _, r := range rttest.ReadCommitted(t, f.k.Brokers, tp.MicStateChangelog, users+3, 300*time.Millisecond, 20*time.Second) {
		if string(r.Key) == mic.KeyTotalsBootstrap {
			d, err := mic.DecodeBootstrapMarker(r.Value[9:])
			if err != nil {
				t.Fatal(err)
			}
			markers[r.Partition] = d
			continue
		}
		state[string(r.Key)] = r
	}
	if len(markers) != 3 || markers[0] != firstDay || markers[2] != firstDay {
		t.Fatalf("markers %v, want 3 with first day %d", markers, firstDay)
	}
	for u := int64(1); u <= users; u++ {
		r := state[mic.TotalsKey(f.cfg.AppCode, u)]
		if r == nil {
			t.Fatalf("user %d: no totals in the changelog", u)
		}
		if want := int32(hash.Partition(&kgo.Record{Key: []byte(strconv.FormatInt(u, 10))}, 3)); r.Partition != want {
			t.Fatalf("user %d: changelog partition %d, its input partition is %d", u, r.Partition, want)
		}
		var tot mic.Totals
		if err := mic.UnmarshalTotals(r.Value[9:], &tot); err != nil {
			t.Fatal(err)
		}
		if tot.SeatOccupiedMs != 1000*u || tot.SessionCount != 2 || len(tot.Days) != 1 || tot.Days[0].Day != mic.DayOf(now.UnixMilli()) ||
			tot.Days[0].SeatOccupiedMs != 500*u || tot.Days[0].LastMicAtMs != now.UnixMilli()-u {
			t.Fatalf("user %d: state totals %+v", u, tot)
		}
	}
	life := map[string]*userv1.UserMicLifetimeTotals{}
	for _, r := range rttest.ReadCommitted(t, f.k.Brokers, tp.MicLifetimeTotals, users, 300*time.Millisecond, 20*time.Second) {
		m := &userv1.UserMicLifetimeTotals{}
		if err := proto.Unmarshal(r.Value, m); err != nil || string(envelope.Header(r, envelope.HeaderEventType)) != mic.EventTypeLifetimeTotals {
			t.Fatalf("lifetime totals record %v: %v", r, err)
		}
		life[string(r.Key)] = m
	}
	days := rttest.ReadCommitted(t, f.k.Brokers, tp.MicDailyTotals, users, 300*time.Millisecond, 20*time.Second)
	if len(life) != users || len(days) < users {
		t.Fatalf("%d lifetime keys, %d daily records; want %d each", len(life), len(days), users)
	}
	if l := life[f.cfg.AppCode+":7"]; l.SeatOccupiedMs != 7000 || l.MicOnlineMs != 6300 || l.UpdatedAtMs != 7 {
		t.Fatalf("user 7's lifetime total %v", l)
	}
}

// TestBootstrapWithHistory: a database with history is bootstrapped into
// the changelog and the topics; the mic processor then restores it and a
// close adds to the bootstrapped totals; a rerun finds every partition
// marked and writes nothing.
func TestBootstrapWithHistory(t *testing.T) {
	f := newFixture(t)
	res, err := f.run(t, f.config(t))
	if err != nil {
		t.Fatal(err)
	}
	firstDay := mic.DayOf(now.Add(-72*time.Hour).UnixMilli()) - 1
	if res.Users != users || res.Days != users || res.FirstDay != firstDay || res.Transactions != users/7+1 {
		t.Fatalf("result %+v", res)
	}
	f.check(t, firstDay)
	again, err := f.run(t, f.config(t))
	if err != nil || again.AlreadyMarked != 3 || again.Users != 0 || again.Transactions != 0 {
		t.Fatalf("rerun: %+v, %v", again, err)
	}

	// The processor restores the bootstrapped totals and adds a close.
	c, err := micproc.ConfigFrom(f.cfg, streams.Config{}, "")
	if err != nil {
		t.Fatal(err)
	}
	rt, _, err := micproc.NewRuntime(c)
	if err != nil {
		t.Fatal(err)
	}
	run := rttest.Start(rt)
	at := now.UnixMilli() - 10*60_000
	var recs []*kgo.Record
	for i, a := range []string{"up", "down"} {
		ev := mic.Event{EventID: fmt.Sprintf("e-%d", i), EventType: mic.EventTypeRoomMicChanged, AppCode: f.cfg.AppCode,
			RoomID: "r", RoomVersion: int64(i + 1), OccurredAtMs: at + int64(i)*60_000, UserID: 7, Action: a, MicSessionID: "ms-7", Reason: "leave"}
		recs = append(recs, &kgo.Record{Topic: c.Runtime.Input, Key: []byte("7"), Value: ev.Encode()})
	}
	rttest.Produce(t, f.k.Client(t), recs)
	var last *userv1.UserMicLifetimeTotals
	testenv.Eventually(t, 30*time.Second, "the processor's lifetime total of user 7", func() bool {
		for _, r := range rttest.ReadCommitted(t, f.k.Brokers, c.Topics.LifetimeTotals, users+1, 200*time.Millisecond, 2*time.Second) {
			m := &userv1.UserMicLifetimeTotals{}
			if proto.Unmarshal(r.Value, m) == nil && m.MicSessionId == "ms-7" {
				last = m
			}
		}
		return last != nil
	})
	run.Stop(t)
	if last.SeatOccupiedMs != 7000+60_000 || last.SessionCount != 3 {
		t.Fatalf("lifetime total after the close %v, want the bootstrapped 7000 ms and 2 sessions plus the close", last)
	}
}

// TestBootstrapRefusals: beside a member of the mic group, and while the
// sink has not applied the whole ledger, the bootstrap refuses naming
// what is wrong and writes nothing.
func TestBootstrapRefusals(t *testing.T) {
	f := newFixture(t)
	member := f.k.Client(t, kgo.ConsumerGroup(f.cfg.Process.MicGroup), kgo.ConsumeTopics(f.cfg.Kafka.Topics.UserMicEvents))
	testenv.Eventually(t, 20*time.Second, "a member in the mic group", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer cancel()
		member.PollFetches(ctx)
		_, err := f.run(t, f.config(t))
		return err != nil && strings.Contains(err.Error(), "process.mic_group")
	})
	member.Close()

	rttest.Produce(t, f.k.Client(t), []*kgo.Record{{Topic: f.cfg.Kafka.Topics.MicLedger, Key: []byte("1"), Value: []byte{0x0a, 0}}})
	var refused *RefusedError
	if _, err := f.run(t, f.config(t)); !errors.As(err, &refused) || !strings.Contains(err.Error(), "sink.group") {
		t.Fatalf("with a ledger record the sink has not applied: %v", err)
	}
	recs := rttest.ReadCommitted(t, f.k.Brokers, f.cfg.Kafka.Topics.MicStateChangelog, 1, 200*time.Millisecond, 2*time.Second)
	if len(recs) != 0 {
		t.Fatalf("a refused bootstrap wrote %d changelog records", len(recs))
	}
}

// A processor that ran between two of the bootstrap's transactions (it
// joined, committed offsets and left, unseen by a membership check) made
// deltas the totals already written miss: the next transaction refuses,
// and no marker is written.
func TestBootstrapRefusesAGroupThatMoved(t *testing.T) {
	f := newFixture(t)
	c := f.config(t)
	adm := kadm.NewClient(f.k.Client(t))
	c.betweenCommits = func() {
		var o kadm.Offsets
		o.Add(kadm.Offset{Topic: f.cfg.Kafka.Topics.UserMicEvents, Partition: 0, At: 5})
		if _, err := adm.CommitOffsets(context.Background(), f.cfg.Process.MicGroup, o); err != nil {
			t.Errorf("commit the mic group's offsets: %v", err)
		}
	}
	var refused *RefusedError
	res, err := f.run(t, c)
	if !errors.As(err, &refused) || !strings.Contains(err.Error(), "committed offsets") || res.Transactions != 1 {
		t.Fatalf("bootstrap with the mic group moving after its first transaction: %+v, %v; want refused at the second", res, err)
	}
	for _, r := range rttest.ReadCommitted(t, f.k.Brokers, f.cfg.Kafka.Topics.MicStateChangelog, users, 200*time.Millisecond, 5*time.Second) {
		if string(r.Key) == mic.KeyTotalsBootstrap {
			t.Fatalf("a marker was written for partition %d", r.Partition)
		}
	}
}

// TestBootstrapRerunAfterCrash: a bootstrap that dies with a transaction
// open after two commits leaves no marker; the rerun writes everything and
// the markers, and the result is the same as an uninterrupted run.
func TestBootstrapRerunAfterCrash(t *testing.T) {
	f := newFixture(t)
	c := f.config(t)
	c.crashAfter = 2
	if _, err := f.run(t, c); !errors.Is(err, errCrashed) {
		t.Fatalf("crash run: %v", err)
	}
	c.crashAfter = 0
	res, err := f.run(t, c)
	if err != nil || res.AlreadyMarked != 0 || res.Users != users {
		t.Fatalf("rerun after the crash: %+v, %v", res, err)
	}
	f.check(t, res.FirstDay)
}

// TestBootstrapFreshInstall: an empty database gets the markers only,
// their first day the epoch (no day has history to miss).
func TestBootstrapFreshInstall(t *testing.T) {
	k := testenv.NewKafka(t, testenv.Partitions(3))
	m := testenv.NewMySQL(t)
	f := &fixture{k: k, m: m, cfg: testenv.Config(t, k, m)}
	res, err := f.run(t, f.config(t))
	if err != nil || res.Users != 0 || res.FirstDay != 0 || res.Transactions != 1 {
		t.Fatalf("fresh install: %+v, %v", res, err)
	}
	recs := rttest.ReadCommitted(t, k.Brokers, f.cfg.Kafka.Topics.MicStateChangelog, 3, 300*time.Millisecond, 10*time.Second)
	if len(recs) != 3 {
		t.Fatalf("%d changelog records, want the 3 markers", len(recs))
	}
	for _, r := range recs {
		if d, err := mic.DecodeBootstrapMarker(r.Value[9:]); string(r.Key) != mic.KeyTotalsBootstrap || err != nil || d != 0 {
			t.Fatalf("changelog record %q: first day %d, %v", r.Key, d, err)
		}
	}
}

// Users of app codes whose byte order and MySQL's collation order differ
// ("hy_live" sorts before "hyapp" in bytes, after it in
// utf8mb4_general_ci) each get their daily rows.
func TestScanUsersAppCodesOfAnyCollation(t *testing.T) {
	m := testenv.NewMySQL(t)
	apps := []string{"hyapp", "hy_live", "HY2"}
	for i, app := range apps {
		for u := int64(1); u <= 3; u++ {
			if _, err := m.DB.Exec("INSERT INTO user_mic_lifetime_stats (app_code, user_id, seat_occupied_ms, updated_at_ms) VALUES (?, ?, 100, 1)", app, u); err != nil {
				t.Fatal(err)
			}
			for d := range i + 1 { // app i has i+1 days per user
				if _, err := m.DB.Exec("INSERT INTO user_mic_daily_stats (app_code, user_id, stat_date, seat_occupied_ms, session_count, room_count, updated_at_ms) VALUES (?, ?, ?, 100, 1, 1, 1)",
					app, u, now.AddDate(0, 0, -d).Format(time.DateOnly)); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	got := map[string]int{}
	users := 0
	err := scanUsers(context.Background(), m.DB, now.AddDate(0, 0, -5).Format(time.DateOnly), func(_ context.Context, u *userTotals) error {
		users++
		got[fmt.Sprintf("%s/%d", u.app, u.user)] = len(u.tot.Days)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if users != 9 {
		t.Fatalf("%d users scanned, want 9", users)
	}
	for i, app := range apps {
		for u := 1; u <= 3; u++ {
			if n := got[fmt.Sprintf("%s/%d", app, u)]; n != i+1 {
				t.Errorf("%s user %d: %d days, want %d", app, u, n, i+1)
			}
		}
	}
}

// In confluent mode (kafka.public_wire_format) the bootstrap frames the
// totals records under their schema ids, as the processor does: never
// plain.
func TestBootstrapConfluentFraming(t *testing.T) {
	f := newFixture(t)
	tp := f.cfg.Kafka.Topics
	c := f.config(t)
	c.Frames = schemareg.ConfluentFrames(map[string]int{tp.MicDailyTotals: 11, tp.MicLifetimeTotals: 12})
	if _, err := f.run(t, c); err != nil {
		t.Fatal(err)
	}
	for topic, id := range map[string]uint32{tp.MicDailyTotals: 11, tp.MicLifetimeTotals: 12} {
		recs := rttest.ReadCommitted(t, f.k.Brokers, topic, users, 300*time.Millisecond, 20*time.Second)
		if len(recs) < users {
			t.Fatalf("%s: %d records, want %d", topic, len(recs), users)
		}
		for _, r := range recs {
			got, _, msg, err := envelope.Unframe(r.Value)
			if err != nil || got != id {
				t.Fatalf("%s record %s: schema id %d (%v), want %d", topic, r.Key, got, err, id)
			}
			if ct := string(envelope.Header(r, envelope.HeaderContentType)); ct == envelope.ContentType {
				t.Fatalf("%s record %s: content-type %q says plain", topic, r.Key, ct)
			}
			if p, err := envelope.Payload(r); err != nil || !bytes.Equal(p, msg) {
				t.Fatalf("%s record %s: payload %v", topic, r.Key, err)
			}
		}
	}
	// Without an id for a totals topic the bootstrap writes nothing.
	c.Frames = schemareg.ConfluentFrames(map[string]int{tp.MicDailyTotals: 11})
	if _, err := f.run(t, c); err == nil || !strings.Contains(err.Error(), tp.MicLifetimeTotals) {
		t.Fatalf("bootstrap without the lifetime topic's schema id: %v, want an error naming it", err)
	}
}
