package micproc_test

import (
	"math/rand/v2"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/hyapp/roomflow/internal/config"
	"github.com/hyapp/roomflow/internal/schemareg"
	"github.com/hyapp/roomflow/internal/schemareg/srtest"
	"github.com/hyapp/roomflow/processors/mic/mictest"
	"github.com/hyapp/roomflow/schemas/envelope"
	"github.com/hyapp/roomflow/schemas/userv1"
)

// In kafka.public_wire_format confluent the processor writes, in the same
// transactions, every public record as the plain mode's message framed
// under its topic's schema id (decoded with pkg/sr's serde and a hand
// reader) with the confluent content-type; the internal ledger stays plain.
func TestConfluentWireFormat(t *testing.T) {
	hour := int64(3600_000)
	start := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC).UnixMilli()
	stream := mictest.Generate(rand.New(rand.NewPCG(35, 1)), mictest.Gen{Users: 20, Sessions: 120, StartMs: start,
		SpreadMs: 3 * 24 * hour, MaxLen: 30 * time.Hour, DupRate: 0.1})
	run := func(frames schemareg.Frames) *env {
		e := newMemEnv(t, 2, time.UnixMilli(start).Add(10*24*time.Hour))
		e.cfg.Topics.Frames = frames
		e.produce(stream.Events)
		return e
	}
	plain := run(schemareg.Frames{})
	_, ids := srtest.Registry(t, config.Default().Kafka.Topics)
	framed := run(schemareg.ConfluentFrames(ids))

	tp := plain.cfg.Topics
	for _, c := range []struct {
		topic string
		msg   proto.Message
	}{
		{tp.SessionClosed, &userv1.UserMicSessionClosed{}},
		{tp.DailyStats, &userv1.UserMicDailyStatsUpdated{}},
		{tp.LifetimeStats, &userv1.UserMicLifetimeStatsUpdated{}},
	} {
		want, got := plain.driver().Output(c.topic), framed.driver().Output(c.topic)
		if len(want) == 0 || len(got) != len(want) {
			t.Fatalf("%s: %d framed records, %d plain", c.topic, len(got), len(want))
		}
		for i, r := range got {
			if ct := string(envelope.Header(r, envelope.HeaderContentType)); ct != envelope.ContentTypeConfluent {
				t.Fatalf("%s: content-type %q", c.topic, ct)
			}
			if body := srtest.Decode(t, r.Value, ids[c.topic], proto.Clone(c.msg)); string(body) != string(want[i].Value) {
				t.Fatalf("%s record %d: framed message differs from the plain mode's", c.topic, i)
			}
			if ct := string(envelope.Header(want[i], envelope.HeaderContentType)); ct != envelope.ContentType {
				t.Fatalf("%s: plain mode's content-type %q", c.topic, ct)
			}
		}
	}
	ledger := framed.driver().Output(tp.Ledger)
	if len(ledger) == 0 || ledger[0].Value[0] == 0 || string(envelope.Header(ledger[0], envelope.HeaderContentType)) != envelope.ContentType {
		t.Fatal("the internal ledger must stay plain")
	}
}
