package mic_test

import (
	"errors"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/hyapp/roomflow/processors/mic"
	"github.com/hyapp/roomflow/schemas/roomv1"
)

func TestDecode(t *testing.T) {
	good := e("ev-1", "publish_confirmed", t0, pubAt(t0-sec), rtcStop(0), reason("x"), roomVersion(9), seat(3))
	good.PreviousSeatNo, good.PublishState, good.PublishDeadlineMs = 2, "publishing", t0+mins
	got, err := mic.Decode(good.Encode(), "")
	if err != nil || got != good {
		t.Fatalf("round trip: %v\n got %+v\nwant %+v", err, got, good)
	}
	// Every id the VARCHAR(128) mic_session_id (MIC-4) accepts is accepted.
	longest := good
	longest.MicSessionID = strings.Repeat("s", 128)
	if got, err := mic.Decode(longest.Encode(), ""); err != nil || got != longest {
		t.Fatalf("128-byte mic_session_id: %v", err)
	}
	envelope := func(et string, payload []byte, mod func(*roomv1.EventEnvelope)) []byte {
		env := &roomv1.EventEnvelope{EventId: "ev", EventType: et, AppCode: "hy", RoomId: "r", OccurredAtMs: t0, Payload: payload}
		if mod != nil {
			mod(env)
		}
		b, _ := proto.Marshal(env)
		return b
	}
	payload, _ := proto.Marshal(&roomv1.RoomMicChanged{UserId: 1, Action: "up", MicSessionId: "s"})
	longSession, _ := proto.Marshal(&roomv1.RoomMicChanged{UserId: 1, Action: "up", MicSessionId: strings.Repeat("s", mic.MaxMicSessionIDLen+1)})
	paddedSession, _ := proto.Marshal(&roomv1.RoomMicChanged{UserId: 1, Action: "up", MicSessionId: "s "})
	cases := []struct {
		name   string
		value  []byte
		reason string
	}{
		{"garbage", []byte("\xff\xff\xff not a protobuf"), "bad_envelope"},
		{"truncated envelope", envelope("RoomMicChanged", payload, nil)[:10], "bad_envelope"},
		{"other event type", envelope("RoomGiftSent", payload, nil), "wrong_event_type"},
		{"truncated payload", envelope("RoomMicChanged", payload[:3], nil), "bad_payload"},
		{"no event id", envelope("RoomMicChanged", payload, func(e *roomv1.EventEnvelope) { e.EventId = "" }), "missing_event_id"},
		{"no app code", envelope("RoomMicChanged", payload, func(e *roomv1.EventEnvelope) { e.AppCode = "" }), "missing_app_code"},
		{"long event id", envelope("RoomMicChanged", payload, func(e *roomv1.EventEnvelope) { e.EventId = strings.Repeat("x", 129) }), "field_too_long"},
		{"long mic_session_id", envelope("RoomMicChanged", longSession, nil), "field_too_long"},
		// Ids of byte-exact key columns that pad trailing spaces.
		{"padded event id", envelope("RoomMicChanged", payload, func(e *roomv1.EventEnvelope) { e.EventId = "ev " }), "padded_id"},
		{"padded mic_session_id", envelope("RoomMicChanged", paddedSession, nil), "padded_id"},
		{"long room id", envelope("RoomMicChanged", payload, func(e *roomv1.EventEnvelope) { e.RoomId = strings.Repeat("x", 65) }), "field_too_long"},
		{"no time", envelope("RoomMicChanged", payload, func(e *roomv1.EventEnvelope) { e.OccurredAtMs = 0 }), "bad_time"},
		{"year 10000", envelope("RoomMicChanged", payload, func(e *roomv1.EventEnvelope) { e.OccurredAtMs = mic.MaxTimeMs + 1 }), "bad_time"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := mic.Decode(c.value, "")
			var de *mic.DecodeError
			if !errors.As(err, &de) || de.Reason != c.reason || !errors.Is(err, mic.ErrDecode) {
				t.Fatalf("err %v, want reason %s", err, c.reason)
			}
			if !slices.Contains(mic.DecodeReasons, de.Reason) {
				t.Errorf("reason %s is not in mic.DecodeReasons (its DLQ series would not exist at 0)", de.Reason)
			}
		})
	}
	// No app_code is the configured one: the same Event as naming it.
	noApp, named := good, good
	noApp.AppCode, named.AppCode = "", "hyapp"
	if got, err := mic.Decode(noApp.Encode(), "hyapp"); err != nil || got != named {
		t.Fatalf("default app_code: %v\n got %+v\nwant %+v", err, got, named)
	}
	if got, err := mic.Decode(good.Encode(), "hyapp"); err != nil || got != good {
		t.Fatalf("a named app_code wins over the default: %v %+v", err, got)
	}
	// Incomplete events decode: the engine skips them with a ledger entry.
	inc := e("ev-2", "up", t0, session(""), user(0))
	if _, err := mic.Decode(inc.Encode(), ""); err != nil {
		t.Fatalf("incomplete event must decode: %v", err)
	}
}

