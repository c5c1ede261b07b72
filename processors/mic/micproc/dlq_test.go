package micproc_test

import (
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hyapp/roomflow/internal/testenv"
	"github.com/hyapp/roomflow/processors/mic"
	"github.com/hyapp/roomflow/processors/streams/rttest"
)

// TestPoisonRecordsGoToDLQ: records that are not RoomMicChanged envelopes
// are rejected to the DLQ with their reason, and the user's later events
// still flow.
func TestPoisonRecordsGoToDLQ(t *testing.T) {
	e := newMemEnv(t, 1, matrixClock)
	topic := e.cfg.Runtime.Input
	gift := mic.Event{EventID: "gift-1", EventType: "RoomGiftSent", AppCode: "hy", RoomID: "r", OccurredAtMs: base, UserID: 5}
	noID := mic.Event{EventType: mic.EventTypeRoomMicChanged, AppCode: "hy", RoomID: "r", OccurredAtMs: base, UserID: 5, Action: "up", MicSessionID: "m"}
	e.produceRaw([]*kgo.Record{
		{Topic: topic, Key: []byte("5"), Value: []byte("\xff\x01 not protobuf")},
		{Topic: topic, Key: []byte("5"), Value: gift.Encode()},
		{Topic: topic, Key: []byte("5"), Value: noID.Encode()},
	})
	s := &sess{u: 5, room: "r", id: "ms-5"}
	e.produce([]mic.Event{s.ev("up", base), s.ev("down", base+mins)})
	o := e.collect(2, 0)
	if len(o.closed) != 1 || o.closed[0].SeatOccupiedMs != mins {
		t.Fatalf("good events after the poison ones: %v", o.closed)
	}
	want := []string{"bad_envelope", "wrong_event_type", "missing_event_id"}
	if len(o.dlq) != len(want) {
		t.Fatalf("%d DLQ records, want %d", len(o.dlq), len(want))
	}
	for i, d := range o.dlq {
		if o.dlqReasons[i] != want[i] || d.Topic != topic || string(d.Key) != "5" {
			t.Fatalf("DLQ record %d: key %q headers %v", i, d.Key, d.Headers)
		}
	}
	if got := metricSum(t, e, "roomflow_mic_rejected_events_total", nil); got != 3 {
		t.Fatalf("rejected metric %v", got)
	}
}

// TestCorruptStateGoesToDLQ: a session's state value that cannot be decoded
// (planted in the changelog, restored at start) sends the event that reads
// it to the DLQ with reason corrupt_state; the partition moves on and other
// sessions close normally.
func TestCorruptStateGoesToDLQ(t *testing.T) {
	e := newEnv(t, 1, matrixClock)
	bad := &sess{u: 5, room: "r", id: "ms-5"}
	// The runtime's changelog frame (version 1, no expiry) around a value
	// that is not a session.
	frame := append([]byte{1, 0, 0, 0, 0, 0, 0, 0, 0}, 0xff, 0xff, 0xff)
	e.produceRaw([]*kgo.Record{{Topic: e.cfg.Runtime.Changelog,
		Key: []byte(mic.SessionID{AppCode: "hy", UserID: 5, MicSessionID: "ms-5"}.Key()), Value: frame}})
	good := &sess{u: 6, room: "r", id: "ms-6"}
	down := bad.ev("down", base+mins, withReason("leave"))
	e.produce([]mic.Event{down, good.ev("up", base), good.ev("down", base+mins, withReason("leave"))})
	r := e.start()
	o := e.collect(2, 30*time.Second)
	r.stop(t)
	if len(o.closed) != 1 || o.closed[0].UserId != 6 || o.closed[0].SeatOccupiedMs != mins {
		t.Fatalf("closes after the corrupt one: %v", o.closed)
	}
	if len(o.dlq) != 1 || rttest.Header(o.dlq[0], "error_reason") != "corrupt_state" ||
		rttest.Header(o.dlq[0], "event_id") != down.EventID || rttest.Header(o.dlq[0], "source_offset") != "0" {
		t.Fatalf("DLQ %v, want the down of the corrupt session with reason corrupt_state", o.dlq)
	}
}

