package mic_test

import (
	"math/rand/v2"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/hyapp/roomflow/processors/mic"
	"github.com/hyapp/roomflow/schemas/roomv1"
	"github.com/hyapp/roomflow/schemas/userv1"
)

func randStr(r *rand.Rand) string {
	if r.IntN(5) == 0 {
		return ""
	}
	return strings.Repeat("é"[:1+r.IntN(1)]+"x", r.IntN(90)) // sometimes long (2-byte lengths)
}

func randInt(r *rand.Rand) int64 {
	switch r.IntN(5) {
	case 0:
		return 0
	case 1:
		return -r.Int64N(1 << 40)
	}
	return r.Int64N(1 << 50)
}

// TestWireEncodersMatchGenerated: the hand-written encoders produce bytes
// the generated types decode to the same message.
func TestWireEncodersMatchGenerated(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	s := func() string {
		v := randStr(r)
		return strings.ToValidUTF8(v, "?")
	}
	for i := 0; i < 3000; i++ {
		l := &userv1.MicLedgerEntry{EventId: s(), AppCode: s(), EventType: s(), UserId: randInt(r), MicSessionId: s(),
			Action: s(), RoomId: s(), Status: s(), SkipReason: s(), OccurredAtMs: randInt(r)}
		if r.IntN(2) == 0 {
			l.Session = &userv1.MicSession{AppCode: s(), MicSessionId: s(), UserId: randInt(r), RoomId: s(),
				FirstSeatNo: int32(randInt(r)), CurrentSeatNo: int32(randInt(r)), Status: s(), SeatStartedAtMs: randInt(r),
				PublishingStartedAtMs: randInt(r), EndedAtMs: randInt(r), EndReason: s(), SeatOccupiedMs: randInt(r),
				MicOnlineMs: randInt(r), OpenedEventId: s(), PublishEventId: s(), ClosedEventId: s(), LastEventId: s(),
				LastRoomVersion: randInt(r), CreatedAtMs: randInt(r), UpdatedAtMs: randInt(r), Version: randInt(r)}
		}
		for d := r.IntN(4); d > 0; d-- {
			l.Daily = append(l.Daily, &userv1.MicDailyDelta{StatDate: s(), SeatOccupiedDeltaMs: randInt(r),
				MicOnlineDeltaMs: randInt(r), SessionCountDelta: randInt(r), RoomCountDelta: randInt(r),
				FirstMicAtMs: randInt(r), LastMicAtMs: randInt(r)})
		}
		if r.IntN(2) == 0 {
			l.Lifetime = &userv1.MicLifetimeDelta{SeatOccupiedDeltaMs: randInt(r), MicOnlineDeltaMs: randInt(r),
				SessionCountDelta: randInt(r), FirstMicAtMs: randInt(r), LastMicAtMs: randInt(r)}
		}
		roundTrip(t, l, mic.AppendLedgerEntry(nil, l), &userv1.MicLedgerEntry{})
		c := &userv1.UserMicSessionClosed{EventId: s(), AppCode: s(), UserId: randInt(r), RoomId: s(), MicSessionId: s(),
			SeatOccupiedMs: randInt(r), MicOnlineMs: randInt(r), SeatStartedAtMs: randInt(r), EndedAtMs: randInt(r),
			EndReason: s(), ClosedEventId: s(), PublishingStartedAtMs: randInt(r)}
		roundTrip(t, c, mic.AppendSessionClosed(nil, c), &userv1.UserMicSessionClosed{})
		d := &userv1.UserMicDailyStatsUpdated{EventId: s(), AppCode: s(), UserId: randInt(r), StatDate: s(),
			SeatOccupiedDeltaMs: randInt(r), MicOnlineDeltaMs: randInt(r), SessionCountDelta: randInt(r),
			RoomCountDelta: randInt(r), UpdatedAtMs: randInt(r), MicSessionId: s(), FirstMicAtMs: randInt(r), LastMicAtMs: randInt(r)}
		roundTrip(t, d, mic.AppendDailyStatsUpdated(nil, d), &userv1.UserMicDailyStatsUpdated{})
		lt := &userv1.UserMicLifetimeStatsUpdated{EventId: s(), AppCode: s(), UserId: randInt(r), SeatOccupiedDeltaMs: randInt(r),
			MicOnlineDeltaMs: randInt(r), SessionCountDelta: randInt(r), UpdatedAtMs: randInt(r), MicSessionId: s(),
			FirstMicAtMs: randInt(r), LastMicAtMs: randInt(r)}
		roundTrip(t, lt, mic.AppendLifetimeStatsUpdated(nil, lt), &userv1.UserMicLifetimeStatsUpdated{})
		dt := &userv1.UserMicDailyTotals{EventId: s(), AppCode: s(), UserId: randInt(r), StatDate: s(),
			SeatOccupiedMs: randInt(r), MicOnlineMs: randInt(r), SessionCount: randInt(r), RoomCount: randInt(r),
			FirstMicAtMs: randInt(r), LastMicAtMs: randInt(r), UpdatedAtMs: randInt(r), MicSessionId: s()}
		roundTrip(t, dt, mic.AppendDailyTotals(nil, dt), &userv1.UserMicDailyTotals{})
		ltt := &userv1.UserMicLifetimeTotals{EventId: s(), AppCode: s(), UserId: randInt(r), SeatOccupiedMs: randInt(r),
			MicOnlineMs: randInt(r), SessionCount: randInt(r), FirstMicAtMs: randInt(r), LastMicAtMs: randInt(r),
			UpdatedAtMs: randInt(r), MicSessionId: s()}
		roundTrip(t, ltt, mic.AppendLifetimeTotals(nil, ltt), &userv1.UserMicLifetimeTotals{})
	}
}

