package micproc_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hyapp/roomflow/internal/testenv"
	"github.com/hyapp/roomflow/processors/mic"
	"github.com/hyapp/roomflow/schemas/userv1"
)

var (
	base = time.Date(2026, 11, 20, 10, 0, 0, 0, time.UTC).UnixMilli()
	// the runtime clock of the matrix: fixed, so no timer fires
	matrixClock = time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
)

const (
	sec  = int64(1000)
	mins = 60 * sec
	hour = 60 * mins
)

// sess builds the events of one session of user u in room.
type sess struct {
	u    int64
	room string
	id   string
	n    int
	ver  int64
}

func (s *sess) ev(action string, at int64, mods ...func(*mic.Event)) mic.Event {
	s.n++
	s.ver++
	e := mic.Event{EventID: fmt.Sprintf("%s-%d-%s", s.id, s.n, action), EventType: mic.EventTypeRoomMicChanged,
		AppCode: "hy", RoomID: s.room, RoomVersion: s.ver, OccurredAtMs: at, UserID: s.u, SeatNo: 1,
		Action: action, MicSessionID: s.id}
	for _, m := range mods {
		m(&e)
	}
	return e
}

func withReason(r string) func(*mic.Event) { return func(e *mic.Event) { e.Reason = r } }
func withSeat(n int32) func(*mic.Event)    { return func(e *mic.Event) { e.SeatNo = n } }
func withPub(t int64) func(*mic.Event)     { return func(e *mic.Event) { e.PublishEventTimeMs = t } }

type row struct {
	name   string
	user   int64
	events []mic.Event
	check  func(t *testing.T, o *outputs, e *env)
}

// closedOnce returns the user's one UserMicSessionClosed and its ledger.
func closedOnce(t *testing.T, o *outputs) *userv1.UserMicSessionClosed {
	t.Helper()
	if len(o.closed) != 1 || len(o.lifetime) != 1 {
		t.Fatalf("%d closed and %d lifetime events, want one each", len(o.closed), len(o.lifetime))
	}
	c := o.closed[0]
	if c.EventId != "UserMicSessionClosed:"+c.MicSessionId || o.lifetime[0].EventId != "UserMicLifetimeStatsUpdated:"+c.MicSessionId {
		t.Fatalf("derived event ids %s %s", c.EventId, o.lifetime[0].EventId)
	}
	return c
}

// sums checks the user's daily and lifetime events against each other and
// the tallied ledger, and returns lifetime seat and online.
func sums(t *testing.T, o *outputs) (seat, online int64) {
	t.Helper()
	var dSeat, dOnline int64
	for _, d := range o.daily {
		dSeat += d.SeatOccupiedDeltaMs
		dOnline += d.MicOnlineDeltaMs
	}
	for _, l := range o.lifetime {
		seat += l.SeatOccupiedDeltaMs
		online += l.MicOnlineDeltaMs
	}
	if dSeat != seat || dOnline != online || online > seat {
		t.Fatalf("daily %d/%d vs lifetime %d/%d", dSeat, dOnline, seat, online)
	}
	tl := o.tally()
	if tl.Err != nil {
		t.Fatal(tl.Err)
	}
	for _, a := range tl.Lifetime {
		if a.SeatMs != seat || a.OnlineMs != online {
			t.Fatalf("ledger lifetime %+v vs events %d/%d", *a, seat, online)
		}
	}
	return seat, online
}

