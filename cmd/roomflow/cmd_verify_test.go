package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hyapp/roomflow/internal/testenv"
	"github.com/hyapp/roomflow/producers/relay"
)

// TestVerifyListsAbandonedIDs: verify lists the relay's gap_abandoned
// records (the format relay.Router.GapRecord writes) from the DLQ topic and
// ignores other dead letters.
func TestVerifyListsAbandonedIDs(t *testing.T) {
	k := testenv.NewKafka(t)
	m := testenv.NewMySQL(t)
	router := relay.Router{DLQ: k.Config.Topics.DLQ}
	cl := k.Client(t)
	recs := []*kgo.Record{
		router.GapRecord(relay.Abandoned{From: 900, To: 904, Reason: relay.AbandonMaxOpenGaps, OpenFor: 2 * time.Second}),
		router.GapRecord(relay.Abandoned{From: 17, To: 17, Reason: relay.AbandonMaxAge, OpenFor: time.Hour}),
		{Topic: k.Config.Topics.DLQ, Key: []byte("r1"), Value: []byte{1}, Headers: []kgo.RecordHeader{{Key: "error_reason", Value: []byte("payload_too_large")}}},
	}
	if err := cl.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	out, err := runCLI(t, "mysql:\n  dsn: \""+m.DSN+"\"\nlog:\n  level: error\n"+kafkaYAML(k, 3), "verify", "--idle", "2s")
	if err != nil {
		t.Fatalf("verify: %v\n%s", err, out)
	}
	for _, want := range []string{
		"abandoned outbox ids (the relay gave up waiting; rows committed later with these ids were not relayed): 6 ids in 2 ranges\n",
		"   ids 17-17 (1, max_age, waited 1h0m0s)\n   ids 900-904 (5, max_open_gaps, waited 2s)\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("verify output lacks %q:\n%s", want, out)
		}
	}
}
