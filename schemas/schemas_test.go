package schemas_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/hyapp/roomflow/processors/mic"
	"github.com/hyapp/roomflow/schemas/activityv1"
	"github.com/hyapp/roomflow/schemas/roomv1"
	"github.com/hyapp/roomflow/schemas/userv1"
	"github.com/hyapp/roomflow/schemas/walletv1"
)

// TestGeneratedCodeIsFresh regenerates the Go code, the gRPC stubs and the
// descriptor set roomflow.protoset from schemas/proto with protoc and the
// protoc-gen-go and protoc-gen-go-grpc versions go.mod pins, and fails when
// a committed file differs: run `make proto` and commit.
func TestGeneratedCodeIsFresh(t *testing.T) {
	protoc, err := exec.LookPath("protoc")
	if err != nil {
		t.Fatal("protoc is required (Debian: apt-get install protobuf-compiler): ", err)
	}
	tmp := t.TempDir()
	var plugins []string
	for name, pkg := range map[string]string{
		"protoc-gen-go":      "google.golang.org/protobuf/cmd/protoc-gen-go",
		"protoc-gen-go-grpc": "google.golang.org/grpc/cmd/protoc-gen-go-grpc",
	} {
		bin := filepath.Join(tmp, name)
		if out, err := exec.Command("go", "build", "-o", bin, pkg).CombinedOutput(); err != nil {
			t.Fatalf("build %s: %v\n%s", name, err, out)
		}
		plugins = append(plugins, "--plugin="+name+"="+bin)
	}
	var files []string
	err = filepath.WalkDir("proto", func(p string, d os.DirEntry, err error) error {
		if err == nil && strings.HasSuffix(p, ".proto") {
			rel, _ := filepath.Rel("proto", p)
			files = append(files, rel)
		}
		return err
	})
	if err != nil || len(files) == 0 {
		t.Fatalf("no proto files: %v", err)
	}
	out := filepath.Join(tmp, "out")
	os.MkdirAll(out, 0o755)
	args := append(plugins, "-I", "proto",
		"--go_out="+out, "--go_opt=module=github.com/hyapp/roomflow/schemas",
		"--go-grpc_out="+out, "--go-grpc_opt=module=github.com/hyapp/roomflow/schemas",
		"--include_imports", "--descriptor_set_out="+filepath.Join(out, "roomflow.protoset"))
	if b, err := exec.Command(protoc, append(args, files...)...).CombinedOutput(); err != nil {
		t.Fatalf("protoc: %v\n%s", err, b)
	}
	pbGo := 0
	err = filepath.WalkDir(out, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(out, p)
		want, _ := os.ReadFile(p)
		got, rerr := os.ReadFile(rel)
		if rerr != nil {
			t.Errorf("%s is not committed (run make proto)", rel)
		} else if !bytes.Equal(got, want) {
			t.Errorf("%s is stale (run make proto)", rel)
		}
		if strings.HasSuffix(rel, ".pb.go") && !strings.HasSuffix(rel, "_grpc.pb.go") {
			pbGo++
		}
		return nil
	})
	if err != nil || pbGo != len(files) {
		t.Fatalf("generated %d .pb.go files for %d protos: %v", pbGo, len(files), err)
	}
	if _, err := os.Stat(filepath.Join(out, "roomflow.protoset")); err != nil {
		t.Fatalf("no descriptor set: %v", err)
	}
}

func roundTrip[M proto.Message](t *testing.T, in M, out M) {
	t.Helper()
	b, err := proto.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	if err := proto.Unmarshal(b, out); err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(in, out) {
		t.Fatalf("round trip changed %T:\n in: %v\nout: %v", in, in, out)
	}
}

