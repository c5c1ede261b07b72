package envelope

import (
	"bytes"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/hyapp/roomflow/schemas/roomv1"
)

// FuzzView checks every view against proto.Unmarshal of the generated
// type: the same inputs are accepted, with the same field values. Each
// input is read as an envelope, a RoomMicChanged and a RoomGiftSent. The
// seeds (f.Add and testdata/fuzz/FuzzView) run in every `go test`.
func FuzzView(f *testing.F) {
	for _, s := range seeds() {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		checkEnvelope(t, b)
		checkMic(t, b)
		checkGift(t, b)
	})
}

func seeds() [][]byte {
	mic, _ := proto.Marshal(&roomv1.RoomMicChanged{UserId: 42, SeatNo: 3, Action: "up", MicSessionId: "ms-1",
		PublishState: "pending_publish", Reason: "leave", PublishDeadlineMs: 1764547230000,
		PublishEventTimeMs: 1764547200000, PreviousSeatNo: -1, RtcStoppedAtMs: 1764547299000})
	gift, _ := proto.Marshal(&roomv1.RoomGiftSent{SenderUserId: 1, TargetUserId: 2, GiftId: "rose", GiftCount: 3,
		CoinSpent: 10, HeatValue: 100, BillingReceiptId: "r-1", Lucky: true, LuckyRuleVersion: "v1", DrawId: "d"})
	env, _ := proto.Marshal(&roomv1.EventEnvelope{EventId: "evt-1", EventType: "RoomMicChanged", AppCode: "hyapp",
		RoomId: "room-1", RoomVersion: 7, OccurredAtMs: 1764547200000, RequestId: "req", CommandId: "cmd", Payload: mic})
	// A repeated field (last wins), an unknown field, a known field with
	// the wrong wire type, a group, invalid UTF-8 and a truncation.
	odd := protowire.AppendTag(append([]byte(nil), env...), 1, protowire.BytesType)
	odd = protowire.AppendString(odd, "evt-2")
	odd = protowire.AppendTag(odd, 99, protowire.Fixed32Type)
	odd = protowire.AppendFixed32(odd, 5)
	odd = protowire.AppendTag(odd, 5, protowire.BytesType)
	odd = protowire.AppendString(odd, "not a varint")
	odd = protowire.AppendTag(odd, 50, protowire.StartGroupType)
	odd = protowire.AppendTag(odd, 50, protowire.EndGroupType)
	badUTF8 := protowire.AppendString(protowire.AppendTag(nil, 2, protowire.BytesType), "\xff")
	return [][]byte{nil, env, mic, gift, odd, badUTF8, env[:len(env)-3], {0x08}, {0x00}}
}

func checkEnvelope(t *testing.T, b []byte) {
	var v View
	verr := v.Parse(b)
	var m roomv1.EventEnvelope
	perr := proto.Unmarshal(b, &m)
	if (verr == nil) != (perr == nil) {
		t.Fatalf("envelope %x: view error %v, proto.Unmarshal error %v", b, verr, perr)
	}
	if verr != nil {
		return
	}
	same(t, "event_id", v.EventID, m.EventId)
	same(t, "event_type", v.EventType, m.EventType)
	same(t, "app_code", v.AppCode, m.AppCode)
	same(t, "room_id", v.RoomID, m.RoomId)
	same(t, "request_id", v.RequestID, m.RequestId)
	same(t, "command_id", v.CommandID, m.CommandId)
	if !bytes.Equal(v.Payload, m.Payload) || v.RoomVersion != m.RoomVersion || v.OccurredAtMs != m.OccurredAtMs {
		t.Fatalf("envelope %x: view %+v, proto %v", b, v, &m)
	}
}

func checkMic(t *testing.T, b []byte) {
	var v MicChanged
	verr := v.Parse(b)
	var m roomv1.RoomMicChanged
	perr := proto.Unmarshal(b, &m)
	if (verr == nil) != (perr == nil) {
		t.Fatalf("RoomMicChanged %x: view error %v, proto.Unmarshal error %v", b, verr, perr)
	}
	if verr != nil {
		return
	}
	same(t, "action", v.Action, m.Action)
	same(t, "mic_session_id", v.MicSessionID, m.MicSessionId)
	same(t, "publish_state", v.PublishState, m.PublishState)
	same(t, "reason", v.Reason, m.Reason)
	if v.UserID != m.UserId || v.SeatNo != m.SeatNo || v.PreviousSeatNo != m.PreviousSeatNo ||
		v.PublishDeadlineMs != m.PublishDeadlineMs || v.PublishEventTimeMs != m.PublishEventTimeMs ||
		v.RTCStoppedAtMs != m.RtcStoppedAtMs {
		t.Fatalf("RoomMicChanged %x: view %+v, proto %v", b, v, &m)
	}
}

func checkGift(t *testing.T, b []byte) {
	var v GiftSent
	verr := v.Parse(b)
	var m roomv1.RoomGiftSent
	perr := proto.Unmarshal(b, &m)
	if (verr == nil) != (perr == nil) {
		t.Fatalf("RoomGiftSent %x: view error %v, proto.Unmarshal error %v", b, verr, perr)
	}
	if verr != nil {
		return
	}
	same(t, "gift_id", v.GiftID, m.GiftId)
	same(t, "billing_receipt_id", v.BillingReceiptID, m.BillingReceiptId)
	same(t, "lucky_rule_version", v.LuckyRuleVersion, m.LuckyRuleVersion)
	same(t, "draw_id", v.DrawID, m.DrawId)
	if v.SenderUserID != m.SenderUserId || v.TargetUserID != m.TargetUserId || v.GiftCount != m.GiftCount ||
		v.CoinSpent != m.CoinSpent || v.HeatValue != m.HeatValue || v.Lucky != m.Lucky {
		t.Fatalf("RoomGiftSent %x: view %+v, proto %v", b, v, &m)
	}
}

func same(t *testing.T, field string, view []byte, want string) {
	t.Helper()
	if string(view) != want {
		t.Fatalf("%s: view %q, proto %q", field, view, want)
	}
}