func randomSession(r *rand.Rand) mic.Session {
	str := func() string {
		if r.IntN(4) == 0 {
			return ""
		}
		return strings.Repeat(string(rune('a'+r.IntN(26))), r.IntN(40))
	}
	num := func() int64 {
		switch r.IntN(4) {
		case 0:
			return 0
		case 1:
			return -r.Int64()
		}
		return r.Int64()
	}
	s := mic.Session{RoomID: str(), FirstSeatNo: int32(num()), CurrentSeatNo: int32(num()), Status: mic.Status(r.IntN(4)),
		SeatStartedAtMs: num(), PublishingStartedAtMs: num(), EndedAtMs: num(), EndReason: str(), SeatOccupiedMs: num(),
		MicOnlineMs: num(), OpenedEventID: str(), PublishEventID: str(), ClosedEventID: str(), LastRoomVersion: num(),
		UpdatedAtMs: num(), Version: num()}
	s.CreatedAtMs = []int64{s.SeatStartedAtMs, num()}[r.IntN(2)]
	s.LastEventID = []string{s.OpenedEventID, s.PublishEventID, s.ClosedEventID, str()}[r.IntN(4)]
	for i := range s.Recent {
		if r.IntN(3) > 0 {
			s.Recent[i] = r.Uint64() | 1
		}
	}
	return s
}

func TestSessionEncodingRoundTrip(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 5000; i++ {
		s := randomSession(r)
		var got mic.Session
		if err := got.UnmarshalBinary(s.AppendBinary(nil)); err != nil || got != s {
			t.Fatalf("round trip: %v\n got %+v\nwant %+v", err, got, s)
		}
		p, err := mic.PeekTimer(s.AppendBinary(nil))
		if err != nil || p.Status != s.Status || p.SeatStartedAtMs != s.SeatStartedAtMs ||
			p.PublishingStartedAtMs != s.PublishingStartedAtMs || p.EndedAtMs != s.EndedAtMs {
			t.Fatalf("peek: %v %+v of %+v", err, p, s)
		}
		var aliased mic.Session
		if err := aliased.UnmarshalBinaryAlias(s.AppendBinary(nil)); err != nil || aliased != s {
			t.Fatalf("aliased round trip: %v", err)
		}
		tomb := s.Tombstone()
		if err := got.UnmarshalBinary(tomb.AppendBinary(nil)); err != nil || got != tomb {
			t.Fatalf("tombstone round trip: %v", err)
		}
	}
	for _, bad := range [][]byte{{0xff}, {0x22, 0x05, 'a'}, {0x20, 0x10}, {0x0a, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}} {
		var s mic.Session
		if err := s.UnmarshalBinary(bad); !errors.Is(err, mic.ErrCorruptState) {
			t.Fatalf("%x: err %v", bad, err)
		}
	}
	d := mic.DayRooms{"a", "", "room-42"}
	got, err := mic.UnmarshalDayRooms(d.AppendBinary(nil))
	if err != nil || len(got) != 3 || !got.Has("room-42") || !got.Has("") || got.Has("b") {
		t.Fatalf("day rooms %v %v", got, err)
	}
}

// TestTombstoneIsCompact: what a closed session keeps for a week is small.
func TestTombstoneIsCompact(t *testing.T) {
	st := mic.NewMapState()
	for _, ev := range []mic.Event{e("4b0f5d0e-6a43-4a8e-9d0c-6f1f7f1c2a01", "up", t0), e("4b0f5d0e-6a43-4a8e-9d0c-6f1f7f1c2a02", "publish_confirmed", t0),
		e("4b0f5d0e-6a43-4a8e-9d0c-6f1f7f1c2a03", "down", t0+hour)} {
		mic.Handle(st, &ev)
	}
	for k, v := range st.Sessions {
		if len(v) > 60 {
			t.Fatalf("tombstone of %d bytes for key of %d", len(v), len(k))
		}
	}
}

func TestKeys(t *testing.T) {
	for _, id := range []mic.SessionID{{"hy", 7, "s1"}, {"", 0, ""}, {strings.Repeat("a", 32), -1, "x\x00y"}} {
		got, err := mic.ParseSessionKey(id.Key())
		if err != nil || got != id || mic.KeyKind(id.Key()) != mic.KindSession {
			t.Fatalf("%+v: %+v %v", id, got, err)
		}
	}
	k := mic.DayRoomsKey("hy", 7, 20000)
	if d, err := mic.ParseDayRoomsKey(k); err != nil || d != 20000 || mic.KeyKind(k) != mic.KindDayRooms {
		t.Fatalf("day key %d %v", d, err)
	}
	for _, bad := range []string{"", "s", "s\x05ab", "d\x02hy123", "x"} {
		if _, err := mic.ParseSessionKey(bad); err == nil && bad != "" {
			if _, err2 := mic.ParseDayRoomsKey(bad); err2 == nil {
				t.Fatalf("%q parsed", bad)
			}
		}
	}
	if mic.KeyKind(mic.KeyWatermark) != mic.KindWatermark || mic.KeyKind("zz") != 0 {
		t.Fatal("key kinds")
	}
}