func roundTrip(t *testing.T, want proto.Message, b []byte, got proto.Message) {
	t.Helper()
	if err := proto.Unmarshal(b, got); err != nil || !proto.Equal(got, want) {
		t.Fatalf("round trip: %v\n got %v\nwant %v", err, got, want)
	}
	gen, _ := proto.Marshal(want)
	if len(gen) != len(b) {
		t.Fatalf("encoded %d bytes, generated code %d", len(b), len(gen))
	}
}

// TestDecodeMatchesGenerated: the hand-written decoder reads what the
// generated encoder writes, and refuses what the generated decoder refuses.
func TestDecodeMatchesGenerated(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	for i := 0; i < 3000; i++ {
		p := &roomv1.RoomMicChanged{UserId: randInt(r), SeatNo: int32(randInt(r)), Action: randStr(r), MicSessionId: randStr(r),
			PublishState: randStr(r), Reason: randStr(r), PublishDeadlineMs: randInt(r), PublishEventTimeMs: randInt(r),
			PreviousSeatNo: int32(randInt(r)), RtcStoppedAtMs: randInt(r)}
		pb, _ := proto.Marshal(p)
		env := &roomv1.EventEnvelope{EventId: randStr(r), EventType: "RoomMicChanged", AppCode: randStr(r), RoomId: randStr(r),
			RoomVersion: randInt(r), OccurredAtMs: randInt(r), RequestId: randStr(r), CommandId: randStr(r), Payload: pb}
		b, _ := proto.Marshal(env)
		ev, err := mic.Decode(b, "")
		if err == nil {
			if ev.EventID != env.EventId || ev.AppCode != env.AppCode || ev.RoomID != env.RoomId || ev.RoomVersion != env.RoomVersion ||
				ev.OccurredAtMs != env.OccurredAtMs || ev.UserID != p.UserId || ev.SeatNo != p.SeatNo || ev.Action != p.Action ||
				ev.MicSessionID != p.MicSessionId || ev.PublishState != p.PublishState || ev.Reason != p.Reason ||
				ev.PublishDeadlineMs != p.PublishDeadlineMs || ev.PublishEventTimeMs != p.PublishEventTimeMs ||
				ev.PreviousSeatNo != p.PreviousSeatNo || ev.RTCStoppedAtMs != p.RtcStoppedAtMs {
				t.Fatalf("decoded %+v from %v / %v", ev, env, p)
			}
		}
		// Flip a byte: whatever the generated decoder makes of it, ours
		// must not panic, and must reject what it rejects.
		c := append([]byte(nil), b...)
		c[r.IntN(len(c))] ^= byte(1 + r.IntN(255))
		var genEnv roomv1.EventEnvelope
		genErr := proto.Unmarshal(c, &genEnv)
		if _, err := mic.Decode(c, ""); genErr != nil && err == nil {
			t.Fatalf("accepted what the generated decoder refuses (%v): %x", genErr, c)
		}
		// The trusted decode reads whatever Decode accepts the same way.
		if ev, err := mic.Decode(c, "x"); err == nil {
			if tev, terr := mic.DecodeTrusted(c, "x"); terr != nil || tev != ev {
				t.Fatalf("DecodeTrusted %+v (%v), Decode %+v: %x", tev, terr, ev, c)
			}
		}
	}
	gev := e("ev", "up", t0)
	good := gev.Encode()
	var bad []byte
	bad = protowire.AppendTag(bad, 1, protowire.BytesType)
	bad = protowire.AppendString(bad, "a\xffb") // event_id, again: the last one wins
	if _, err := mic.Decode(append(good, bad...), ""); err == nil {
		t.Fatal("invalid UTF-8 accepted")
	}
	// Trusted input (the room processor's copies, checked there) is not
	// checked again: the one thing DecodeTrusted lets through.
	if ev, err := mic.DecodeTrusted(append(good, bad...), ""); err != nil || ev.EventID != "a\xffb" {
		t.Fatalf("DecodeTrusted: %v, event id %q", err, ev.EventID)
	}
	if ev, err := mic.Decode(good, ""); err != nil || ev.EventID != "ev" {
		t.Fatalf("good event: %v", err)
	}
}
