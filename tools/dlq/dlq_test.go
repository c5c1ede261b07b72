package dlq

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hyapp/roomflow/internal/cfgerr"
	"github.com/hyapp/roomflow/internal/config"
	"github.com/hyapp/roomflow/internal/testenv"
	"github.com/hyapp/roomflow/producers/relay"
	"github.com/hyapp/roomflow/schemas/envelope"
)

// dlqFixture fills a DLQ topic (2 partitions) with the dead letters of
// every stage, as each writes them (envelope.DeadLetter): a room
// processor reject (0:0), a sink decode error dead-lettered twice by two
// owners (0:1, 0:3, one refused record), another sink decode error (0:2),
// a relay payload too large (0:4, no value), a relay gap_abandoned run
// (0:5) and a record that is no dead letter (1:0).
func dlqFixture(t *testing.T) (*testenv.Kafka, *config.Config) {
	t.Helper()
	k := testenv.NewKafka(t, testenv.Partitions(2))
	tp := k.Config.Topics
	dlq := tp.DLQ
	room := &kgo.Record{Topic: tp.RoomEvents, Partition: 1, Offset: 5, Key: []byte("r1"), Value: []byte("room-bytes"),
		Headers: envelope.AppendHeaders(nil, []byte("e1"), []byte("RoomGiftSent"), []byte("hyapp"))}
	ledger := func(off int64, key, value string) *kgo.Record {
		return &kgo.Record{Topic: tp.MicLedger, Partition: 0, Offset: off, Key: []byte(key), Value: []byte(value),
			Headers: envelope.AppendHeaders(nil, []byte("l"+key), []byte("MicLedgerEntry"), []byte("hyapp"))}
	}
	sinkLetter := func(r *kgo.Record) *kgo.Record {
		return (&envelope.DeadLetter{Stage: "sink", Reason: "decode", Err: errors.New("bad"), From: r}).Build(dlq)
	}
	router := relay.Router{DLQ: dlq, Default: tp.RoomEvents}
	tooLarge, _ := router.Record(&relay.Row{ID: 12, RoomID: "room-1", EventID: "big", EventType: "RoomMicChanged", PayloadBytes: 9 << 20}, relay.DLQTooLarge)
	recs := []*kgo.Record{
		(&envelope.DeadLetter{Stage: "room", Reason: "unknown_rule_version", From: room}).Build(dlq),
		sinkLetter(ledger(20, "7", "\xff\x07")),
		sinkLetter(ledger(21, "8", "\xff\x08")),
		sinkLetter(ledger(20, "7", "\xff\x07")),
		tooLarge,
		router.GapRecord(relay.Abandoned{From: 3, To: 4, Reason: relay.AbandonMaxAge}),
	}
	for _, r := range recs {
		r.Partition = 0
	}
	recs = append(recs, &kgo.Record{Topic: dlq, Partition: 1, Key: []byte("stray"), Value: []byte("x")})
	cl := k.Client(t, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err := cl.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	return k, testenv.Config(t, k, nil)
}

// list is List with 2s idle.
func list(t *testing.T, cfg *config.Config) (string, error) {
	t.Helper()
	var out bytes.Buffer
	err := List(context.Background(), cfg, 2*time.Second, &out)
	return out.String(), err
}

// redriveWith is Redrive with 2s idle and the options set makes.
func redriveWith(t *testing.T, cfg *config.Config, set func(*RedriveOptions)) (string, error) {
	t.Helper()
	var o RedriveOptions
	if set != nil {
		set(&o)
	}
	var out bytes.Buffer
	err := Redrive(context.Background(), cfg, 2*time.Second, o, &out)
	return out.String(), err
}

// fields collapses runs of blanks, so table lines compare by their cells.
func fields(s string) string {
	var lines []string
	for _, l := range strings.Split(s, "\n") {
		lines = append(lines, strings.Join(strings.Fields(l), " "))
	}
	return strings.Join(lines, "\n")
}

// TestDLQList: dlq list counts the letters by stage, error_reason and
// source topic with their DLQ offsets; the sink's repeat is one record.
func TestDLQList(t *testing.T) {
	k, cfg := dlqFixture(t)
	tp := k.Config.Topics
	out, err := list(t, cfg)
	if err != nil {
		t.Fatalf("dlq list: %v\n%s", err, out)
	}
	got := fields(out)
	for _, want := range []string{
		"STAGE ERROR_REASON SOURCE_TOPIC RECORDS REPEATS DLQ_OFFSETS",
		"- not_a_dead_letter - 1 0 1:0",
		"relay gap_abandoned - 1 0 0:5",
		"relay payload_too_large " + tp.RoomEvents + " 1 0 0:4",
		"room unknown_rule_version " + tp.RoomEvents + " 1 0 0:0",
		"sink decode " + tp.MicLedger + " 2 1 0:1-3",
		"6 dead letters (1 repeats) in 5 groups",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("dlq list lacks %q:\n%s", want, out)
		}
	}
}

