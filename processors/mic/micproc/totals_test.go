package micproc_test

import (
	"context"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hyapp/roomflow/processors/mic"
	"github.com/hyapp/roomflow/processors/mic/mictest"
	"github.com/hyapp/roomflow/processors/streams"
)

// markAll writes the totals bootstrap marker of an empty database (first
// day 0: every day) to each partition: on the driver into the stores, on
// Kafka into the changelog, as `roomflow totals bootstrap` does.
func (e *env) markAll(partitions int32) {
	e.t.Helper()
	marker := mic.EncodeBootstrapMarker(0)
	if d := e.driver(); d != nil {
		for p := range partitions {
			d.Seed(p, mic.KeyTotalsBootstrap, marker)
		}
		return
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(e.k.Brokers...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		e.t.Fatal(err)
	}
	defer cl.Close()
	for p := range partitions {
		r := &kgo.Record{Topic: e.cfg.Runtime.Changelog, Partition: p, Key: []byte(mic.KeyTotalsBootstrap),
			Value: streams.ChangelogValue(marker)}
		if err := cl.ProduceSync(context.Background(), r).FirstErr(); err != nil {
			e.t.Fatal(err)
		}
	}
}

// checkTotals: every close published exactly one lifetime total and one
// daily total per day (ids unique), and each key's last total equals the
// sum of its committed deltas (the sink's rules: sums, first by least
// non-zero, last by greatest). Totals commit with their deltas, so this
// holds after any crash.
func checkTotals(t *testing.T, o *outputs) {
	t.Helper()
	if len(o.lifetimeTotals) != len(o.lifetime) || len(o.dailyTotals) != len(o.daily) {
		t.Fatalf("%d lifetime totals for %d deltas, %d daily totals for %d deltas",
			len(o.lifetimeTotals), len(o.lifetime), len(o.dailyTotals), len(o.daily))
	}
	ids := map[string]bool{}
	type sum struct{ seat, online, sessions, rooms, first, last int64 }
	add := func(s *sum, seat, online, sessions, rooms, first, last int64) {
		s.seat, s.online, s.sessions, s.rooms = s.seat+seat, s.online+online, s.sessions+sessions, s.rooms+rooms
		if first != 0 && (s.first == 0 || first < s.first) {
			s.first = first
		}
		s.last = max(s.last, last)
	}
	life, day := map[string]*sum{}, map[string]*sum{}
	get := func(m map[string]*sum, k string) *sum {
		if m[k] == nil {
			m[k] = &sum{}
		}
		return m[k]
	}
	for _, l := range o.lifetime {
		add(get(life, l.AppCode+":"+strconv.FormatInt(l.UserId, 10)), l.SeatOccupiedDeltaMs, l.MicOnlineDeltaMs,
			l.SessionCountDelta, 0, l.FirstMicAtMs, l.LastMicAtMs)
	}
	for _, d := range o.daily {
		add(get(day, d.AppCode+":"+strconv.FormatInt(d.UserId, 10)+":"+d.StatDate), d.SeatOccupiedDeltaMs, d.MicOnlineDeltaMs,
			d.SessionCountDelta, d.RoomCountDelta, d.FirstMicAtMs, d.LastMicAtMs)
	}
	lastLife, lastDay := map[string]sum{}, map[string]sum{}
	for _, l := range o.lifetimeTotals {
		if ids[l.EventId] {
			t.Fatalf("lifetime total %s published twice", l.EventId)
		}
		ids[l.EventId] = true
		lastLife[l.AppCode+":"+strconv.FormatInt(l.UserId, 10)] = sum{l.SeatOccupiedMs, l.MicOnlineMs, l.SessionCount, 0, l.FirstMicAtMs, l.LastMicAtMs}
	}
	for _, d := range o.dailyTotals {
		if ids[d.EventId] {
			t.Fatalf("daily total %s published twice", d.EventId)
		}
		ids[d.EventId] = true
		lastDay[d.AppCode+":"+strconv.FormatInt(d.UserId, 10)+":"+d.StatDate] = sum{d.SeatOccupiedMs, d.MicOnlineMs,
			d.SessionCount, d.RoomCount, d.FirstMicAtMs, d.LastMicAtMs}
	}
	for k, s := range life {
		if lastLife[k] != *s {
			t.Fatalf("lifetime %s: last total %+v, deltas sum to %+v", k, lastLife[k], *s)
		}
	}
	for k, s := range day {
		if lastDay[k] != *s {
			t.Fatalf("day %s: last total %+v, deltas sum to %+v", k, lastDay[k], *s)
		}
	}
}

// TestTotalsThroughProcessor: a random stream with duplicates, cross-day
// and timer-closed sessions on the driver; the totals equal the deltas.
func TestTotalsThroughProcessor(t *testing.T) {
	r := rand.New(rand.NewPCG(35, 3))
	stream := mictest.Generate(r, mictest.Gen{Users: 40, Sessions: 400, StartMs: streamStart, SpreadMs: 4 * 24 * hour,
		MaxLen: 30 * time.Hour, DupRate: 0.1, OpenRate: 0.1, Skips: true})
	e := newMemEnv(t, 3, time.UnixMilli(streamStart).Add(40*24*time.Hour))
	e.cfg.Settings.CompensationBatchSize = 25
	e.cfg.Settings.DayTotalsRetention = 30 * 24 * time.Hour // no day goes: every delta has its total
	e.markAll(3)
	e.produce(stream.Events)
	n := countLedger(stream.Events)
	o := closeAllByTimer(t, e, n+openCount(stream))
	checkAgainstOracles(t, o, stream, e.cfg.Settings.Policy)
	checkTotals(t, o)
	if len(o.lifetimeTotals) != len(stream.Sessions) {
		t.Fatalf("%d lifetime totals for %d sessions", len(o.lifetimeTotals), len(stream.Sessions))
	}
}

// TestTotalsWaitForTheMarker: a partition without the bootstrap marker
// keeps and publishes no totals (counting from 0 over a database with
// history would be wrong); once marked, closes publish; with
// mic.totals_enabled=false nothing is published even when marked.
func TestTotalsWaitForTheMarker(t *testing.T) {
	s1 := &sess{u: 5, room: "r", id: "ms-a"}
	s2 := &sess{u: 5, room: "r", id: "ms-b"}
	e := newMemEnv(t, 1, matrixClock)
	e.produce([]mic.Event{s1.ev("up", base), s1.ev("down", base+mins, withReason("leave"))})
	if o := e.read(2, 0); len(o.lifetime) != 1 || len(o.lifetimeTotals)+len(o.dailyTotals) != 0 {
		t.Fatalf("before the marker: %d deltas, %d+%d totals", len(o.lifetime), len(o.lifetimeTotals), len(o.dailyTotals))
	}
	e.markAll(1)
	e.produce([]mic.Event{s2.ev("up", base+2*mins), s2.ev("down", base+5*mins, withReason("leave"))})
	o := e.read(4, 0)
	if len(o.lifetimeTotals) != 1 || o.lifetimeTotals[0].SeatOccupiedMs != 3*mins || o.lifetimeTotals[0].SessionCount != 1 ||
		len(o.dailyTotals) != 1 || o.dailyTotals[0].RoomCount != 0 || o.dailyTotals[0].SessionCount != 1 {
		t.Fatalf("after the marker (the bootstrap of an empty database): %v %v", o.lifetimeTotals, o.dailyTotals)
	}

	off := newMemEnv(t, 1, matrixClock)
	off.cfg.Settings.DisableTotals = true
	off.markAll(1)
	off.produce([]mic.Event{s1.ev("down", base+mins, withReason("leave"))}) // unknown session: a skip
	s3 := &sess{u: 6, room: "r", id: "ms-c"}
	off.produce([]mic.Event{s3.ev("up", base), s3.ev("down", base+mins, withReason("leave"))})
	if o := off.read(3, 0); len(o.lifetime) != 1 || len(o.lifetimeTotals)+len(o.dailyTotals) != 0 {
		t.Fatalf("mic.totals_enabled=false: %d+%d totals", len(o.lifetimeTotals), len(o.dailyTotals))
	}
}

// TestTotalsDayGone: a delta of a UTC day whose total fell out of
// mic.day_totals_retention (event time) publishes no daily total, never one
// counted again from 0, and counts in the metric; the lifetime total still
// follows.
func TestTotalsDayGone(t *testing.T) {
	e := newMemEnv(t, 1, matrixClock)
	e.cfg.Settings.DayTotalsRetention = 36 * time.Hour // the least with a 12h publishing max age
	e.markAll(1)
	day0 := mic.DayOf(base) * mic.DayMs
	a := &sess{u: 7, room: "r", id: "ms-1"}
	late := &sess{u: 7, room: "r2", id: "ms-2"}
	later := &sess{u: 8, room: "r", id: "ms-3"}
	e.produce([]mic.Event{a.ev("up", day0+hour), a.ev("down", day0+2*hour, withReason("leave")),
		late.ev("up", day0+3*hour),
		// another user moves the partition's watermark 3 days on
		later.ev("up", day0+3*mic.DayMs), later.ev("down", day0+3*mic.DayMs+mins, withReason("leave")),
		late.ev("down", day0+4*hour, withReason("leave"))})
	o := e.read(6, 0)
	if len(o.daily) != 3 || len(o.dailyTotals) != 2 || len(o.lifetimeTotals) != 3 {
		t.Fatalf("%d daily deltas, %d daily totals, %d lifetime totals; want 3, 2, 3", len(o.daily), len(o.dailyTotals), len(o.lifetimeTotals))
	}
	if l := o.lifetimeTotals[2]; l.UserId != 7 || l.SessionCount != 2 || l.SeatOccupiedMs != 2*hour {
		t.Fatalf("lifetime total after the gone day: %v", l)
	}
	if n := metricSum(t, e, "roomflow_mic_totals_not_published_total", map[string]string{"reason": "day_gone"}); n != 1 {
		t.Fatalf("day_gone %v, want 1", n)
	}
}

// TestTotalsCrashMidTransaction kills the processor inside transactions
// on Kafka and restarts it (state from the changelog): the committed
// totals still equal the committed deltas, each published once.
func TestTotalsCrashMidTransaction(t *testing.T) {
	r := rand.New(rand.NewPCG(3535, 1))
	stream := mictest.Generate(r, mictest.Gen{Users: 40, Sessions: 500, StartMs: streamStart, SpreadMs: 2 * 24 * hour,
		MaxLen: 20 * time.Hour, DupRate: 0.1})
	e := newEnv(t, 3, time.UnixMilli(streamStart).Add(40*24*time.Hour))
	e.cfg.Runtime.CommitRecords = 100 // many transactions, so kills land inside them
	e.markAll(3)
	const crashes = 4
	chunk := len(stream.Events)/crashes + 1
	for i := range crashes {
		e.produce(stream.Events[i*chunk : min((i+1)*chunk, len(stream.Events))])
		run := e.start()
		run.waitAssigned(t, 3)
		time.Sleep(time.Duration(20+r.IntN(150)) * time.Millisecond)
		run.kill(t)
	}
	run := e.start()
	o := e.collect(countLedger(stream.Events), 90*time.Second)
	run.stop(t)
	checkTotals(t, o)
	if len(o.lifetimeTotals) != len(stream.Sessions) {
		t.Fatalf("%d lifetime totals for %d sessions", len(o.lifetimeTotals), len(stream.Sessions))
	}
}
