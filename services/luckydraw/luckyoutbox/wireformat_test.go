package luckyoutbox_test

import (
	"context"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/hyapp/roomflow/internal/config"
	"github.com/hyapp/roomflow/internal/schemareg"
	"github.com/hyapp/roomflow/internal/schemareg/srtest"
	"github.com/hyapp/roomflow/schemas/activityv1"
	"github.com/hyapp/roomflow/schemas/envelope"
)

// In kafka.public_wire_format confluent the worker frames each stored
// payload at publish time under the lucky events subject's id with its
// message's index in lucky_events.proto (decoded with pkg/sr's serde and
// a hand reader); a row whose message type the file does not hold is
// retried with its error, never sent plain.
func TestConfluentWireFormat(t *testing.T) {
	e := newEnv(t)
	topics := config.Default().Kafka.Topics
	topics.LuckyEvents = e.kafka.Config.Topics.LuckyEvents
	_, ids := srtest.Registry(t, topics)
	cfg := e.config(nil)
	cfg.Frames = schemareg.ConfluentFrames(ids)
	w := e.worker(cfg)
	now := time.Now().UnixMilli()
	msgs := map[string]proto.Message{
		"LuckyGiftDrawn:d1":     &activityv1.LuckyGiftDrawn{EventId: "LuckyGiftDrawn:d1", AppCode: app, DrawId: "d1", GiftId: "g", RewardCoins: 5},
		"LuckyRewardPending:r1": &activityv1.LuckyRewardPending{EventId: "LuckyRewardPending:r1", AppCode: app, RewardId: "r1", RewardCoins: 9},
		"LuckyPoolChanged:p1":   &activityv1.LuckyPoolChanged{EventId: "LuckyPoolChanged:p1", AppCode: app},
	}
	insert := func(id, messageType string, payload []byte) {
		if _, err := e.db.Exec(`INSERT INTO lucky_outbox (event_id, app_code, event_type, message_type, aggregate_id, kafka_key, payload, status, next_retry_at_ms, created_at_ms, updated_at_ms)
			VALUES (?, ?, 'activity_event', ?, 'd', 'g', ?, 'pending', ?, ?, ?)`, id, app, messageType, payload, now, now, now); err != nil {
			t.Fatal(err)
		}
	}
	for id, m := range msgs {
		b, _ := proto.Marshal(m)
		insert(id, string(m.ProtoReflect().Descriptor().Name()), b)
	}
	insert("Unknown:u1", "NotInLuckyEvents", []byte{8, 1})
	if _, err := w.ProcessBatch(context.Background()); err != nil {
		t.Fatal(err)
	}
	recs := e.kafka.DrainCommitted(t, topics.LuckyEvents)
	if len(recs) != len(msgs) {
		t.Fatalf("%d records, want %d", len(recs), len(msgs))
	}
	for _, rec := range recs {
		id := string(envelope.Header(rec, envelope.HeaderEventID))
		want := msgs[id]
		if want == nil || string(envelope.Header(rec, envelope.HeaderContentType)) != envelope.ContentTypeConfluent {
			t.Fatalf("record %s headers %v", id, rec.Headers)
		}
		got := want.ProtoReflect().New().Interface()
		srtest.Decode(t, rec.Value, ids[topics.LuckyEvents], got)
		if !proto.Equal(got, want) {
			t.Fatalf("%s decoded %v, want %v", id, got, want)
		}
	}
	if r := e.outbox("Unknown:u1"); r.Status != "pending" || r.RetryCount != 1 || !r.LastError.Valid {
		t.Fatalf("unknown message type: %+v, want pending with its error", r)
	}
}
