package relay_test

import (
	"context"
	"math"
	"strconv"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/hyapp/roomflow/internal/testenv"
)

// refuseTimestamps makes the fake broker refuse a produce batch holding a
// record stamped more than before behind or after ahead of its clock with
// INVALID_TIMESTAMP, as Kafka does (message.timestamp.before.max.ms and
// after.max.ms); kfake checks no timestamps. The other partitions of such
// a request are answered NOT_LEADER_FOR_PARTITION: the client retries them.
func refuseTimestamps(k *testenv.Kafka, before, after time.Duration) {
	outOfRange := func(batches []byte) bool {
		now := time.Now()
		fp, _ := kgo.ProcessFetchPartition(kgo.ProcessFetchPartitionOpts{},
			&kmsg.FetchResponseTopicPartition{HighWatermark: math.MaxInt64, RecordBatches: batches}, kgo.DefaultDecompressor(), nil)
		for _, r := range fp.Records {
			if r.Timestamp.Before(now.Add(-before)) || r.Timestamp.After(now.Add(after)) {
				return true
			}
		}
		return false
	}
	k.Fake.ControlKey(int16(kmsg.Produce), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		k.Fake.KeepControl()
		req := kreq.(*kmsg.ProduceRequest)
		resp := req.ResponseKind().(*kmsg.ProduceResponse)
		refused := false
		for _, tp := range req.Topics {
			rt := kmsg.NewProduceResponseTopic()
			rt.Topic, rt.TopicID = tp.Topic, tp.TopicID
			for _, p := range tp.Partitions {
				rp := kmsg.NewProduceResponseTopicPartition()
				rp.Partition, rp.ErrorCode = p.Partition, kerr.NotLeaderForPartition.Code
				if outOfRange(p.Records) {
					rp.ErrorCode, refused = kerr.InvalidTimestamp.Code, true
				}
				rt.Partitions = append(rt.Partitions, rp)
			}
			resp.Topics = append(resp.Topics, rt)
		}
		return resp, nil, refused
	})
}

// TestOutOfRangeTimestampsAreRestamped: rows whose occurred_at_ms a broker
// refuses as a record timestamp (two hours ahead: a room-service clock
// running fast; written in µs; zero; two days old on a topic that takes a
// day back) are relayed with the relay's time as their record timestamp,
// their occurred_at_ms header as stored; a dead letter of such a row too.
// Every other record keeps occurred_at_ms, and nothing waits behind them.
func TestOutOfRangeTimestampsAreRestamped(t *testing.T) {
	k := newKafka(t)
	if k.Fake == nil {
		t.Skip("needs kfake: the broker's timestamp check is injected")
	}
	refuseTimestamps(k, 24*time.Hour, time.Hour) // Kafka 4.0's after.max.ms default; before.max.ms set on the topic
	m := testenv.NewMySQL(t)
	cfg := testConfig(t, k)
	start := time.Now()
	x := startRelay(t, cfg, m.DB, nil)

	now := start.UnixMilli()
	row := func(id, room string, occurred int64, payload []byte) outboxRow {
		return outboxRow{eventID: id, eventType: "RoomMicChanged", roomID: room, version: 1, payload: payload, occurred: occurred}
	}
	rows := []outboxRow{
		row("ok-1", "r1", now, payloadFor("ok-1", 64)),
		row("ahead", "r2", start.Add(2*time.Hour).UnixMilli(), payloadFor("ahead", 64)),
		row("micros", "r3", start.UnixMicro(), payloadFor("micros", 64)),
		row("zero", "r4", 0, payloadFor("zero", 64)),
		row("old", "r5", start.Add(-48*time.Hour).UnixMilli(), payloadFor("old", 64)),
		row("empty-ahead", "r6", start.Add(2*time.Hour).UnixMilli(), []byte{}),
		row("ok-2", "r7", now, payloadFor("ok-2", 64)),
	}
	if err := insertRows(context.Background(), m.DB, rows); err != nil {
		t.Fatal(err)
	}
	waitCount(t, k, cfg.Topic, 6, 30*time.Second)
	waitCount(t, k, cfg.DLQTopic, 1, 30*time.Second)
	x.stop(t)
	end := time.Now()

	occurred := map[string]int64{}
	for _, r := range rows {
		occurred[r.eventID] = r.occurred
	}
	restamped := map[string]bool{"ahead": true, "micros": true, "zero": true, "old": true, "empty-ahead": true}
	got := append(drain(t, k, cfg.Topic), drain(t, k, cfg.DLQTopic)...)
	if len(got) != len(rows) {
		t.Fatalf("%d records, want %d", len(got), len(rows))
	}
	for _, r := range got {
		id := r.eventID()
		if h := r.headers["occurred_at_ms"]; h != strconv.FormatInt(occurred[id], 10) {
			t.Errorf("%s: occurred_at_ms header %q, want the stored %d", id, h, occurred[id])
		}
		switch {
		case !restamped[id] && r.ts.UnixMilli() != occurred[id]:
			t.Errorf("%s: timestamp %v, want its occurred_at_ms", id, r.ts)
		case restamped[id] && (r.ts.Before(start.Truncate(time.Millisecond)) || r.ts.After(end)):
			t.Errorf("%s: timestamp %v, want the relay's time (%v..%v)", id, r.ts, start, end)
		}
	}
	for reason, want := range map[string]float64{"future": 3, "not_positive": 1, "refused_by_broker": 1} {
		if n := metric(t, x.reg, "roomflow_relay_restamped_total", "reason", reason); n != want {
			t.Errorf("restamped{reason=%s} = %v, want %v", reason, n, want)
		}
	}
}
