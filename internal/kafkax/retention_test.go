package kafkax_test

import (
	"testing"
	"time"

	"github.com/hyapp/roomflow/internal/kafkax"
	"github.com/hyapp/roomflow/internal/testenv"
)

// A topic's retention is its retention.ms plus its segment.ms; one kept
// forever is negative; a topic that does not exist is an error.
func TestTopicRetention(t *testing.T) {
	k := testenv.NewKafka(t, testenv.NoTopics())
	adm := k.Admin(t)
	ms := func(v string) *string { return &v }
	if _, err := adm.CreateTopic(ctx(t), 1, 1, map[string]*string{"retention.ms": ms("3600000"), "segment.ms": ms("60000")}, "kept"); err != nil {
		t.Fatal(err)
	}
	if _, err := adm.CreateTopic(ctx(t), 1, 1, map[string]*string{"retention.ms": ms("-1")}, "forever"); err != nil {
		t.Fatal(err)
	}
	got, err := kafkax.TopicRetention(ctx(t), adm, "kept", "forever")
	if err != nil {
		t.Fatal(err)
	}
	if got["kept"] != 61*time.Minute || got["forever"] >= 0 {
		t.Fatalf("retention %v, want kept 1h1m and forever negative", got)
	}
	if _, err := kafkax.TopicRetention(ctx(t), adm, "no-such-topic"); err == nil {
		t.Fatal("a topic that does not exist read without error")
	}
}