// TestVerificationMatrix runs every row of the mic requirements'
// verification matrix (MIC-1 to MIC-11) through the processor (on the
// in-memory driver; the Kafka paths are the crash, restore and timer tests):
// all rows' events go in together (one user each), then each row checks what
// was committed for its user.
func TestVerificationMatrix(t *testing.T) {
	var rows []row
	add := func(r row) { rows = append(rows, r) }

	// 普通用户上麦并确认发流 10 分钟后下麦 -> mic_online_ms 增加 10 分钟
	s := &sess{u: 101, room: "r-101", id: "ms-101"}
	add(row{"publish confirmed then down after 10 minutes adds 10 minutes online", 101, []mic.Event{
		s.ev("up", base), s.ev("publish_confirmed", base+3*sec, withPub(base+2*sec)), s.ev("down", base+2*sec+10*mins, withReason("leave")),
	}, func(t *testing.T, o *outputs, _ *env) {
		c := closedOnce(t, o)
		if c.MicOnlineMs != 10*mins || c.SeatOccupiedMs != 10*mins+2*sec || c.PublishingStartedAtMs != base+2*sec {
			t.Fatalf("closed %v", c)
		}
		if _, online := sums(t, o); online != 10*mins {
			t.Fatalf("lifetime online %d", online)
		}
	}})

	// 普通用户只占麦但未发流，超时下麦 -> seat_occupied_ms 有值，mic_online_ms=0
	s = &sess{u: 102, room: "r-102", id: "ms-102"}
	add(row{"occupied without publish, publish_timeout down: seat time only", 102, []mic.Event{
		s.ev("up", base), s.ev("down", base+2*mins, withReason("publish_timeout")),
	}, func(t *testing.T, o *outputs, _ *env) {
		c := closedOnce(t, o)
		if c.SeatOccupiedMs != 2*mins || c.MicOnlineMs != 0 || c.EndReason != "publish_timeout" || c.PublishingStartedAtMs != 0 {
			t.Fatalf("closed %v", c)
		}
		if seat, online := sums(t, o); seat != 2*mins || online != 0 {
			t.Fatalf("lifetime %d/%d", seat, online)
		}
	}})

	// 用户换麦位 -> session 不结束，时长连续
	s = &sess{u: 103, room: "r-103", id: "ms-103"}
	add(row{"seat change keeps one session, time continuous", 103, []mic.Event{
		s.ev("up", base, withSeat(2)), s.ev("publish_confirmed", base, withSeat(2)),
		s.ev("change", base+5*mins, withSeat(5)), s.ev("change", base+7*mins, withSeat(6)),
		s.ev("down", base+20*mins, withSeat(6), withReason("leave")),
	}, func(t *testing.T, o *outputs, _ *env) {
		c := closedOnce(t, o)
		if c.MicOnlineMs != 20*mins || c.SeatOccupiedMs != 20*mins {
			t.Fatalf("closed %v", c)
		}
		for _, l := range o.ledger[:4] {
			if l.Status != "consumed" || l.Session.Status == "ended" || len(l.Daily) != 0 || l.Lifetime != nil {
				t.Fatalf("entry before down closed or counted: %v", l)
			}
		}
		last := o.ledger[4].Session
		if last.FirstSeatNo != 2 || last.CurrentSeatNo != 6 || last.Version != 5 || last.Status != "ended" {
			t.Fatalf("final snapshot %v", last)
		}
	}})

	// 用户离房释放麦位 -> session 结束并累计到 daily/lifetime
	s = &sess{u: 104, room: "r-104", id: "ms-104"}
	add(row{"leave ends the session into daily and lifetime", 104, []mic.Event{
		s.ev("up", base), s.ev("publish_confirmed", base+sec), s.ev("down", base+31*mins, withReason("leave")),
	}, func(t *testing.T, o *outputs, _ *env) {
		c := closedOnce(t, o)
		if c.EndReason != "leave" || len(o.daily) != 1 {
			t.Fatalf("closed %v, %d daily events", c, len(o.daily))
		}
		d := o.daily[0]
		if d.StatDate != "2026-11-20" || d.SeatOccupiedDeltaMs != 31*mins || d.MicOnlineDeltaMs != 31*mins-sec ||
			d.SessionCountDelta != 1 || d.RoomCountDelta != 1 || d.EventId != "UserMicDailyStatsUpdated:ms-104:2026-11-20" {
			t.Fatalf("daily %v", d)
		}
		if l := o.lifetime[0]; l.SessionCountDelta != 1 || l.FirstMicAtMs != base || l.LastMicAtMs != base+31*mins {
			t.Fatalf("lifetime %v", l)
		}
	}})

	// 用户被踢释放麦位 -> session 结束，end_reason=kick
	s = &sess{u: 105, room: "r-105", id: "ms-105"}
	add(row{"kick ends the session with end_reason kick", 105, []mic.Event{
		s.ev("up", base), s.ev("publish_confirmed", base+sec), s.ev("down", base+3*mins, withReason("kick")),
	}, func(t *testing.T, o *outputs, _ *env) {
		if c := closedOnce(t, o); c.EndReason != "kick" || o.ledger[2].Session.EndReason != "kick" {
			t.Fatalf("closed %v", c)
		}
	}})

	// 房间关闭 -> 所有 open session 结束 (room-service emits a down per seat)
	var closeEvents []mic.Event
	for i, u := range []int64{106, 107, 108} {
		s = &sess{u: u, room: "r-closing", id: fmt.Sprintf("ms-%d", u)}
		closeEvents = append(closeEvents, s.ev("up", base+int64(i)*mins, withSeat(int32(i+1))))
		if i != 1 {
			closeEvents = append(closeEvents, s.ev("publish_confirmed", base+int64(i)*mins+sec))
		}
		closeEvents = append(closeEvents, s.ev("down", base+hour, withReason("room_closed")))
	}
	add(row{"room close ends every open session of the room", 0, closeEvents, func(t *testing.T, all *outputs, _ *env) {
		for i, u := range []int64{106, 107, 108} {
			o := all.forUser(u)
			c := closedOnce(t, o)
			wantOnline := hour - int64(i)*mins - sec
			if i == 1 {
				wantOnline = 0
			}
			if c.EndReason != "room_closed" || c.RoomId != "r-closing" || c.SeatOccupiedMs != hour-int64(i)*mins || c.MicOnlineMs != wantOnline {
				t.Fatalf("user %d closed %v", u, c)
			}
			if last := o.ledger[len(o.ledger)-1]; last.Session.Status != "ended" {
				t.Fatalf("user %d session still %s", u, last.Session.Status)
			}
		}
	}})

	// 同一事件重复消费 -> 不重复累计
	s = &sess{u: 109, room: "r-109", id: "ms-109"}
	up, pub, down := s.ev("up", base), s.ev("publish_confirmed", base+sec), s.ev("down", base+11*mins, withReason("leave"))
	add(row{"the same event consumed twice is not counted twice", 109, []mic.Event{
		up, up, pub, up, pub, down, pub, down, down,
	}, func(t *testing.T, o *outputs, _ *env) {
		if len(o.ledger) != 3 {
			t.Fatalf("%d ledger entries for 3 distinct events", len(o.ledger))
		}
		c := closedOnce(t, o)
		if seat, online := sums(t, o); seat != 11*mins || online != 11*mins-sec || c.MicOnlineMs != 11*mins-sec {
			t.Fatalf("lifetime %d/%d", seat, online)
		}
	}})

	// 用户跨天上麦 -> daily stats 拆成两天
	s = &sess{u: 110, room: "r-110", id: "ms-110"}
	night := time.Date(2026, 11, 21, 23, 30, 0, 0, time.UTC).UnixMilli()
	add(row{"a session across midnight splits into two days", 110, []mic.Event{
		s.ev("up", night), s.ev("publish_confirmed", night), s.ev("down", night+100*mins, withReason("leave")),
	}, func(t *testing.T, o *outputs, _ *env) {
		closedOnce(t, o)
		if len(o.daily) != 2 {
			t.Fatalf("%d daily events", len(o.daily))
		}
		d1, d2 := o.daily[0], o.daily[1]
		if d1.StatDate != "2026-11-21" || d1.SeatOccupiedDeltaMs != 30*mins || d1.MicOnlineDeltaMs != 30*mins ||
			d2.StatDate != "2026-11-22" || d2.SeatOccupiedDeltaMs != 70*mins || d2.MicOnlineDeltaMs != 70*mins ||
			d1.SessionCountDelta != 1 || d2.SessionCountDelta != 1 || d1.RoomCountDelta != 1 || d2.RoomCountDelta != 1 ||
			d1.LastMicAtMs != night+30*mins-1 || d2.FirstMicAtMs != night+30*mins {
			t.Fatalf("days %v / %v", d1, d2)
		}
		if seat, _ := sums(t, o); seat != 100*mins {
			t.Fatalf("lifetime seat %d", seat)
		}
	}})

	// 用户不是主播时累计 10 小时，后续成为主播 -> 读取 lifetime 后主播任务可直接完成
	var tenHours []mic.Event
	for i := 0; i < 4; i++ { // 4 sessions of 2.5 h on different days, before any host status exists
		s = &sess{u: 111, room: fmt.Sprintf("r-111-%d", i%2), id: fmt.Sprintf("ms-111-%d", i)}
		at := base + int64(i)*24*hour
		tenHours = append(tenHours, s.ev("up", at), s.ev("publish_confirmed", at), s.ev("down", at+150*mins, withReason("leave")))
	}
	add(row{"10 hours accumulated as a plain user are readable from lifetime", 111, tenHours, func(t *testing.T, o *outputs, _ *env) {
		_, online := sums(t, o)
		const task = 10 * 60 * 60 * 1000 // become_host_online_10h
		if online != task || !(online >= task) {
			t.Fatalf("lifetime mic_online_ms %d, want %d", online, int64(task))
		}
		if len(o.closed) != 4 || len(o.daily) != 4 {
			t.Fatalf("%d sessions %d days", len(o.closed), len(o.daily))
		}
	}})

	// 工资只要求 host 期间时长 -> 工资派生层按 host 生效时间过滤，不改基础累计
	hostSince := base + 24*hour
	var salary []mic.Event
	for i := 0; i < 3; i++ {
		s = &sess{u: 112, room: "r-112", id: fmt.Sprintf("ms-112-%d", i)}
		at := base + int64(i)*24*hour
		salary = append(salary, s.ev("up", at), s.ev("publish_confirmed", at), s.ev("down", at+hour, withReason("leave")))
	}
	add(row{"salary filters host time in the derived layer, the base is unchanged", 112, salary, func(t *testing.T, o *outputs, _ *env) {
		_, online := sums(t, o)
		var hostOnline int64
		for _, c := range o.closed { // the salary layer reads the public closed events
			if c.SeatStartedAtMs >= hostSince {
				hostOnline += c.MicOnlineMs
			}
		}
		if online != 3*hour || hostOnline != 2*hour {
			t.Fatalf("base %d, host-period %d", online, hostOnline)
		}
	}})

	// mic_session_id 为空的麦位事件 -> 不累计，进入异常队列或告警
	s = &sess{u: 113, room: "r-113", id: ""}
	add(row{"an empty mic_session_id is skipped as incomplete_mic_event and counted for alerting", 113, []mic.Event{
		s.ev("up", base), s.ev("publish_confirmed", base+sec), s.ev("down", base+mins),
	}, func(t *testing.T, o *outputs, e *env) {
		if len(o.ledger) != 3 || len(o.closed)+len(o.daily)+len(o.lifetime) != 0 {
			t.Fatalf("ledger %d, derived %d", len(o.ledger), len(o.closed)+len(o.daily)+len(o.lifetime))
		}
		for _, l := range o.ledger {
			if l.Status != "skipped" || l.SkipReason != "incomplete_mic_event" || l.Session != nil {
				t.Fatalf("entry %v", l)
			}
		}
		if n := metricSum(t, e, "roomflow_mic_events_total", map[string]string{"reason": "incomplete_mic_event"}); n != 3 {
			t.Fatalf("roomflow_mic_events_total{reason=incomplete_mic_event} = %v", n)
		}
	}})

	// host stats 消费用户麦时长派生事件 -> 不重复累计 room outbox 同一事件
	s = &sess{u: 114, room: "r-114", id: "ms-114"}
	up, pub, down = s.ev("up", base), s.ev("publish_confirmed", base), s.ev("down", base+45*mins, withReason("leave"))
	add(row{"host stats reading the derived events never counts the room event twice", 114, []mic.Event{
		up, pub, down, down, // the room outbox relayed the down twice
	}, func(t *testing.T, o *outputs, _ *env) {
		hostStats := map[string]int64{} // a consumer keyed by the deterministic event id
		for _, c := range o.closed {
			hostStats[c.EventId] = c.MicOnlineMs
		}
		if len(o.closed) != 1 || hostStats["UserMicSessionClosed:ms-114"] != 45*mins {
			t.Fatalf("closed events %v", o.closed)
		}
	}})

	e := newMemEnv(t, 3, matrixClock)
	var all []mic.Event
	for _, r := range rows {
		all = append(all, r.events...)
	}
	e.produce(all)
	o := e.collect(countLedger(all), 0)
	if len(o.dlq) != 0 {
		t.Fatalf("%d records in the DLQ", len(o.dlq))
	}
	for _, rw := range rows {
		t.Run(strings.ReplaceAll(rw.name, " ", "_"), func(t *testing.T) {
			sub := o
			if rw.user != 0 {
				sub = o.forUser(rw.user)
			}
			rw.check(t, sub, e)
		})
	}
}

// metricSum sums the series of a counter or gauge family on e's registry
// whose labels include every pair of match.
func metricSum(t *testing.T, e *env, name string, match map[string]string) float64 {
	t.Helper()
	var labels []string
	for k, v := range match {
		labels = append(labels, k, v)
	}
	v, _ := testenv.Metric(e.reg, name, labels...)
	return v
}