func TestRoundTrips(t *testing.T) {
	mic, _ := proto.Marshal(&roomv1.RoomMicChanged{UserId: 42, SeatNo: 3, Action: "down", MicSessionId: "ms-1",
		PublishState: "publishing", Reason: "kick", PublishDeadlineMs: 5, PublishEventTimeMs: 6, PreviousSeatNo: 2, RtcStoppedAtMs: 7})
	env := &roomv1.EventEnvelope{EventId: "e-1", EventType: "RoomMicChanged", AppCode: "hyapp", RoomId: "r-1",
		RoomVersion: 9, OccurredAtMs: 1777000000000, RequestId: "req", CommandId: "cmd", Payload: mic}
	roundTrip(t, env, &roomv1.EventEnvelope{})
	var got roomv1.RoomMicChanged
	if err := proto.Unmarshal(env.Payload, &got); err != nil || got.GetRtcStoppedAtMs() != 7 || got.GetReason() != "kick" {
		t.Fatalf("nested payload: %v %v", &got, err)
	}
	roundTrip(t, &roomv1.RoomGiftSent{SenderUserId: 1, TargetUserId: 2, GiftId: "rose", GiftCount: 3, CoinSpent: 300,
		HeatValue: 300, BillingReceiptId: "b", Lucky: true, LuckyRuleVersion: "v1", DrawId: "d"}, &roomv1.RoomGiftSent{})
	roundTrip(t, &userv1.MicLedgerEntry{EventId: "e", AppCode: "a", EventType: "RoomMicChanged", UserId: 1,
		MicSessionId: "s", Action: "down", RoomId: "r", Status: "consumed", OccurredAtMs: 1,
		Session:  &userv1.MicSession{MicSessionId: "s", Status: "ended", SeatOccupiedMs: 10, MicOnlineMs: 5, Version: 3},
		Daily:    []*userv1.MicDailyDelta{{StatDate: "2026-11-29", SeatOccupiedDeltaMs: 10, SessionCountDelta: 1, RoomCountDelta: 1}},
		Lifetime: &userv1.MicLifetimeDelta{SeatOccupiedDeltaMs: 10, MicOnlineDeltaMs: 5, SessionCountDelta: 1}}, &userv1.MicLedgerEntry{})
	roundTrip(t, &userv1.UserMicSessionClosed{EventId: "UserMicSessionClosed:s", UserId: 1, MicOnlineMs: 5}, &userv1.UserMicSessionClosed{})
	roundTrip(t, &userv1.UserMicDailyStatsUpdated{EventId: "x", StatDate: "2026-11-29", RoomCountDelta: 1}, &userv1.UserMicDailyStatsUpdated{})
	roundTrip(t, &userv1.UserMicLifetimeStatsUpdated{EventId: "y", SessionCountDelta: 1}, &userv1.UserMicLifetimeStatsUpdated{})
	roundTrip(t, &activityv1.LuckyPoolInflow{EventId: "LuckyPoolInflow:e", HeatValue: 1000, PoolIn: 50,
		PlatformIn: 10, RoomIn: 20, GiftIn: 20, RuleVersion: "v1"}, &activityv1.LuckyPoolInflow{})
}

// The envelope's field numbers are a wire contract with room-service.
func TestEnvelopeWireNumbers(t *testing.T) {
	fields := (&roomv1.EventEnvelope{}).ProtoReflect().Descriptor().Fields()
	want := map[string]int32{"event_id": 1, "event_type": 2, "app_code": 3, "room_id": 4, "room_version": 5,
		"occurred_at_ms": 6, "request_id": 7, "command_id": 8, "payload": 9}
	for name, num := range want {
		f := fields.ByName(protoreflect.Name(name))
		if f == nil || int32(f.Number()) != num {
			t.Errorf("EventEnvelope.%s: want field %d", name, num)
		}
	}
	if string((&roomv1.EventEnvelope{}).ProtoReflect().Descriptor().FullName()) != "hyapp.room.v1.EventEnvelope" {
		t.Error("package must be hyapp.room.v1")
	}
}

// The documented end_reason and skip_reason constants of mic.proto are the
// strings the mic processor writes: every skip reason it can write is a
// MicSkipReason value and every listed value is one it writes; its timer
// close reasons are MicEndReason values. The wire fields stay strings.
func TestMicReasonConstants(t *testing.T) {
	skips := map[string]bool{mic.SkipIncomplete: true, mic.SkipUnknownSession: true, mic.SkipAlreadyClosed: true,
		mic.SkipStale: true, mic.SkipUnknownAction: true}
	for v, name := range userv1.MicSkipReason_name {
		if v != 0 && !skips[name] {
			t.Errorf("MicSkipReason %s is not a skip reason the mic processor writes", name)
		}
	}
	for s := range skips {
		if _, ok := userv1.MicSkipReason_value[s]; !ok {
			t.Errorf("skip reason %q is not documented in MicSkipReason", s)
		}
	}
	for _, r := range []string{mic.ReasonCompensatedPublishTimeout, mic.ReasonCompensatedPublishingWindow} {
		if _, ok := userv1.MicEndReason_value[r]; !ok {
			t.Errorf("end reason %q is not documented in MicEndReason", r)
		}
	}
	if userv1.MicEndReason_compensated_publishing_max_window.String() != "compensated_publishing_max_window" ||
		userv1.MicSkipReason_incomplete_mic_event.String() != "incomplete_mic_event" {
		t.Error("an enum value's String() must be the wire string")
	}
}