// TestDLQRedrive: redrive needs a selection; a dry run sends nothing; a
// choice holding a letter without a value or source topic sends nothing
// unless --skip-refused; the sink's letters go back to the mic ledger once
// each (the repeat skipped) with their original key, value and headers and
// no dead-letter header, committed in one transaction.
func TestDLQRedrive(t *testing.T) {
	k, cfg := dlqFixture(t)
	tp := k.Config.Topics
	if _, err := redriveWith(t, cfg, nil); err == nil || !strings.Contains(err.Error(), "--all") {
		t.Fatalf("redrive without a selection: %v", err)
	}
	if _, err := redriveWith(t, cfg, func(o *RedriveOptions) { o.Offsets = "0:x" }); err == nil || !strings.Contains(err.Error(), `"0:x" is not partition:offset`) {
		t.Fatalf("bad --offsets: %v", err)
	}
	out, err := redriveWith(t, cfg, func(o *RedriveOptions) { o.Stage = "sink"; o.DryRun = true })
	if err != nil || !strings.Contains(out, "2 records would be sent (1 repeats skipped, 0 refused); nothing sent") {
		t.Fatalf("dry run: %v\n%s", err, out)
	}
	out, err = redriveWith(t, cfg, func(o *RedriveOptions) { o.Offsets = "0:0-5" })
	if err == nil || !strings.Contains(out, "refused 0:4 (relay payload_too_large): envelope: cannot re-drive: no value") ||
		!strings.Contains(out, "refused 0:5 (relay gap_abandoned): envelope: cannot re-drive: no source topic") {
		t.Fatalf("a choice with letters that cannot be sent: %v\n%s", err, out)
	}
	out, err = redriveWith(t, cfg, func(o *RedriveOptions) { o.Offsets = "1:0" })
	if err == nil || !strings.Contains(out, "refused 1:0") || !strings.Contains(out, "not a dead letter") {
		t.Fatalf("a record that is no dead letter: %v\n%s", err, out)
	}
	if got := k.DrainCommitted(t, tp.MicLedger, tp.RoomEvents); len(got) != 0 {
		t.Fatalf("dry run and refused runs sent %d records", len(got))
	}

	out, err = redriveWith(t, cfg, func(o *RedriveOptions) { o.Stage = "sink" })
	if err != nil || !strings.Contains(out, "sent 2 records in one transaction (1 repeats skipped, 0 refused)") {
		t.Fatalf("redrive --stage sink: %v\n%s", err, out)
	}
	got := k.DrainCommitted(t, tp.MicLedger)
	if len(got) != 2 {
		t.Fatalf("mic ledger holds %d records, want the 2 refused ones once each", len(got))
	}
	byKey := map[string]*kgo.Record{}
	for _, r := range got {
		byKey[string(r.Key)] = r
		if len(r.Headers) != 4 || envelope.Header(r, envelope.HeaderStage) != nil || string(envelope.Header(r, envelope.HeaderEventID)) != "l"+string(r.Key) {
			t.Errorf("redriven %s has headers %v: want the original four, no dead-letter header", r.Key, r.Headers)
		}
	}
	if string(byKey["7"].Value) != "\xff\x07" || string(byKey["8"].Value) != "\xff\x08" {
		t.Errorf("redriven values %q %q", byKey["7"].Value, byKey["8"].Value)
	}

	// Choosing only the repeat (0:3) sends its record.
	out, err = redriveWith(t, cfg, func(o *RedriveOptions) { o.Offsets = "0:3"; o.DryRun = true })
	if err != nil || !strings.Contains(out, "would send 0:3 (sink decode) -> "+tp.MicLedger+` key "7"`) {
		t.Fatalf("redrive of the repeat alone: %v\n%s", err, out)
	}
	out, err = redriveWith(t, cfg, func(o *RedriveOptions) { o.Offsets = "0:0,0:4-5"; o.SkipRefused = true })
	if err != nil || !strings.Contains(out, "sent 1 records in one transaction (0 repeats skipped, 2 refused)") {
		t.Fatalf("redrive --skip-refused: %v\n%s", err, out)
	}
	got = k.DrainCommitted(t, tp.RoomEvents)
	if len(got) != 1 || string(got[0].Key) != "r1" || string(got[0].Value) != "room-bytes" || string(envelope.Header(got[0], envelope.HeaderEventID)) != "e1" {
		t.Fatalf("room events after the redrive: %v", got)
	}
}

