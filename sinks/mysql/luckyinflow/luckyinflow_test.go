package luckyinflow

import (
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/protobuf/proto"

	"github.com/hyapp/roomflow/schemas/activityv1"
	"github.com/hyapp/roomflow/schemas/envelope"
	mysqlsink "github.com/hyapp/roomflow/sinks/mysql"
)

func TestDecode(t *testing.T) {
	for _, tc := range []struct {
		name   string
		in     *activityv1.LuckyPoolInflow
		reason string
	}{
		{"valid", &activityv1.LuckyPoolInflow{EventId: "i", AppCode: "a", RoomId: "r", GiftId: "g", PlatformIn: 1}, ""},
		{"no room", &activityv1.LuckyPoolInflow{EventId: "i", AppCode: "a", GiftId: "g"}, "missing_scope"},
		{"negative", &activityv1.LuckyPoolInflow{EventId: "i", AppCode: "a", RoomId: "r", GiftId: "g", RoomIn: -1}, "negative_inflow"},
		{"id too long", &activityv1.LuckyPoolInflow{EventId: strings.Repeat("i", 161), AppCode: "a", RoomId: "r", GiftId: "g"}, "too_long"},
		{"every amount at the bound", &activityv1.LuckyPoolInflow{EventId: "i", AppCode: "a", RoomId: "r", GiftId: "g", HeatValue: envelope.MaxGiftCoins,
			PoolIn: envelope.MaxGiftCoins, PlatformIn: envelope.MaxGiftCoins, RoomIn: envelope.MaxGiftCoins, GiftIn: envelope.MaxGiftCoins}, ""},
		{"heat over the bound", &activityv1.LuckyPoolInflow{EventId: "i", AppCode: "a", RoomId: "r", GiftId: "g", HeatValue: envelope.MaxGiftCoins + 1}, envelope.ReasonAmountOutOfRange},
		{"negative heat", &activityv1.LuckyPoolInflow{EventId: "i", AppCode: "a", RoomId: "r", GiftId: "g", HeatValue: -1}, envelope.ReasonAmountOutOfRange},
		{"pool_in over the bound", &activityv1.LuckyPoolInflow{EventId: "i", AppCode: "a", RoomId: "r", GiftId: "g", PoolIn: math.MaxInt64}, envelope.ReasonAmountOutOfRange},
		{"platform_in over the bound", &activityv1.LuckyPoolInflow{EventId: "i", AppCode: "a", RoomId: "r", GiftId: "g", PlatformIn: envelope.MaxGiftCoins + 1}, envelope.ReasonAmountOutOfRange},
		{"room_in over the bound", &activityv1.LuckyPoolInflow{EventId: "i", AppCode: "a", RoomId: "r", GiftId: "g", RoomIn: envelope.MaxGiftCoins + 1}, envelope.ReasonAmountOutOfRange},
		{"gift_in over the bound", &activityv1.LuckyPoolInflow{EventId: "i", AppCode: "a", RoomId: "r", GiftId: "g", GiftIn: envelope.MaxGiftCoins + 1}, envelope.ReasonAmountOutOfRange},
		// Keys of byte-exact columns that pad trailing spaces.
		{"padded id", &activityv1.LuckyPoolInflow{EventId: "i ", AppCode: "a", RoomId: "r", GiftId: "g"}, "padded_id"},
		{"padded draw", &activityv1.LuckyPoolInflow{EventId: "i", AppCode: "a", RoomId: "r", GiftId: "g", DrawId: "d "}, "padded_id"},
		{"padded room", &activityv1.LuckyPoolInflow{EventId: "i", AppCode: "a", RoomId: "r ", GiftId: "g"}, "padded_id"},
		{"padded gift", &activityv1.LuckyPoolInflow{EventId: "i", AppCode: "a", RoomId: "r", GiftId: "g "}, "padded_id"},
		{"inner and leading spaces", &activityv1.LuckyPoolInflow{EventId: " i", AppCode: "a", RoomId: "r 1", GiftId: " g", DrawId: "d\t"}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, _ := proto.Marshal(tc.in)
			_, err := Decode(b, "")
			var ie *mysqlsink.InvalidRecordError
			if (tc.reason == "") != (err == nil) || (err != nil && (!errors.As(err, &ie) || ie.Reason != tc.reason)) {
				t.Fatalf("error %v, want reason %q", err, tc.reason)
			}
		})
	}
	b, _ := proto.Marshal(&activityv1.LuckyPoolInflow{EventId: "i", RoomId: "r", GiftId: "g", PlatformIn: 1})
	want := &activityv1.LuckyPoolInflow{EventId: "i", AppCode: "a", RoomId: "r", GiftId: "g", PlatformIn: 1}
	if got, err := Decode(b, "a"); err != nil || !proto.Equal(got, want) {
		t.Fatalf("default app_code: %v %v", err, got)
	}
	if _, err := Decode(b, ""); err == nil {
		t.Fatal("no app_code and no default must be invalid")
	}
}