// The internal query of MIC-12: service, method and field numbers exactly as
// the requirement writes them.
func TestUserServiceWireNumbers(t *testing.T) {
	checkFields(t, &userv1.GetUserMicLifetimeStatsRequest{}, map[string]int32{"meta": 1, "user_id": 2})
	checkFields(t, &userv1.UserMicLifetimeStats{}, map[string]int32{"user_id": 1, "seat_occupied_ms": 2, "mic_online_ms": 3,
		"session_count": 4, "first_mic_at_ms": 5, "last_mic_at_ms": 6, "updated_at_ms": 7, "app_code": 8})
	checkFields(t, &userv1.GetUserMicLifetimeStatsResponse{}, map[string]int32{"stats": 1})
	checkFields(t, &userv1.RequestMeta{}, map[string]int32{"request_id": 1, "caller": 2, "app_code": 3})
	if userv1.UserService_GetUserMicLifetimeStats_FullMethodName != "/hyapp.user.v1.UserService/GetUserMicLifetimeStats" {
		t.Errorf("method %s", userv1.UserService_GetUserMicLifetimeStats_FullMethodName)
	}
}

// checkFields fails unless m has exactly the fields of want, each with its
// number: a field renumbered, renamed or added without the contract
// saying so breaks the callers of another team.
func checkFields(t *testing.T, m proto.Message, want map[string]int32) {
	t.Helper()
	d := m.ProtoReflect().Descriptor()
	if d.Fields().Len() != len(want) {
		t.Errorf("%s has %d fields, want %d", d.FullName(), d.Fields().Len(), len(want))
	}
	for name, num := range want {
		if f := d.Fields().ByName(protoreflect.Name(name)); f == nil || int32(f.Number()) != num {
			t.Errorf("%s.%s: want field %d", d.FullName(), name, num)
		}
	}
}

// LuckyGiftService is the contract with room-service (LUCKY-1), field for
// field; app_code = 8 and client_seed = 9 (docs/fairness.md) of the meta
// are roomflow's documented additions.
func TestLuckyGiftServiceWireNumbers(t *testing.T) {
	checkFields(t, &activityv1.LuckyGiftMeta{}, map[string]int32{"request_id": 1, "command_id": 2, "room_id": 3,
		"sender_user_id": 4, "target_user_id": 5, "device_id": 6, "sent_at_ms": 7, "app_code": 8, "client_seed": 9})
	checkFields(t, &activityv1.CheckLuckyGiftRequest{}, map[string]int32{"meta": 1, "gift_id": 2, "gift_count": 3,
		"coin_spent": 4, "heat_value": 5})
	checkFields(t, &activityv1.CheckLuckyGiftResponse{}, map[string]int32{"enabled": 1, "rule_version": 2, "reject_reason": 3})
	checkFields(t, &activityv1.ExecuteLuckyGiftDrawRequest{}, map[string]int32{"meta": 1, "gift_id": 2, "gift_count": 3,
		"coin_spent": 4, "heat_value": 5, "billing_receipt_id": 6, "rule_version": 7})
	checkFields(t, &activityv1.RewardTierResult{}, map[string]int32{"tier_id": 1, "reward_coins": 2, "tier_type": 3})
	checkFields(t, &activityv1.ExecuteLuckyGiftDrawResponse{}, map[string]int32{"draw_id": 1, "rule_version": 2, "hit": 3,
		"tier": 4, "reward_status": 5, "credit_receipt_id": 6, "reject_reason": 7})
	for got, want := range map[string]string{
		activityv1.LuckyGiftService_CheckLuckyGift_FullMethodName:       "/hyapp.activity.v1.LuckyGiftService/CheckLuckyGift",
		activityv1.LuckyGiftService_ExecuteLuckyGiftDraw_FullMethodName: "/hyapp.activity.v1.LuckyGiftService/ExecuteLuckyGiftDraw",
	} {
		if got != want {
			t.Errorf("method %s, want %s", got, want)
		}
	}
}

// WalletService is the reward credit LUCKY-1 asks of wallet-service.
func TestWalletServiceWireNumbers(t *testing.T) {
	checkFields(t, &walletv1.CreditLuckyRewardRequest{}, map[string]int32{"reward_id": 1, "command_id": 2, "draw_id": 3,
		"room_id": 4, "user_id": 5, "reward_coins": 6, "reason": 7})
	checkFields(t, &walletv1.CreditLuckyRewardResponse{}, map[string]int32{"credit_receipt_id": 1, "balance_after": 2})
	if walletv1.WalletService_CreditLuckyReward_FullMethodName != "/hyapp.wallet.v1.WalletService/CreditLuckyReward" {
		t.Errorf("method %s", walletv1.WalletService_CreditLuckyReward_FullMethodName)
	}
}