// TestNewerStateVersionStallsThePartition: a session state value written in
// a newer state version (by a newer release running side by side in a
// rolling upgrade) is not corrupt: the event that reads it is not
// dead-lettered but its partition stalls, retrying until an instance that
// reads the version owns it.
func TestNewerStateVersionStallsThePartition(t *testing.T) {
	e := newEnv(t, 1, matrixClock)
	s := mic.Session{RoomID: "r", Status: mic.StatusPendingPublish, SeatStartedAtMs: base, CreatedAtMs: base}
	// The runtime's changelog frame (version 1, no expiry) around a state
	// value of version 2.
	frame := append([]byte{1, 0, 0, 0, 0, 0, 0, 0, 0, 2}, s.AppendBinary(nil)...)
	e.produceRaw([]*kgo.Record{{Topic: e.cfg.Runtime.Changelog,
		Key: []byte(mic.SessionID{AppCode: "hy", UserID: 5, MicSessionID: "ms-5"}.Key()), Value: frame}})
	newer := &sess{u: 5, room: "r", id: "ms-5"}
	e.produce([]mic.Event{newer.ev("down", base+mins, withReason("leave"))})
	r := e.start()
	testenv.Eventually(t, 30*time.Second, "partition 0 stalled", func() bool {
		v, _ := testenv.Metric(e.reg, "roomflow_process_partition_stalled", "partition", "0")
		return v == 1
	})
	r.stop(t)
	if o := e.read(0, 2*time.Second); len(o.dlq) != 0 || len(o.ledger) != 0 {
		t.Fatalf("DLQ %v, ledger %v: the event must wait, not be dead-lettered or consumed", o.dlq, o.ledger)
	}
}

// TestLongestMicSessionID: MIC-4 allows a 128-byte mic_session_id, so
// the processor does (state key and value, all four output topics): a
// session with such an id closed by its down and one closed by the timer,
// whose ledger event id "MicSessionCompensated:{id}" is 150 bytes; one
// byte more is rejected to the DLQ as field_too_long.
func TestLongestMicSessionID(t *testing.T) {
	e := newMemEnv(t, 1, matrixClock)
	e.cfg.Settings.Policy.PendingPublishMaxAge = 2 * time.Minute
	id := func(c byte, n int) string { return strings.Repeat(string(c), n) }
	named := func(ev mic.Event, eventID string) mic.Event { ev.EventID = eventID; return ev }
	a := &sess{u: 1, room: "r", id: id('a', mic.MaxMicSessionIDLen)}
	b := &sess{u: 2, room: "r", id: id('b', mic.MaxMicSessionIDLen)}
	c := &sess{u: 3, room: "r", id: id('c', mic.MaxMicSessionIDLen+1)}
	now := matrixClock.UnixMilli()
	e.produce([]mic.Event{
		named(a.ev("up", now-3*mins), "a1"), named(a.ev("down", now-2*mins, withReason("leave")), "a2"),
		named(b.ev("up", now-mins), "b1"),
		named(c.ev("up", now-mins), "c1"),
	})
	e.clock.Advance(5 * time.Minute)
	e.tick()
	o := e.collect(4, 0) // a's up and down, b's up and its timer close
	if len(o.dlq) != 1 || o.dlqReasons[0] != "field_too_long" {
		t.Fatalf("DLQ %v, want the 129-byte id alone as field_too_long", o.dlqReasons)
	}
	comp := compensated(o)
	if len(comp) != 1 || len(comp[0].EventId) != 150 || comp[0].EventId != mic.CompensatedEventID(b.id) ||
		comp[0].Session.MicSessionId != b.id || comp[0].Session.ClosedEventId != comp[0].EventId {
		t.Fatalf("timer close of the 128-byte id: %v", comp)
	}
	if len(o.closed) != 2 || o.closed[0].MicSessionId != a.id || o.closed[0].SeatOccupiedMs != mins ||
		o.closed[1].MicSessionId != b.id || o.closed[1].ClosedEventId != comp[0].EventId {
		t.Fatalf("closed events: %v", o.closed)
	}
	if len(o.daily) != 2 || len(o.lifetime) != 2 || o.lifetime[1].EventId != "UserMicLifetimeStatsUpdated:"+b.id {
		t.Fatalf("stats events: %d daily, lifetime %v", len(o.daily), o.lifetime)
	}
}