func TestBuildPools(t *testing.T) {
	inflows := []*activityv1.LuckyPoolInflow{
		{EventId: "i1", AppCode: "x", RoomId: "r1", GiftId: "g1", PlatformIn: 2, RoomIn: 3, GiftIn: 5, OccurredAtMs: 10},
		{EventId: "i2", AppCode: "x", RoomId: "r2", GiftId: "g1", PlatformIn: 20, RoomIn: 30, GiftIn: 50, OccurredAtMs: 20},
	}
	pools, err := BuildPools(inflows)
	if err != nil {
		t.Fatal(err)
	}
	// The platform row is written once per batch with the summed inflow;
	// rows are sorted by primary key (gift < platform < room).
	wantPools := []PoolRow{
		{PoolKey{"x", "gift", "g1"}, 55, 20},
		{PoolKey{"x", "platform", "global"}, 22, 20},
		{PoolKey{"x", "room", "r1"}, 3, 10},
		{PoolKey{"x", "room", "r2"}, 30, 20},
	}
	if len(pools) != len(wantPools) {
		t.Fatalf("pools = %+v", pools)
	}
	for i := range wantPools {
		if pools[i] != wantPools[i] {
			t.Fatalf("pool %d = %+v, want %+v", i, pools[i], wantPools[i])
		}
	}
}

// BuildPools and BuildDaily refuse a batch whose sum for a row leaves
// int64 (Decode's bounds keep real batches far from it) with an
// *mysqlsink.OverflowError naming the column, instead of wrapping.
func TestBuildOverflowIsAnError(t *testing.T) {
	const half = math.MaxInt64/2 + 1
	inflows := []*activityv1.LuckyPoolInflow{
		{EventId: "i1", AppCode: "x", RoomId: "r1", GiftId: "g1", PlatformIn: half},
		{EventId: "i2", AppCode: "x", RoomId: "r2", GiftId: "g2", PlatformIn: half},
	}
	var oe *mysqlsink.OverflowError
	if _, err := BuildPools(inflows); !errors.As(err, &oe) || oe.Column != "lucky_pools.total_in" || oe.Sum != half || oe.Add != half {
		t.Errorf("BuildPools: %v, want the total_in overflow", err)
	}
	if _, err := BuildDaily(inflows); !errors.As(err, &oe) || oe.Column != "lucky_pool_inflow_daily.inflow" {
		t.Errorf("BuildDaily: %v, want the inflow overflow", err)
	}
	if _, err := BuildPools(inflows[:1]); err != nil {
		t.Errorf("BuildPools of one: %v", err)
	}
}

// The applier reads one topic's plain and Confluent-framed records alike
// (a wire format switch), by content-type, else the leading 0; a record
// that claims the framing and does not hold it is invalid (decode).
func TestApplierDecodesBothWireFormats(t *testing.T) {
	a, err := New(Config{Topic: "inflow", DefaultAppCode: "a"})
	if err != nil {
		t.Fatal(err)
	}
	want := &activityv1.LuckyPoolInflow{EventId: "i", AppCode: "a", RoomId: "r", GiftId: "g", PlatformIn: 7}
	plain, _ := proto.Marshal(want)
	f := envelope.Confluent(5, want.ProtoReflect().Descriptor())
	framed := append(append([]byte(nil), f.Prefix...), plain...)
	for name, rec := range map[string]*kgo.Record{
		"plain":                       {Value: plain, Headers: envelope.AppendHeaders(nil, nil, nil, nil)},
		"plain without content-type":  {Value: plain},
		"framed":                      {Value: framed, Headers: envelope.AppendHeadersAs(nil, nil, nil, nil, f.Header())},
		"framed without content-type": {Value: framed},
	} {
		got, err := a.Decode(rec)
		if err != nil || !proto.Equal(got, want) {
			t.Errorf("%s: %v %v", name, got, err)
		}
	}
	_, err = a.Decode(&kgo.Record{Value: plain, Headers: envelope.AppendHeadersAs(nil, nil, nil, nil, f.Header())})
	var ie *mysqlsink.InvalidRecordError
	if !errors.As(err, &ie) || ie.Reason != "decode" {
		t.Fatalf("framing claimed, not held: %v", err)
	}
}