// TestDLQRedriveChoiceOfNoLetters: a selection that chooses no letter (a
// mistyped --stage or --reason, offsets past the DLQ's end) is a usage
// error naming the selection, not a successful redrive of nothing.
func TestDLQRedriveChoiceOfNoLetters(t *testing.T) {
	_, cfg := dlqFixture(t)
	for name, set := range map[string]func(*RedriveOptions){
		"--stage sinks":     func(o *RedriveOptions) { o.Stage = "sinks" },
		"--reason decoded":  func(o *RedriveOptions) { o.Reason = "decoded" },
		"--offsets 0:90-99": func(o *RedriveOptions) { o.Offsets = "0:90-99" },
		"--offsets 7:0":     func(o *RedriveOptions) { o.Offsets = "7:0"; o.DryRun = true },
	} {
		out, err := redriveWith(t, cfg, set)
		if !cfgerr.IsUsage(err) || !strings.Contains(err.Error(), "chooses no dead letter") {
			t.Errorf("redrive %s: %v (want a usage error)\n%s", name, err, out)
		}
	}
}

// TestDLQRedriveRefusesLettersOlderThanThePurgeWindow: the DLQ keeps a
// letter after it was re-driven, so `redrive --all` a month later sends
// it again; its event was applied the first time, and once purge deleted
// that consumption row (purge.* windows, 720h) it counts twice. A letter
// dead-lettered longer ago than the window of a table its source topic
// feeds is refused unless --past-window; one whose tables are never
// purged (window 0) is sent.
func TestDLQRedriveRefusesLettersOlderThanThePurgeWindow(t *testing.T) {
	k := testenv.NewKafka(t)
	cfg := testenv.Config(t, k, nil)
	cfg.Purge.LuckyEventConsumption = 0
	tp := k.Config.Topics
	old := time.Now().Add(-40 * 24 * time.Hour)
	letter := func(topic, key string, at time.Time) *kgo.Record {
		from := &kgo.Record{Topic: topic, Offset: int64(key[0]), Key: []byte(key), Value: []byte("v" + key),
			Headers: envelope.AppendHeaders(nil, []byte("e"+key), []byte("T"), []byte("hyapp"))}
		r := (&envelope.DeadLetter{Stage: "sink", Reason: "decode", From: from}).Build(tp.DLQ)
		r.Timestamp = at
		return r
	}
	recs := []*kgo.Record{
		letter(tp.MicLedger, "1", old),                        // 0:0
		letter(tp.RoomEvents, "2", old),                       // 0:1
		letter(tp.LuckyEvents, "3", old),                      // 0:2: lucky_event_consumption is never purged
		letter(tp.MicLedger, "4", time.Now().Add(-time.Hour)), // 0:3
	}
	if err := k.Client(t, kgo.RecordPartitioner(kgo.ManualPartitioner())).ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	out, err := redriveWith(t, cfg, func(o *RedriveOptions) { o.All = true; o.DryRun = true })
	if err == nil || !strings.Contains(out, "refused 0:0 (sink decode)") || !strings.Contains(out, "purge.user_mic_event_consumption (720h0m0s)") ||
		!strings.Contains(out, "refused 0:1 (sink decode)") || strings.Contains(out, "refused 0:2") || strings.Contains(out, "refused 0:3") {
		t.Fatalf("redrive --all of letters older than the purge window: %v\n%s", err, out)
	}
	out, err = redriveWith(t, cfg, func(o *RedriveOptions) { o.All = true; o.PastWindow = true })
	if err != nil || !strings.Contains(out, "sent 4 records") {
		t.Fatalf("redrive --all --past-window: %v\n%s", err, out)
	}
}

// TestDLQRedriveSendsARelayedSizeRecord: a room event as large as the relay
// writes (relay.max_record_bytes, 1 MiB by default) that a processor
// dead-lettered (its producer takes records up to 1 MiB) goes back to the
// room events: kgo's default batch bound (1,000,012 bytes) must not refuse
// what the pipeline itself wrote.
func TestDLQRedriveSendsARelayedSizeRecord(t *testing.T) {
	k := testenv.NewKafka(t, testenv.Partitions(1))
	tp := k.Config.Topics
	big := bytes.Repeat([]byte{7}, relay.DefaultMaxRecordBytes-8<<10)
	room := &kgo.Record{Topic: tp.RoomEvents, Key: []byte("r1"), Value: big,
		Headers: envelope.AppendHeaders(nil, []byte("e1"), []byte("RoomGiftSent"), []byte("hyapp"))}
	letter := (&envelope.DeadLetter{Stage: "room", Reason: "unknown_rule_version", From: room}).Build(tp.DLQ)
	cl := k.Client(t, kgo.ProducerBatchMaxBytes(2<<20))
	if err := cl.ProduceSync(context.Background(), letter).FirstErr(); err != nil {
		t.Fatal(err)
	}
	cfg := testenv.Config(t, k, nil)
	out, err := redriveWith(t, cfg, func(o *RedriveOptions) { o.All = true })
	if err != nil || !strings.Contains(out, "sent 1 records in one transaction") {
		t.Fatalf("redrive of a %d-byte room event: %v\n%s", len(big), err, out)
	}
	if got := k.DrainCommitted(t, tp.RoomEvents); len(got) != 1 || !bytes.Equal(got[0].Value, big) {
		t.Fatalf("room events after the redrive: %d records", len(got))
	}
}
